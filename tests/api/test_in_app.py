"""The in_app channel (docs/channels.md) over a real HTTP server and a real SSE client, on
both run modes: stream tokens, delivery to an open stream and on connect, Last-Event-ID,
withdrawal on rollback, tenant isolation, and the stream's own refusals. On the
PostgreSQL + Redis backend the wake-ups travel through Redis pub/sub."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
import requests
from sqlalchemy import select

from cs_daemon.channels import in_app_stream
from cs_daemon.channels import in_app_tokens as tokens
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.runtime import Runtime
from tests.conftest import auth
from tests.support.processes import Deadline
from tests.support.sse import AppServer, SseClient
from webapp import create_app

PLAYBOOK = "Activation nudge"


@pytest.fixture
def server(app):
    s = AppServer(app)
    yield s
    s.close()


@pytest.fixture
def streams():
    opened: list[SseClient] = []
    yield opened
    for stream in opened:
        stream.close()


@pytest.fixture
def world(client, make_tenant):
    tenant = make_tenant("Crew", plan_tier="growth")
    _identify(client, tenant, "u1")
    pid = client.post("/api/playbooks", headers=auth(tenant.key), json={"name": PLAYBOOK}).json["id"]
    return tenant, pid


def _identify(client, tenant, user):
    resp = client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": user, "event": "$identify", "properties": {"name": "Ada"}}]})
    assert resp.status_code == 200, resp.json


def _token(client, tenant, user="u1", key=None) -> str:
    resp = client.post("/api/in-app/tokens", headers=auth(key or tenant.key), json={"user_id": user})
    assert resp.status_code == 200, resp.json
    return resp.json["token"]


def _open(server, streams, token, last_event_id=None) -> SseClient:
    stream = SseClient(f"{server.url}/api/in-app/stream?token={token}", last_event_id=last_event_id)
    streams.append(stream)
    return stream.wait_listening()


def _approve(client, rt, tenant, pid, body="Try the new dashboard", user="u1") -> str:
    """An in_app intervention approved, and its delivery job run (as the worker would)."""
    h = auth(tenant.key)
    iv = client.post("/api/interventions", headers=h, json={"user_id": user, "playbook_id": pid,
                                                            "channel": "in_app", "message_body": body}).json["id"]
    assert client.put(f"/api/interventions/{iv}/approve", headers=h).json["status"] == "approved"
    with rt.session(tenant.id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.subject_id == iv))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)
    return iv


def _intervention(client, tenant, iv) -> dict:
    items = client.get("/api/interventions?limit=200", headers=auth(tenant.key)).json["interventions"]
    return [i for i in items if i["id"] == iv][0]


def _wait_status(client, tenant, iv, status, timeout=10.0) -> dict:
    deadline = Deadline(timeout)
    while (item := _intervention(client, tenant, iv))["status"] != status:
        assert deadline, f"intervention {iv} is {item['status']}, not {status}"
        time.sleep(0.02)
    return item


def _is_message(iv):
    return lambda e: e.event == "intervention" and e.json["interventionId"] == iv


# --- tokens ------------------------------------------------------------------------------


def test_a_token_is_minted_for_a_known_user_with_a_read_or_full_key(client, world, clock):
    tenant, _ = world
    resp = client.post("/api/in-app/tokens", headers=auth(tenant.key), json={"user_id": "u1"})
    assert resp.status_code == 200 and set(resp.json) == {"token", "expires_at"}
    assert datetime.fromisoformat(resp.json["expires_at"]) == clock.now().replace(microsecond=0) + timedelta(hours=24)
    reader = tenant.issue("viewer", ["read"])
    assert client.post("/api/in-app/tokens", headers=auth(reader), json={"user_id": "u1"}).status_code == 200
    ingest_only = tenant.issue("editor", ["ingest"])
    resp = client.post("/api/in-app/tokens", headers=auth(ingest_only), json={"user_id": "u1"})
    assert resp.status_code == 403 and resp.json["code"] == "forbidden"
    resp = client.post("/api/in-app/tokens", headers=auth(tenant.key), json={"user_id": "ghost"})
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    assert client.post("/api/in-app/tokens", json={"user_id": "u1"}).status_code == 401
    assert client.post("/api/in-app/tokens", headers=auth(tenant.key), json={}).status_code == 400


def test_a_bad_or_expired_token_is_refused_with_401(client, world, server, clock, rt):
    tenant, _ = world
    token = _token(client, tenant)
    payload, signature = token.split(".")
    foreign, _ = tokens.mint("another-secret", tenant.id, "u1", clock.now())
    for bad in ("", "garbage", f"{payload}.", f"{payload[:-2]}xx.{signature}", f"{payload}.{'A' * 43}", foreign):
        resp = SseClient(f"{server.url}/api/in-app/stream?token={bad}").response
        assert resp.status_code == 401, bad
        assert resp.headers["Content-Type"].startswith("application/json")
        assert resp.json()["code"] == "unauthorized"
    assert SseClient(f"{server.url}/api/in-app/stream").status == 401
    clock.advance(hours=24)
    resp = SseClient(f"{server.url}/api/in-app/stream?token={token}").response
    assert resp.status_code == 401 and "expired" in resp.json()["error"]


# --- delivery ------------------------------------------------------------------------------


def test_an_approved_message_arrives_on_an_open_stream_and_is_delivered(client, world, rt, server, streams):
    tenant, pid = world
    stream = _open(server, streams, _token(client, tenant))
    assert stream.response.headers["Content-Type"].startswith("text/event-stream")
    iv = _approve(client, rt, tenant, pid, body="Hello Ada")
    event = stream.next()
    assert event.event == "intervention" and int(event.id) > 0
    message = event.json
    assert set(message) == {"interventionId", "type", "body", "playbookName", "timestamp"}
    assert message["interventionId"] == iv and message["type"] == "in_app" and message["body"] == "Hello Ada"
    assert message["playbookName"] == PLAYBOOK
    assert datetime.fromisoformat(message["timestamp"]).tzinfo is not None
    item = _wait_status(client, tenant, iv, "delivered")
    assert item["sent_at"] and item["delivered_at"]
    with rt.session(tenant.id) as s:
        [event] = [o.payload for o in s.scalars(select(OutboxEvent).where(
            OutboxEvent.event_type == "intervention.delivered"))]
    assert event["intervention_id"] == iv and event["channel"] == "in_app"


def test_a_message_for_an_offline_user_waits_and_arrives_on_connect(client, world, rt, server, streams):
    tenant, pid = world
    iv = _approve(client, rt, tenant, pid)
    assert _intervention(client, tenant, iv)["status"] == "sent"      # queued, nobody listening
    stream = _open(server, streams, _token(client, tenant))
    assert _is_message(iv)(stream.next())
    _wait_status(client, tenant, iv, "delivered")
    # delivered once: a later connect does not get it again
    stream.close()
    again = _open(server, streams, _token(client, tenant))
    later = _approve(client, rt, tenant, pid, body="next")
    assert _is_message(later)(again.next())


def test_last_event_id_resumes_without_repeats(client, world, rt, server, streams):
    tenant, pid = world
    token = _token(client, tenant)
    first = _open(server, streams, token)
    m1, m2 = _approve(client, rt, tenant, pid, body="one"), _approve(client, rt, tenant, pid, body="two")
    e1, e2 = first.next(), first.next()
    assert [e1.json["interventionId"], e2.json["interventionId"]] == [m1, m2] and int(e2.id) > int(e1.id)
    _wait_status(client, tenant, m2, "delivered")
    first.close()
    m3 = _approve(client, rt, tenant, pid, body="three")              # while the client is away

    resumed = _open(server, streams, token, last_event_id=e2.id)
    assert _is_message(m3)(resumed.next())
    m4 = _approve(client, rt, tenant, pid, body="four")
    assert _is_message(m4)(resumed.next())                          # nothing else came in between
    _wait_status(client, tenant, m4, "delivered")
    resumed.close()

    earlier = _open(server, streams, token, last_event_id=e1.id)
    got = [earlier.next().json["interventionId"] for _ in range(3)]
    assert got == [m2, m3, m4]


def test_a_rollback_withdraws_the_message(client, world, rt, server, streams):
    tenant, pid = world
    h = auth(tenant.key)
    token = _token(client, tenant)
    stream = _open(server, streams, token)
    iv = _approve(client, rt, tenant, pid)
    shown = stream.next()
    _wait_status(client, tenant, iv, "delivered")
    assert client.put(f"/api/interventions/{iv}/rollback", headers=h, json={"reason": "wrong user"}).json[
        "status"] == "rolled_back"
    withdrawn = stream.next()
    assert withdrawn.event == "withdrawn" and withdrawn.json == {"interventionId": iv} and withdrawn.id is None

    # a resumed client that had it hears of the withdrawal; a new one never sees the message
    stream.close()
    resumed = _open(server, streams, token, last_event_id=shown.id)
    assert resumed.next().event == "withdrawn"
    fresh = _open(server, streams, token)
    marker = _approve(client, rt, tenant, pid, body="marker")
    assert _is_message(marker)(fresh.next())


def test_a_rolled_back_message_never_reaches_a_later_connect(client, world, rt, server, streams):
    tenant, pid = world
    iv = _approve(client, rt, tenant, pid)
    assert _intervention(client, tenant, iv)["status"] == "sent"
    client.put(f"/api/interventions/{iv}/rollback", headers=auth(tenant.key), json={})
    stream = _open(server, streams, _token(client, tenant))
    marker = _approve(client, rt, tenant, pid, body="marker")
    assert _is_message(marker)(stream.next())
    assert _intervention(client, tenant, iv)["status"] == "rolled_back"


def test_a_user_who_opted_out_of_in_app_gets_no_more_messages(client, world, rt, server, streams, monkeypatch):
    from cs_daemon.channels import optout
    from cs_daemon.channels.in_app_models import InAppMessage
    from cs_daemon.customers.models import Customer

    tenant, pid = world
    queued = _approve(client, rt, tenant, pid, body="queued before the opt-out")
    with rt.session(tenant.id) as s:
        optout.opt_out(s, s.get(Customer, (tenant.id, "u1")), "in_app", now=rt.now())
    monkeypatch.setattr(in_app_stream, "HEARTBEAT_SECONDS", 0.2)
    stream = _open(server, streams, _token(client, tenant))
    refused = _approve(client, rt, tenant, pid, body="after the opt-out")
    assert _intervention(client, tenant, refused)["status"] == "failed"
    with rt.session(tenant.id) as s:
        assert [m.intervention_id for m in s.scalars(select(InAppMessage))] == [queued]
        [failed] = [o.payload for o in s.scalars(select(OutboxEvent).where(
            OutboxEvent.event_type == "intervention.failed"))]
    assert failed["intervention_id"] == refused and "opted out of in_app" in failed["error"]["message"]
    stream.wait_comments("heartbeat")      # past its first read and a wait: the queued one was not sent
    assert stream.events.empty() and _intervention(client, tenant, queued)["status"] == "sent"


def test_another_tenants_user_never_receives_it(client, world, rt, server, streams, make_tenant):
    tenant, pid = world
    other = make_tenant("Other", plan_tier="growth")
    _identify(client, other, "u1")                                     # the same user id, another tenant
    other_pid = client.post("/api/playbooks", headers=auth(other.key), json={"name": "theirs"}).json["id"]
    ours = _open(server, streams, _token(client, tenant))
    theirs = _open(server, streams, _token(client, other))
    iv = _approve(client, rt, tenant, pid)
    assert _is_message(iv)(ours.next())
    marker = _approve(client, rt, other, other_pid, body="theirs")
    assert _is_message(marker)(theirs.next())                          # and nothing of ours before it
    assert theirs.events.empty()


def test_a_stream_of_one_user_does_not_get_another_users_messages(client, world, rt, server, streams):
    tenant, pid = world
    _identify(client, tenant, "u2")
    u2 = _open(server, streams, _token(client, tenant, "u2"))
    _approve(client, rt, tenant, pid, user="u1")
    mine = _approve(client, rt, tenant, pid, user="u2", body="for u2")
    assert _is_message(mine)(u2.next())


def test_a_quiet_stream_sends_heartbeat_comments(client, world, server, streams, monkeypatch):
    tenant, _ = world
    monkeypatch.setattr(in_app_stream, "HEARTBEAT_SECONDS", 0.2)
    stream = _open(server, streams, _token(client, tenant))
    stream.wait_comments("heartbeat", count=2, timeout=5)
    assert stream.events.empty()


def test_the_kill_switch_holds_queued_messages_back(client, world, rt, server, streams, monkeypatch):
    tenant, pid = world
    h = auth(tenant.key)
    monkeypatch.setattr(in_app_stream, "HEARTBEAT_SECONDS", 0.2)
    iv = _approve(client, rt, tenant, pid)                              # queued while the switch is off
    client.put("/api/settings/kill-switch", headers=h, json={"active": True})
    stream = _open(server, streams, _token(client, tenant))
    stream.wait_comments("heartbeat", count=2, timeout=5)              # held over two looks
    assert stream.events.empty() and _intervention(client, tenant, iv)["status"] == "sent"
    client.put("/api/settings/kill-switch", headers=h, json={"active": False})
    assert _is_message(iv)(stream.next())


def test_an_api_process_holds_at_most_its_stream_slots_in_production(settings, clock, world, client, streams,
                                                                    make_tenant):
    """Production (gunicorn gthread): a stream keeps a thread, so each API process takes at
    most CS_STREAM_SLOTS and answers 429 past that. The embedded server gives every
    connection a thread of its own: no cap on the process there (tenants and tokens are
    capped in both modes: see test_stream_caps.py)."""
    tenant, _ = world
    other = make_tenant("Other", plan_tier="growth")
    _identify(client, other, "v1")
    capped = AppServer(create_app(runtime=Runtime(settings.model_copy(
        update={"cs_stream_slots": 1, "cs_stream_tenant_share": 100}), clock)))
    try:
        _open(capped, streams, _token(client, tenant))
        second = SseClient(f"{capped.url}/api/in-app/stream?token={_token(client, other, 'v1')}")
        streams.append(second)
        if not settings.production:
            assert second.wait_listening()
            return
        assert second.status == 429 and second.response.json()["code"] == "rate_limited"
        assert second.response.headers["Retry-After"] == str(in_app_stream.SLOT_RETRY_AFTER)
    finally:
        capped.close()


# --- capacity: per token and per tenant (docs/channels.md, Capacity) -------------------------


@pytest.fixture
def caps_server(settings, clock):
    """An API process of its own with small caps: 4 slots, a tenant may hold half of
    them (2), a token 2."""
    made: list[AppServer] = []

    def start(**caps) -> AppServer:
        update = {"cs_stream_slots": 4, "cs_stream_tenant_share": 50, "cs_streams_per_token": 2, **caps}
        made.append(AppServer(create_app(runtime=Runtime(settings.model_copy(update=update), clock))))
        return made[-1]

    yield start
    for server in made:
        server.close()


def _refused(server, streams, token) -> SseClient:
    stream = SseClient(f"{server.url}/api/in-app/stream?token={token}")
    streams.append(stream)
    assert stream.status == 429, stream.response.text
    assert stream.response.json()["code"] == "rate_limited"
    return stream


def test_one_token_holds_at_most_its_share_of_streams(client, world, streams, caps_server, monkeypatch):
    tenant, _ = world
    monkeypatch.setattr(in_app_stream, "HEARTBEAT_SECONDS", 0.2)      # a hung-up client is noticed soon
    server = caps_server()
    token = _token(client, tenant)
    first = _open(server, streams, token)
    _open(server, streams, token)
    refused = _refused(server, streams, token)
    assert "stream token" in refused.response.json()["error"]
    assert refused.response.headers["Retry-After"] == "30"
    first.close()                                   # its slot comes back once the server sees it gone
    deadline = Deadline(10)
    while (again := SseClient(f"{server.url}/api/in-app/stream?token={token}")).status == 429:
        assert deadline, "the closed stream's slot never came back"
        time.sleep(0.05)
    streams.append(again.wait_listening())


def test_one_tenant_holds_at_most_its_share_of_a_process_and_others_still_connect(
        client, world, streams, caps_server, make_tenant):
    tenant, _ = world
    _identify(client, tenant, "u2")
    server = caps_server(cs_streams_per_token=5)
    _open(server, streams, _token(client, tenant, "u1"))
    _open(server, streams, _token(client, tenant, "u2"))
    refused = _refused(server, streams, _token(client, tenant, "u1"))      # a fresh token: the tenant is full
    assert "tenant" in refused.response.json()["error"] and "2" in refused.response.json()["error"]
    other = make_tenant("Other", plan_tier="growth")
    _identify(client, other, "v1")
    _open(server, streams, _token(client, other, "v1"))                    # another tenant is unaffected


# --- bad input: a 400 at once (docs/channels.md, The stream) --------------------------------


def _quick(call):
    started = time.monotonic()
    resp = call()
    assert time.monotonic() - started < 0.5      # 100 ms on an idle machine; room for a busy one
    return resp


def test_a_token_with_characters_no_token_has_is_a_400(client, world, server):
    tenant, _ = world
    token = _token(client, tenant)
    for bad in (token[:-1] + "é", "☃." + token.split(".")[1], token + "%00", "a b.c"):
        resp = _quick(lambda: requests.get(f"{server.url}/api/in-app/stream", params={"token": bad}, timeout=5))
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json()["code"] == "validation_failed" and resp.json()["details"][0]["field"] == "token"
    resp = client.post("/api/in-app/events", json={"token": token[:-1] + "é", "intervention_id": "x",
                                                   "action": "clicked"})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "token"


def test_a_last_event_id_that_is_not_a_plain_integer_is_a_400(client, world, server, streams):
    tenant, _ = world
    token = _token(client, tenant)
    for bad in ("abc", "-1", "1.5", "²", "１２", "9" * 19, "0x10", "1 2"):
        resp = _quick(lambda: requests.get(f"{server.url}/api/in-app/stream", params={"token": token},
                                           headers={"Last-Event-ID": bad.encode()}, timeout=5))
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json()["code"] == "validation_failed"
        assert resp.json()["details"] == [{"field": "Last-Event-ID", "message": resp.json()["details"][0]["message"]}]
    _open(server, streams, token, last_event_id="0")                  # a plain integer resumes
    _open(server, streams, token, last_event_id="")                   # and an empty one is none
