"""Outbound webhooks: endpoints, signed deliveries on the retry schedule, the log, replay
and the SSRF guard, against a real receiver on loopback (docs/webhooks.md)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from cs_daemon.clock import FakeClock
from cs_daemon.customers import service as customers
from cs_daemon.delivery import service as delivery
from cs_daemon.db import in_autocommit
from cs_daemon.delivery.models import Delivery
from cs_daemon.outbox import service as outbox
from cs_daemon.runtime import Runtime
from tests.conftest import auth
from tests.support import sql
from tests.support.receiver import Receiver


@pytest.fixture
def growth(make_tenant):
    return make_tenant("Hooks", plan_tier="growth")


def register(client, tenant, url, events=None):
    body = {"url": url, "description": "ops"}
    if events is not None:
        body["events"] = events
    resp = client.post("/api/webhooks/endpoints", headers=auth(tenant.key), json=body)
    assert resp.status_code == 201, resp.json
    return resp.json["endpoint"]


def emit(rt, tenant, kind="user.risk_changed", payload=None):
    with rt.session(tenant.id) as s:
        return outbox.record(s, tenant.id, kind, payload or {"user_id": "u1", "previous_risk": "low",
                                                             "new_risk": "high", "changed_at": "t"}, now=rt.now())


def deliveries(rt, tenant):
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(Delivery).order_by(Delivery.created_at)))


# -- endpoints ---------------------------------------------------------------------------

def test_register_returns_the_secret_once_and_never_lists_it(client, growth, receiver):
    endpoint = register(client, growth, receiver.url, ["user.risk_changed", "custom.*"])
    assert re.fullmatch(r"[0-9a-f]{64}", endpoint["secret"])
    assert endpoint["subscribed_events"] == ["user.risk_changed", "custom.*"] and endpoint["active"] is True
    listed = client.get("/api/webhooks/endpoints", headers=auth(growth.key)).json["endpoints"]
    assert [e["id"] for e in listed] == [endpoint["id"]]
    assert "secret" not in listed[0] and endpoint["secret"] not in json.dumps(listed)


def test_a_url_is_kept_and_shown_as_sent(client, growth, receiver):
    """Checked as a URL, never rewritten: no slash added, the host's case kept; a space is
    refused (percent-encoded it is a URL)."""
    bare = receiver.url.rstrip("/").replace("127.0.0.1", "localhost").upper().replace("HTTP://", "http://")
    sent = [bare, receiver.url + "/Hook?A=1", receiver.url + "/a%20b"]
    for url in sent:
        endpoint = register(client, growth, url)
        assert endpoint["url"] == url
    listed = client.get("/api/webhooks/endpoints", headers=auth(growth.key)).json["endpoints"]
    assert sorted(e["url"] for e in listed) == sorted(sent)
    resp = client.put(f"/api/webhooks/endpoints/{endpoint['id']}", headers=auth(growth.key), json={"url": bare + "/X"})
    assert resp.status_code == 200 and resp.json["endpoint"]["url"] == bare + "/X"
    for bad in (receiver.url + "/a b", "not a url", "notaurl"):
        resp = client.post("/api/webhooks/endpoints", headers=auth(growth.key), json={"url": bad})
        assert resp.status_code == 400 and resp.json["details"][0]["field"] == "url"
    assert client.post("/api/webhooks/endpoints/" + endpoint["id"] + "/test", headers=auth(growth.key)).json[
        "test"]["success"] is True   # the upper-case host is reached as the lower-case one


def test_plans_without_webhooks_get_403_with_upgrade_to(client, tenant, receiver):
    resp = client.post("/api/webhooks/endpoints", headers=auth(tenant.key), json={"url": receiver.url})
    assert resp.status_code == 403
    assert resp.json["code"] == "feature_not_on_plan" and resp.json["upgrade_to"] == "growth"


def _fill(rt, tenant, count):
    """`count` active endpoints made straight in the database."""
    from cs_daemon.webhooks.models import WebhookEndpoint

    with rt.session(tenant.id) as s:
        s.add_all([WebhookEndpoint(url=f"https://hooks.example/{n}", secret_enc="x", active=True,
                                   created_at=rt.now(), updated_at=rt.now()) for n in range(count)])


def test_a_plan_holds_a_bounded_number_of_active_endpoints(client, growth, rt, receiver, make_tenant):
    h = auth(growth.key)
    _fill(rt, growth, 19)
    last = register(client, growth, receiver.url)                                   # the 20th
    resp = client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url})
    assert resp.status_code == 403, resp.json
    assert resp.json["code"] == "plan_limit" and "20" in resp.json["error"]
    assert (resp.json["current"], resp.json["limit"], resp.json["upgrade_to"]) == (20, 20, "scale")
    assert len(client.get("/api/webhooks/endpoints", headers=h).json["endpoints"]) == 20     # nothing stored
    assert client.delete(f"/api/webhooks/endpoints/{last['id']}", headers=h).status_code == 200
    register(client, growth, receiver.url)                   # a deleted endpoint frees its place

    scale = make_tenant("Big", plan_tier="scale")
    _fill(rt, scale, 100)
    resp = client.post("/api/webhooks/endpoints", headers=auth(scale.key), json={"url": receiver.url})
    assert resp.status_code == 403 and (resp.json["limit"], resp.json["upgrade_to"]) == (100, None)


def test_concurrent_registrations_never_pass_the_plan_limit(app, growth, rt, receiver):
    import requests
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.sse import AppServer

    _fill(rt, growth, 17)
    server = AppServer(app)
    try:
        with ThreadPoolExecutor(10) as pool:
            codes = list(pool.map(lambda _: requests.post(
                f"{server.url}/api/webhooks/endpoints", headers=auth(growth.key), json={"url": receiver.url},
                timeout=30).status_code, range(10)))
    finally:
        server.close()
    assert sorted(codes) == [201] * 3 + [403] * 7, codes
    from cs_daemon.webhooks import service as webhooks

    with rt.session(growth.id) as s:
        assert webhooks.count_active(s) == 20


@pytest.mark.parametrize("events, ok", [
    (["custom.*"], True), (["custom.loyalty.points_awarded"], True), (["webhook.test"], True),
    (["user.lifecycle_changed", "intervention.failed"], True),
    (["user.unknown"], False), (["custom.Loyalty.x"], False), (["custom.single"], False), (["*"], False),
])
def test_subscriptions_are_validated(client, growth, receiver, events, ok):
    resp = client.post("/api/webhooks/endpoints", headers=auth(growth.key), json={"url": receiver.url, "events": events})
    assert resp.status_code == (201 if ok else 400)
    if not ok:
        assert resp.json["details"][0]["field"] == "events[0]"
        assert client.get("/api/webhooks/endpoints", headers=auth(growth.key)).json["endpoints"] == []


def test_update_delete_and_404s(client, growth, make_tenant, receiver):
    endpoint = register(client, growth, receiver.url)
    h = auth(growth.key)
    resp = client.put(f"/api/webhooks/endpoints/{endpoint['id']}", headers=h,
                      json={"events": ["user.stage_changed"], "description": "new"})
    assert resp.status_code == 200
    body = resp.json["endpoint"]
    assert body["subscribed_events"] == ["user.stage_changed"] and body["description"] == "new"
    assert set(body) >= {"id", "url", "description", "subscribed_events", "active", "updated_at"}
    assert client.put(f"/api/webhooks/endpoints/{endpoint['id']}", headers=h, json={"events": None}).json[
        "endpoint"]["subscribed_events"] is None
    assert client.delete(f"/api/webhooks/endpoints/{endpoint['id']}", headers=h).json == {"deleted": True}
    assert client.get("/api/webhooks/endpoints", headers=h).json["endpoints"] == []
    other = make_tenant("Other", plan_tier="growth")
    for method in ("put", "delete"):
        resp = getattr(client, method)(f"/api/webhooks/endpoints/{endpoint['id']}", headers=auth(other.key), json={})
        assert resp.status_code == 404
    assert client.post("/api/webhooks/endpoints/nope/test", headers=h).status_code == 404


def test_a_deleted_endpoint_cannot_be_sent_a_test(client, growth, rt, receiver):
    endpoint = register(client, growth, receiver.url)
    h = auth(growth.key)
    assert client.delete(f"/api/webhooks/endpoints/{endpoint['id']}", headers=h).status_code == 200
    resp = client.post(f"/api/webhooks/endpoints/{endpoint['id']}/test", headers=h)
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    assert receiver.requests == [] and deliveries(rt, growth) == []   # nothing sent, nothing logged


def test_a_test_send_under_the_kill_switch_says_so_and_never_goes_later(client, growth, rt, receiver):
    """It answered 'could not be sent', waited for the switch, and went out when it was
    turned off, long after."""
    endpoint = register(client, growth, receiver.url)
    h = auth(growth.key)
    assert client.put("/api/settings/kill-switch", headers=h, json={"active": True}).status_code == 200
    test = client.post(f"/api/webhooks/endpoints/{endpoint['id']}/test", headers=h).json["test"]
    assert test["success"] is False and "kill switch" in test["error"]
    assert deliveries(rt, growth) == []
    assert client.put("/api/settings/kill-switch", headers=h, json={"active": False}).status_code == 200
    assert deliveries(rt, growth) == [] and receiver.requests == []


def test_a_failed_test_send_gives_its_error_and_no_null(client, growth):
    # nothing listens on port 9: no answer, so no status; the error is a string
    endpoint = register(client, growth, "http://127.0.0.1:9/hook")
    resp = client.post(f"/api/webhooks/endpoints/{endpoint['id']}/test", headers=auth(growth.key))
    assert resp.status_code == 200
    test = resp.json["test"]
    assert test["success"] is False and isinstance(test["error"], str) and test["error"]
    assert None not in test.values() and "status" not in test


# -- signing ------------------------------------------------------------------------------

def test_test_send_is_signed_over_the_raw_body(client, growth, receiver):
    endpoint = register(client, growth, receiver.url)
    resp = client.post(f"/api/webhooks/endpoints/{endpoint['id']}/test", headers=auth(growth.key))
    assert resp.status_code == 200
    # `error` is a string, never null: a success has none (docs/api.md, "Other choices")
    assert resp.json["test"] == {"success": True, "status": 200, "status_text": "OK"}
    [req] = receiver.requests
    expected = hmac.new(endpoint["secret"].encode(), req.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(req.headers["X-Service-Signature"], expected)
    assert req.headers["User-Agent"] == "Service-Webhook/1.0"
    assert req.headers["Content-Type"] == "application/json"
    assert json.loads(req.body)["event"] == "webhook.test"
    assert req.headers["X-Service-Timestamp"].endswith("Z")


def test_standard_webhooks_signature_verifies(settings, make_tenant, receiver):
    import base64

    from standardwebhooks.webhooks import Webhook
    from webapp import create_app

    rt = Runtime(settings, FakeClock(datetime.now(timezone.utc)))
    client = create_app(runtime=rt).test_client()
    with rt.session() as s:
        from cs_daemon.tenants import service as tenants

        made = tenants.create(s, name="Std", owner_email="o@std.example", now=rt.now(), plan_tier="growth")
    resp = client.post("/api/webhooks/endpoints", headers=auth(made.key.secret), json={"url": receiver.url})
    secret = resp.json["endpoint"]["secret"]
    client.post(f"/api/webhooks/endpoints/{resp.json['endpoint']['id']}/test", headers=auth(made.key.secret))
    [req] = receiver.requests
    hook = Webhook("whsec_" + base64.b64encode(secret.encode()).decode())
    assert hook.verify(req.body, req.headers)["event"] == "webhook.test"


# -- fan-out and the retry schedule --------------------------------------------------------

def test_stage_changes_from_ingest_reach_subscribed_active_endpoints_only(client, growth, rt, clock, receiver):
    wanted = register(client, growth, receiver.url, ["user.stage_changed"])
    register(client, growth, receiver.url, ["outcome.recorded"])
    gone = register(client, growth, receiver.url)
    client.delete(f"/api/webhooks/endpoints/{gone['id']}", headers=auth(growth.key))
    h = auth(growth.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "x"}]})
    clock.advance(days=15)
    with rt.session() as s:
        customers.sweep(s, now=clock.now())   # u1 turns dormant
    made = deliveries(rt, growth)
    assert {d.endpoint_id for d in made} == {wanted["id"]}
    assert {d.event_type for d in made} == {"user.stage_changed"}
    body = json.loads(made[0].body)
    assert body["event"] == "user.stage_changed" and body["user_id"] == "u1"
    assert set(body) == {"event", "user_id", "previous_stage", "new_stage", "changed_at"}


def test_500_twice_then_200_makes_three_attempts_on_schedule(client, growth, rt, clock, receiver):
    receiver.script = [500, 500, 200]
    endpoint = register(client, growth, receiver.url)
    event_id = emit(rt, growth)
    [made] = deliveries(rt, growth)
    t0 = clock.now()
    assert delivery.attempt(rt, made.id) == "retrying"
    assert delivery.attempt(rt, made.id) is None          # not due yet: no second attempt
    clock.advance(seconds=29)
    with rt.session() as s:
        assert delivery.due(s, clock.now()) == []
    clock.advance(seconds=1)
    with rt.session() as s:
        assert delivery.due(s, clock.now()) == [made.id]
    assert delivery.attempt(rt, made.id) == "retrying"
    clock.advance(minutes=2)
    assert delivery.attempt(rt, made.id) == "delivered"
    assert len(receiver.requests) == 3
    assert len({r.headers["webhook-id"] for r in receiver.requests}) == 1
    assert {r.headers["X-Service-Event-Id"] for r in receiver.requests} == {event_id}
    assert len({r.body for r in receiver.requests}) == 1
    log = client.get(f"/api/webhooks/endpoints/{endpoint['id']}/deliveries", headers=auth(growth.key)).json
    [entry] = log["deliveries"]
    assert entry["status"] == "delivered" and entry["event_id"] == event_id
    assert [a["number"] for a in entry["attempts"]] == [1, 2, 3]
    assert [a["status_code"] for a in entry["attempts"]] == [500, 500, 200]
    times = [datetime.fromisoformat(a["at"]) for a in entry["attempts"]]
    assert times == [t0, t0 + timedelta(seconds=30), t0 + timedelta(seconds=150)]
    assert entry["attempts"][0]["error"] == "HTTP 500" and entry["attempts"][0]["response_excerpt"]
    assert all(a["latency_ms"] >= 0 for a in entry["attempts"])


def test_six_failures_fail_for_good_and_no_seventh_attempt(client, growth, rt, clock, receiver):
    receiver.script = [503]
    register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    delays = [timedelta(0)] + list(delivery.RETRY_DELAYS)
    for delay in delays:
        clock.advance(seconds=delay.total_seconds())
        result = delivery.attempt(rt, made.id)
    assert result == "failed"
    with rt.session() as s:
        final = delivery.get(s, made.id)
        assert final.attempts == 6 and final.next_attempt_at is None
    clock.advance(days=3)
    assert delivery.attempt(rt, made.id) is None
    with rt.session() as s:
        assert delivery.due(s, clock.now()) == []
    assert len(receiver.requests) == 6


def test_two_copies_of_a_message_make_one_attempt(client, growth, rt, receiver):
    register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    with rt.session() as s:
        first = delivery.claim(s.connection(), made.id, rt.now())
    with rt.session() as s:
        assert delivery.claim(s.connection(), made.id, rt.now()) is None
    assert first is not None
    assert delivery.attempt(rt, made.id) is None
    assert receiver.requests == []


def test_a_time_out_is_a_failed_attempt(client, growth, rt, receiver, monkeypatch):
    monkeypatch.setattr(delivery, "DEADLINE_SECONDS", 0.5)
    receiver.script = [("hang", 3)]
    register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    assert delivery.attempt(rt, made.id) == "retrying"
    with rt.session(growth.id) as s:
        [attempt] = delivery.attempts_of(s, [made.id])[made.id]
    assert attempt.status_code is None and "timed out" in attempt.error


def test_a_redirect_is_a_failure_and_its_target_is_never_contacted(client, growth, rt, receiver):
    target = Receiver()
    try:
        receiver.script = [("redirect", target.url)]
        register(client, growth, receiver.url)
        emit(rt, growth)
        [made] = deliveries(rt, growth)
        assert delivery.attempt(rt, made.id) == "retrying"
        with rt.session(growth.id) as s:
            [attempt] = delivery.attempts_of(s, [made.id])[made.id]
        assert attempt.status_code == 302 and "redirect" in attempt.error
        assert target.requests == []
    finally:
        target.close()


def test_410_deactivates_the_endpoint(client, growth, rt, receiver):
    receiver.script = [410]
    endpoint = register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    assert delivery.attempt(rt, made.id) == "failed"
    assert client.get("/api/webhooks/endpoints", headers=auth(growth.key)).json["endpoints"] == []
    emit(rt, growth)
    assert len(deliveries(rt, growth)) == 1  # an inactive endpoint gets nothing new
    assert endpoint["id"]


@pytest.mark.parametrize("how", ["delete", "410"])
def test_deactivating_an_endpoint_cancels_its_deliveries_still_to_go(client, growth, rt, clock, receiver, how):
    """A retry due after a DELETE (or after another of its deliveries met a 410) is not
    sent: the deliveries still open are cancelled, the log says so, a replay refuses them,
    and the other endpoint's are untouched."""
    receiver.script = [500, 500, 410] if how == "410" else [500, 500]
    endpoint = register(client, growth, receiver.url)
    other = Receiver()
    try:
        register(client, growth, other.url)
        emit(rt, growth), emit(rt, growth)
        mine = [d for d in deliveries(rt, growth) if d.endpoint_id == endpoint["id"]]
        assert len(mine) == 2
        assert [delivery.attempt(rt, d.id) for d in mine] == ["retrying", "retrying"]
        if how == "delete":
            assert client.delete(f"/api/webhooks/endpoints/{endpoint['id']}", headers=auth(growth.key)).status_code == 200
        else:
            clock.advance(seconds=30)
            assert delivery.attempt(rt, mine[0].id) == "failed"      # 410: the endpoint is let go
        clock.advance(minutes=5)
        with rt.session() as s:
            due = delivery.due(s, clock.now())
        assert not {d.id for d in mine} & set(due)
        assert [delivery.attempt(rt, d.id) for d in mine] == [None, None]
        assert len(receiver.requests) == (3 if how == "410" else 2)
        log = client.get(f"/api/webhooks/endpoints/{endpoint['id']}/deliveries", headers=auth(growth.key)).json
        assert sorted(e["status"] for e in log["deliveries"]) == (
            ["canceled", "failed"] if how == "410" else ["canceled", "canceled"])
        only = client.get(f"/api/webhooks/endpoints/{endpoint['id']}/deliveries?status=canceled",
                          headers=auth(growth.key)).json["deliveries"]
        assert [e["status"] for e in only] == ["canceled"] * (1 if how == "410" else 2)
        replay = client.post(f"/api/webhooks/deliveries/{mine[1].id}/replay", headers=auth(growth.key))
        assert replay.status_code == 409 and replay.json["code"] == "invalid_state"
        assert len(due) == 2 and all(delivery.attempt(rt, d) == "delivered" for d in due)   # the other endpoint's
    finally:
        other.close()


