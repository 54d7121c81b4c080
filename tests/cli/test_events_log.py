"""`cs events log`: the events the service recorded for one tenant, newest first, by type
(exact or a `custom.*` prefix), user and window; never another tenant's; one JSON
document with --json; bad input one `error:` line (docs/architecture.md, "The event log").
The command runs on real time, so the events here are recorded at times before now."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from cs_daemon.outbox import service as outbox

EVENT_FIELDS = {"id", "event_type", "user_id", "test", "created_at", "payload"}


def _record(rt, tenant, kind, payload, ago: timedelta, test=False) -> str:
    with rt.session(tenant.id) as s:
        return outbox.record(s, tenant.id, kind, payload, now=datetime.now(timezone.utc) - ago, test=test)


def _listed(cs, *argv) -> list[dict]:
    code, out, err = cs("events", "log", *argv, "--json")
    assert code == 0, err
    return json.loads(out)["events"]      # fails unless stdout is exactly one JSON document


@pytest.fixture
def logged(rt, make_tenant):
    """Four events of one tenant (oldest first) and one of another."""
    mine, other = make_tenant("Mine"), make_tenant("Other")
    ids = {
        "stage": _record(rt, mine, "user.stage_changed", {"user_id": "u1", "to": "engaged"}, timedelta(hours=3)),
        "paid": _record(rt, mine, "custom.billing.paid", {"user_id": "u2", "data": {"n": 1}}, timedelta(minutes=30)),
        "note": _record(rt, mine, "custom.crm.note", {"user_id": "u1", "data": {}}, timedelta(minutes=10)),
        "action": _record(rt, mine, "external_action.failed", {"action_id": "a1"}, timedelta(minutes=5), test=True),
    }
    foreign = _record(rt, other, "user.stage_changed", {"user_id": "u1"}, timedelta(minutes=1))
    return mine, other, ids, foreign


def test_the_log_lists_a_tenants_events_newest_first_and_never_another_tenants(cs, logged):
    mine, other, ids, foreign = logged
    events = _listed(cs, "--tenant", mine.id)
    assert [e["id"] for e in events] == [ids["action"], ids["note"], ids["paid"], ids["stage"]]
    assert foreign not in [e["id"] for e in events]
    assert all(set(e) == EVENT_FIELDS for e in events)
    paid = events[2]
    assert (paid["event_type"], paid["user_id"], paid["test"]) == ("custom.billing.paid", "u2", False)
    assert paid["payload"] == {"event": "custom.billing.paid", "user_id": "u2", "data": {"n": 1}}
    assert datetime.fromisoformat(paid["created_at"]) < datetime.now(timezone.utc) - timedelta(minutes=29)
    assert (events[0]["user_id"], events[0]["test"]) == (None, True)      # a payload without a user
    assert [e["id"] for e in _listed(cs, "--tenant", other.id)] == [foreign]


def test_the_log_filters_by_type_prefix_user_window_and_limit(cs, logged):
    mine, _, ids, _ = logged

    def listed(*argv):
        return [e["id"] for e in _listed(cs, "--tenant", mine.id, *argv)]

    assert listed("--type", "user.stage_changed") == [ids["stage"]]
    assert listed("--type", "custom.*") == [ids["note"], ids["paid"]]
    assert listed("--type", "custom") == []                               # exact unless it ends in *
    assert listed("--user", "u1") == [ids["note"], ids["stage"]]
    assert listed("--user", "u1", "--type", "custom.*") == [ids["note"]]
    assert listed("--since", "1h") == [ids["action"], ids["note"], ids["paid"]]
    assert listed("--since", "1h", "--user", "u1") == [ids["note"]]
    assert listed("--limit", "2") == [ids["action"], ids["note"]]
    assert listed("--since", "1m") == []


def test_the_log_is_a_table_by_default(cs, logged):
    mine, _, _, _ = logged
    code, out, err = cs("events", "log", "--tenant", mine.id, "--type", "custom.*")
    assert code == 0, err
    assert "Event log" in out and "custom.crm.note" in out and "custom.billing.paid" in out
    assert "user.stage_changed" not in out
    code, out, _ = cs("events", "log", "--tenant", mine.id, "--since", "1s")
    assert code == 0 and "no events match" in out


def test_the_service_lists_only_the_sessions_tenant(rt, logged):
    mine, other, ids, foreign = logged
    with rt.session(other.id) as s:
        assert [r.id for r in outbox.listing(s)] == [foreign]
        assert outbox.listing(s, user_id="u2") == []
    with rt.session(mine.id) as s:
        assert [r.id for r in outbox.listing(s, event_type="user.*")] == [ids["stage"]]


@pytest.mark.parametrize("argv, words", [
    (["--since", "yesterday"], "--since"),
    (["--since", "0h"], "--since"),
    (["--limit", "0"], "--limit"),
    (["--type", "custom.*.paid"], "--type"),
    (["--type", ""], "--type"),
    (["--user", "x" * 256], "--user"),
])
def test_bad_input_is_one_clear_line_and_non_zero(cs, make_tenant, argv, words):
    tenant = make_tenant()
    code, out, err = cs("events", "log", "--tenant", tenant.id, *argv)
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and words in lines[0]
    assert out == ""


def test_an_unknown_tenant_is_one_error_line(cs):
    code, out, err = cs("events", "log", "--tenant", "no-such-tenant")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("error:") and "tenant not found" in lines[0]
    assert out == ""
