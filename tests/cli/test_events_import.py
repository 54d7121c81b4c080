"""`cs events import`: backfill through the one ingest path (source `import`), bad lines
reported with their number and reason, one JSON document with --json."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from cs_daemon.customers.models import Event
from cs_daemon.tenants.models import Tenant

from tests.conftest import auth


def _write(tmp_path, lines, name="events.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n")
    return path


def _events(rt, tenant_id) -> list[Event]:
    with rt.session(tenant_id) as s:
        return list(s.scalars(select(Event).order_by(Event.timestamp, Event.event)))


def _json(out: str):
    return json.loads(out)  # fails unless stdout is exactly one JSON document


def test_jsonl_import_reports_bad_lines_and_goes_on(cs, tenant, rt, tmp_path):
    path = _write(tmp_path, [
        {"user_id": "u1", "event": "signed_up", "timestamp": "2026-10-01T10:00:00Z", "idempotency_key": "k1"},
        "{not json",
        {"event": "no_user"},
        "",
        {"user_id": "u1", "event": "signed_up", "idempotency_key": "k1"},
        {"user_id": "u2", "event": "created_project", "properties": {"n": 1}},
        {"user_id": "u3", "event": "x", "timestamp": "yesterday"},
        '{"user_id": "u4", "event": "x", "properties": {"v": 1e400}}',
    ])
    code, out, _ = cs("events", "import", str(path), "--tenant", tenant.id, "--json")
    assert code == 0
    body = _json(out)
    assert set(body) == {"accepted", "duplicates", "over_limit", "rejected"}
    assert (body["accepted"], body["duplicates"], body["over_limit"]) == (2, 1, 0)
    assert [r["line"] for r in body["rejected"]] == [2, 3, 7, 8]
    assert "JSON" in body["rejected"][0]["error"]
    assert "1e400 is too large a number" in body["rejected"][3]["error"]
    assert "user_id" in body["rejected"][1]["error"]
    assert "timestamp" in body["rejected"][2]["error"]
    events = _events(rt, tenant.id)
    assert [(e.user_id, e.event, e.source) for e in events] == [
        ("u1", "signed_up", "import"), ("u2", "created_project", "import")]
    assert events[0].timestamp.isoformat() == "2026-10-01T10:00:00+00:00"


def test_a_file_larger_than_a_batch_is_imported_whole_and_a_rerun_is_all_duplicates(cs, tenant, rt, tmp_path):
    path = _write(tmp_path, [{"user_id": f"u{i % 7}", "event": "clicked", "idempotency_key": f"k{i}"}
                             for i in range(250)])
    code, out, _ = cs("events", "import", str(path), "--tenant", tenant.id, "--json")
    assert code == 0 and _json(out) == {"accepted": 250, "duplicates": 0, "over_limit": 0, "rejected": []}
    code, out, _ = cs("events", "import", str(path), "--tenant", tenant.id, "--json")
    assert _json(out) == {"accepted": 0, "duplicates": 250, "over_limit": 0, "rejected": []}
    assert len(_events(rt, tenant.id)) == 250


PLATFORM_LINES = {
    "segment": [
        {"type": "identify", "userId": "ada", "messageId": "s1", "traits": {"email": "ada@example.com", "plan": "pro"}},
        {"type": "track", "userId": "ada", "event": "Created Project", "messageId": "s2",
         "timestamp": "2026-10-30T08:00:00Z"},
        {"type": "track", "event": "no user"},
    ],
    "mixpanel": [
        {"$distinct_id": "ada", "$set": {"$email": "ada@example.com", "plan": "pro"}},
        {"event": "Created Project", "properties": {"distinct_id": "ada", "time": 1793347200, "$insert_id": "s2"}},
        {"event": "no user", "properties": {}},
    ],
    "amplitude": [
        {"user_id": "ada", "event_type": "$identify", "insert_id": "s1",
         "user_properties": {"$set": {"email": "ada@example.com", "plan": "pro"}}},
        {"user_id": "ada", "event_type": "Created Project", "$insert_id": "s2",
         "event_time": "2026-10-30 08:00:00.000000"},
        {"event_type": "no user"},
    ],
}


@pytest.mark.parametrize("fmt", sorted(PLATFORM_LINES))
def test_platform_formats_are_normalised_by_their_connector(cs, tenant, rt, client, tmp_path, fmt):
    path = _write(tmp_path, PLATFORM_LINES[fmt])
    code, out, _ = cs("events", "import", str(path), "--tenant", tenant.id, "--format", fmt, "--json")
    assert code == 0
    body = _json(out)
    assert body["accepted"] == 2 and [r["line"] for r in body["rejected"]] == [3]
    ada = client.get("/api/customers/ada", headers=auth(tenant.key)).json["customer"]
    assert ada["email"] == "ada@example.com" and ada["traits"] == {"plan": "pro"}
    events = _events(rt, tenant.id)
    assert [e.event for e in events if e.event != "$identify"] == ["Created Project"]
    assert all(e.source == "import" for e in events)
    created = [e for e in events if e.event == "Created Project"][0]
    assert created.idempotency_key == "s2"
    assert created.timestamp.isoformat() == "2026-10-30T08:00:00+00:00"


def test_events_of_new_users_past_the_limit_are_counted(cs, tenant, rt, tmp_path):
    with rt.session() as s:
        s.get(Tenant, tenant.id).tracked_user_limit = 1
    path = _write(tmp_path, [{"user_id": "a", "event": "x"}, {"user_id": "b", "event": "x"}])
    code, out, _ = cs("events", "import", str(path), "--tenant", tenant.id, "--json")
    assert _json(out) == {"accepted": 1, "duplicates": 0, "over_limit": 1, "rejected": []}


def test_the_human_summary_names_the_rejected_lines_and_progress_goes_to_stderr(cs, tenant, tmp_path):
    path = _write(tmp_path, [{"user_id": "u", "event": "x"}, "[1, 2]"])
    code, out, err = cs("events", "import", str(path), "--tenant", tenant.id)
    assert code == 0
    assert "1 accepted" in out and "1 lines rejected" in out
    assert "Rejected lines" in out and "2" in out
    assert "importing events.jsonl" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, words", [
    (["events", "import", "/no/such/file.jsonl", "--tenant", "{tenant}"], "no such file"),
    (["events", "import", "{file}", "--tenant", "nope"], "tenant not found"),
    (["events", "import", "{file}", "--tenant", "{tenant}", "--format", "csv"], "--format"),
])
def test_a_missing_file_or_tenant_is_one_clear_line(cs, tenant, tmp_path, argv, words):
    path = _write(tmp_path, [{"user_id": "u", "event": "x"}])
    code, out, err = cs(*[a.replace("{file}", str(path)).replace("{tenant}", tenant.id) for a in argv])
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and words in lines[0]


def test_a_missing_tenant_with_json_is_one_json_error(cs, tmp_path):
    path = _write(tmp_path, [{"user_id": "u", "event": "x"}])
    code, out, _ = cs("events", "import", str(path), "--tenant", "nope", "--json")
    assert code == 1 and _json(out) == {"error": "tenant not found: no tenant has the id or slug 'nope'; `cs tenant list` shows them",
                                   "code": "not_found"}


def test_an_amplitude_line_with_user_properties_counts_as_one_event(cs, tenant, rt, tmp_path):
    line = {"user_id": "ada", "event_type": "Created Project", "insert_id": "a-1",
            "user_properties": {"$set": {"email": "ada@example.com"}}}
    path = _write(tmp_path, [line])
    code, out, _ = cs("events", "import", str(path), "--tenant", tenant.id, "--format", "amplitude", "--json")
    assert code == 0 and _json(out) == {"accepted": 1, "duplicates": 0, "over_limit": 0, "rejected": []}
    assert sorted(e.event for e in _events(rt, tenant.id)) == ["$identify", "Created Project"]
    code, out, _ = cs("events", "import", str(path), "--tenant", tenant.id, "--format", "amplitude", "--json")
    assert _json(out) == {"accepted": 0, "duplicates": 1, "over_limit": 0, "rejected": []}