class Recorded(sql.Watching):
    """The SQL the runtime runs while open, each with whether its connection was in
    autocommit (no BEGIN or COMMIT round trip around it)."""

    def __init__(self, rt: Runtime):
        self.seen = []
        super().__init__(rt.settings, self._note)

    def _note(self, conn, cursor, statement, *args):
        self.seen.append((statement, in_autocommit(conn)))

    def writing(self, table: str) -> list[tuple[str, bool]]:
        return [(s, alone) for s, alone in self.seen if f"INSERT INTO {table}" in s or f"UPDATE {table}" in s]


def test_a_delivered_attempt_is_logged_and_settled_in_one_statement_on_postgresql(client, growth, rt, receiver,
                                                                                   backend):
    register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    with Recorded(rt) as sql:
        assert delivery.attempt(rt, made.id) == "delivered"
    claim, *record = sql.writing("deliveries")
    assert claim[1] and "locked_until" in claim[0]    # the claim: one statement outside any transaction
    if backend == "postgres":
        [(statement, alone)] = record + sql.writing("delivery_attempts")[1:]
        assert alone and "INSERT INTO delivery_attempts" in statement and "UPDATE deliveries" in statement
    else:                                             # SQLite's CTEs cannot write: two statements, one transaction
        assert [alone for _, alone in sql.writing("delivery_attempts") + record] == [False, False]
    with rt.session(growth.id) as s:
        [attempt] = delivery.attempts_of(s, [made.id])[made.id]
        assert attempt.status_code == 200 and delivery.get(s, made.id).status == "delivered"


def test_an_attempt_a_listener_follows_is_recorded_with_it_in_one_transaction(client, growth, rt, receiver):
    receiver.script = [410]
    register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    with Recorded(rt) as sql:
        assert delivery.attempt(rt, made.id) == "failed"
    writes = sql.writing("delivery_attempts") + sql.writing("deliveries")[1:] + sql.writing("webhook_endpoints")
    assert len(writes) >= 2 and not any(alone for _, alone in writes)


def test_an_attempt_whose_record_was_committed_but_unanswered_is_not_logged_twice(client, growth, rt, receiver,
                                                                                   monkeypatch):
    register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    with rt.session(atomic=False) as s:
        claimed = delivery.claim(s.connection(), made.id, rt.now())
    outcome = delivery.send(rt, claimed, rt.now())
    with rt.session(atomic=False) as s:
        assert delivery.record(s, claimed, outcome, at=rt.now(), now=rt.now(), attempt_id="a1") == "delivered"
    monkeypatch.setattr(delivery, "new_id", lambda: "a1")   # the try after a lost answer: the same attempt id
    assert delivery.record_surely(rt, claimed, outcome, at=rt.now()) is None
    with rt.session(growth.id) as s:
        assert [a.id for a in delivery.attempts_of(s, [made.id])[made.id]] == ["a1"]


def test_replay_of_a_failed_delivery_sends_it_again_and_logs_it(client, growth, rt, clock, receiver):
    receiver.script = [500] * 6 + [200]
    endpoint = register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    for delay in [timedelta(0)] + list(delivery.RETRY_DELAYS):
        clock.advance(seconds=delay.total_seconds())
        delivery.attempt(rt, made.id)
    h = auth(growth.key)
    failed = client.get(f"/api/webhooks/endpoints/{endpoint['id']}/deliveries?status=failed", headers=h).json
    assert [d["id"] for d in failed["deliveries"]] == [made.id]
    resp = client.post(f"/api/webhooks/deliveries/{made.id}/replay", headers=h)
    assert resp.status_code == 200
    replayed = resp.json["delivery"]
    assert replayed["id"] == made.id and replayed["status"] == "delivered"
    assert [a["number"] for a in replayed["attempts"]] == [1, 2, 3, 4, 5, 6, 7]
    assert len(receiver.requests) == 7
    assert receiver.requests[-1].headers["webhook-id"] == receiver.requests[0].headers["webhook-id"] == made.id
    assert client.get(f"/api/webhooks/endpoints/{endpoint['id']}/deliveries?status=failed", headers=h).json[
        "deliveries"] == []


def test_no_replay_to_a_deleted_endpoint(client, growth, rt, receiver):
    endpoint = register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    delivery.attempt(rt, made.id)
    h = auth(growth.key)
    assert client.delete(f"/api/webhooks/endpoints/{endpoint['id']}", headers=h).status_code == 200
    resp = client.post(f"/api/webhooks/deliveries/{made.id}/replay", headers=h)
    assert resp.status_code == 409 and resp.json["code"] == "invalid_state"
    assert len(receiver.requests) == 1 and deliveries(rt, growth)[0].status == "delivered"


def test_delivery_log_and_replay_are_tenant_scoped(client, growth, make_tenant, rt, receiver):
    endpoint = register(client, growth, receiver.url)
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    other = make_tenant("Other", plan_tier="growth")
    assert client.get(f"/api/webhooks/endpoints/{endpoint['id']}/deliveries", headers=auth(other.key)).status_code == 404
    assert client.post(f"/api/webhooks/deliveries/{made.id}/replay", headers=auth(other.key)).status_code == 404
    assert client.get(f"/api/webhooks/endpoints/{endpoint['id']}/deliveries?status=bogus",
                      headers=auth(growth.key)).status_code == 400


# -- the SSRF guard -------------------------------------------------------------------------

PRIVATE_URLS = ["http://127.0.0.1/h", "http://localhost/h", "http://10.1.2.3/h", "http://192.168.0.1/h",
                "http://172.16.0.5/h", "http://169.254.169.254/latest", "http://[::1]/h",
                "http://[::ffff:127.0.0.1]/h", "http://[fe80::1]/h", "http://2130706433/h",
                "http://0x7f000001/h", "http://0177.0.0.1/h", "http://0.0.0.0/h"]


@pytest.fixture
def strict_rt(backend, tmp_path, request, sqlite_template, clock):
    from tests.conftest import clean, make_settings

    pg = request.getfixturevalue("pg_url") if backend == "postgres" else None
    settings = make_settings(backend, tmp_path, pg, sqlite_template, allow_private_webhook_urls=False)
    clean(settings)
    yield Runtime(settings, clock)
    clean(settings)


@pytest.mark.parametrize("url", PRIVATE_URLS)
def test_private_addresses_are_refused_at_registration_in_production(strict_rt, url):
    from cs_daemon.tenants import service as tenants
    from webapp import create_app

    with strict_rt.session() as s:
        made = tenants.create(s, name="Strict", owner_email="o@s.example", now=strict_rt.now(), plan_tier="growth")
    client = create_app(runtime=strict_rt).test_client()
    resp = client.post("/api/webhooks/endpoints", headers=auth(made.key.secret), json={"url": url})
    assert resp.status_code == 400, url
    assert resp.json["details"][0]["field"] == "url"


NOT_PUBLIC = "the host resolves to a non-public address"


def test_refusals_name_no_address_nor_host(strict_rt):
    """What the guard says reaches the tenant: it must not map the service's network."""
    from cs_daemon.auth import service as keys
    from cs_daemon.tenants import service as tenants
    from webapp import create_app

    with strict_rt.session() as s:
        made = tenants.create(s, name="Strict", owner_email="o@s.example", now=strict_rt.now(), plan_tier="growth",
                              partner=True)
    client, h = create_app(runtime=strict_rt).test_client(), auth(made.key.secret)
    for url in PRIVATE_URLS:
        resp = client.post("/api/webhooks/endpoints", headers=h, json={"url": url})
        assert resp.json["details"] == [{"field": "url", "message": NOT_PUBLIC}], url
        assert resp.json["error"] == f"url refused: {NOT_PUBLIC}"
    resp = client.post("/api/external/action-types", headers=h, json={
        "name": "poke", "description": "d", "provider": "p", "parameters_schema": {},
        "delivery_webhook": "http://localhost:9/poke"})
    assert resp.json["details"] == [{"field": "delivery_webhook", "message": NOT_PUBLIC}]
    resp = client.post("/api/external/platforms/team_chat/connect", headers=h,
                       json={"credentials": {"webhook_url": "http://metadata.localhost/computeMetadata"}})
    assert resp.status_code == 400 and "127.0.0.1" not in resp.text and "metadata" not in resp.text
    with strict_rt.session(made.tenant.id) as s:
        partner = keys.issue(s, made.tenant.id, role="admin", permissions=["partner"], now=strict_rt.now()).secret
    resp = client.post("/api/partner/integrations", headers=auth(partner), json={
        "name": "Hub", "description": "d", "domain": "loyalty", "credential_fields": [],
        "action_types": [{"name": "poke", "description": "d", "parameters_schema": {},
                          "delivery_webhook": "http://[::1]:9/poke"}]})
    assert resp.json["details"] == [{"field": "action_types[0].delivery_webhook", "message": f"refused: {NOT_PUBLIC}"}]


def test_a_refused_attempt_logs_no_address(client, growth, rt, settings, clock, receiver):
    strict_rt = Runtime(settings.model_copy(update={"allow_private_webhook_urls": False}), clock)
    register(client, growth, receiver.url.replace("127.0.0.1", "localhost"))
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    assert delivery.attempt(strict_rt, made.id) == "retrying"
    with strict_rt.session(growth.id) as s:
        [attempt] = delivery.attempts_of(s, [made.id])[made.id]
    assert attempt.error == f"refused: {NOT_PUBLIC}"


def test_private_addresses_are_refused_at_send_time(client, growth, rt, settings, clock, receiver):
    strict_rt = Runtime(settings.model_copy(update={"allow_private_webhook_urls": False}), clock)
    register(client, growth, receiver.url)       # allowed when it was registered
    emit(rt, growth)
    [made] = deliveries(rt, growth)
    result = delivery.attempt(strict_rt, made.id)  # the DNS answer / policy changed since
    assert result == "retrying"
    with strict_rt.session(growth.id) as s:
        [attempt] = delivery.attempts_of(s, [made.id])[made.id]
    assert attempt.error.startswith("refused:") and receiver.requests == []


def test_the_deliveries_of_a_transaction_are_enqueued_after_commit_in_batches(client, growth, rt, receiver,
                                                                              monkeypatch):
    from cs_daemon.delivery import actors

    sent: list[list[str]] = []
    monkeypatch.setattr(actors.send_deliveries, "send", lambda ids: sent.append(list(ids)))
    register(client, growth, receiver.url)
    with rt.session(growth.id) as s:
        outbox.record_many(s, growth.id, [("user.risk_changed", {"user_id": f"u{i}"}) for i in range(25)],
                           now=rt.now())
        assert sent == []                                   # nothing before the commit
    made = [d.id for d in deliveries(rt, growth)]
    assert [len(batch) for batch in sent] == [10, 10, 5]
    assert sorted(sum(sent, [])) == sorted(made)
    with pytest.raises(RuntimeError):
        with rt.session(growth.id) as s:
            outbox.record_many(s, growth.id, [("user.risk_changed", {"user_id": "u1"})], now=rt.now())
            raise RuntimeError("rolled back")
    assert len(sent) == 3                                   # a rolled-back delivery is never enqueued
    from cs_daemon.jobs import context

    monkeypatch.setattr(context, "_current", rt)
    for batch in sent:
        actors.send_deliveries.fn(batch)                    # what a worker does with each message
    assert {d.status for d in deliveries(rt, growth)} == {"delivered"} and len(receiver.requests) == 25
