"""A committed write never answers 500 because Redis is unreachable (docs/deploy.md,
"When Redis is unreachable"): the app runs with its Redis (broker, cache, wake-ups)
behind a TCP proxy the test stops and starts, on a fresh PostgreSQL database. With Redis
down, writes answer their success status and their work waits as rows; once Redis is
back, the sweeps send it. Rate limits are counted in each process meanwhile."""

from __future__ import annotations

import logging
import socket
import time
from datetime import datetime, timezone
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select

from cs_daemon import migrate
from cs_daemon.clock import FakeClock
from cs_daemon.config import Settings
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.delivery.models import Delivery
from cs_daemon.jobs import broker as jobs_broker
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from tests.conftest import REDIS, auth
from tests.integration.conftest import SECRET
from tests.support.processes import Deadline
from tests.support.proxy import TcpProxy
from tests.support.sse import AppServer, SseClient
from webapp import create_app


@pytest.fixture
def redis_proxy():
    target = urlsplit(REDIS)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 6379).start()
    yield proxy
    proxy.stop()


def _runtime(database, prefix, tmp_path, redis_url: str) -> Runtime:
    settings = Settings(cs_data_dir=tmp_path / "data", database_url=database, redis_url=redis_url,
                        cs_redis_prefix=prefix, cs_secret_key=SECRET, allow_private_webhook_urls=True)
    migrate.upgrade(settings)
    runtime = Runtime(settings, FakeClock(datetime.now(timezone.utc).replace(microsecond=0)))
    runtime.install_broker()      # jobs are enqueued on Redis after commit, as in gunicorn
    return runtime


@pytest.fixture
def rt(database, prefix, tmp_path, redis_proxy):
    runtime = _runtime(database, prefix, tmp_path, f"redis://127.0.0.1:{redis_proxy.port}{urlsplit(REDIS).path}")
    yield runtime
    redis_proxy.start()
    runtime.stop_worker()
    jobs_broker.install(Settings(cs_data_dir=tmp_path / "data", database_url=None, redis_url=None,
                                 cs_secret_key="t"))


@pytest.fixture
def server(rt):
    s = AppServer(create_app(runtime=rt))
    yield s
    s.close()


@pytest.fixture
def world(rt, receiver):
    """A growth tenant with a user, a webhook endpoint (every event) and an active playbook
    triggered by `signed_up`, all made while Redis is up."""
    with rt.session() as s:
        made = tenants.create(s, name="Crew", owner_email="owner@crew.example", now=rt.now(), plan_tier="growth")
    client = create_app(runtime=rt).test_client()
    h = auth(made.key.secret)
    _ok(client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "$identify",
                                                                 "properties": {"email": "ada@x.io"}}]}))
    _ok(client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url}))
    pid = _ok(client.post("/api/playbooks", headers=h, json={
        "name": "welcome", "entry_conditions": {"trigger": {"event": "signed_up"}},
        "constraints": {"channels": ["webhook"]}})).json["id"]
    _ok(client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"}))
    return client, made.tenant.id, h, pid


def _ok(resp):
    assert resp.status_code < 300, (resp.status_code, resp.json)
    return resp


def _create(client, h, pid, channel: str) -> str:
    return _ok(client.post("/api/interventions", headers=h, json={
        "user_id": "u1", "playbook_id": pid, "channel": channel, "message_body": "Hello Ada"})).json["id"]


def _sweep(rt) -> None:
    """What the periodic jobs do once Redis is back, run now: the due deliveries and the
    overdue decision requests are enqueued again, for the worker."""
    from cs_daemon.decisions.actors import sweep_decisions
    from cs_daemon.delivery.actors import sweep_deliveries

    sweep_deliveries.fn()
    sweep_decisions.fn()


def test_writes_answer_while_redis_is_down_and_the_sweeps_send_their_work_once_it_is_back(
        rt, world, redis_proxy, receiver, server, caplog):
    client, tenant_id, h, pid = world
    webhook_iv = _create(client, h, pid, "webhook")
    in_app_iv = _create(client, h, pid, "in_app")
    token = _ok(client.post("/api/in-app/tokens", headers=h, json={"user_id": "u1"})).json["token"]
    stream = SseClient(f"{server.url}/api/in-app/stream?token={token}").wait_listening()
    try:
        redis_proxy.stop()
        caplog.set_level(logging.WARNING, logger="cs_daemon.db")
        for iv in (webhook_iv, in_app_iv):      # deliveries, each enqueued after commit
            resp = client.put(f"/api/interventions/{iv}/approve", headers=h)
            assert resp.status_code == 200 and resp.json["status"] == "approved", resp.json
        resp = client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "signed_up"}]})
        assert resp.status_code == 200 and resp.json["accepted"] == 1      # a decision request
        resp = client.post("/api/external/events", headers=h, json={"events": [
            {"type": "custom.crm.deal_won", "user_id": "u1", "data": {"amount": 5}}]})
        assert resp.status_code == 200, resp.json                           # outbox fan-out
        deferred = [r.getMessage() for r in caplog.records if "was not done" in r.getMessage()]
        assert any("send_soon" in m for m in deferred) and any("decisions" in m for m in deferred), deferred
        with rt.session() as s:
            assert s.scalars(select(Delivery.status).where(Delivery.subject_id == webhook_iv)).all() == ["pending"]
            owed = s.scalars(select(DecisionRequest).where(DecisionRequest.tenant_id == tenant_id)).all()
            assert owed and {r.done_at for r in owed} == {None}     # the custom event owes one too
        assert receiver.requests == []

        redis_proxy.start()
        rt.clock.advance(seconds=31)     # past the sweeps' grace: the rows' own messages are lost
        rt.start_worker()
        _sweep(rt)
        deadline = Deadline(30)
        while not {"channel.webhook", "custom.crm.deal_won"} <= _kinds(receiver):
            assert deadline, _kinds(receiver)
            time.sleep(0.05)
        shown = stream.next(timeout=30)
        assert shown.event == "intervention" and shown.json["interventionId"] == in_app_iv
        while None in _done(rt, tenant_id):
            assert deadline, "the owed decisions were not made"
            time.sleep(0.05)
    finally:
        stream.close()


def _kinds(receiver) -> set[str]:
    import json

    kinds = set()
    for r in receiver.requests:
        channel = r.headers.get("X-Service-Channel")
        kinds.add(f"channel.{channel}" if channel else json.loads(r.body).get("event"))
    return kinds


def _done(rt, tenant_id):
    with rt.session() as s:
        return s.scalars(select(DecisionRequest.done_at).where(DecisionRequest.tenant_id == tenant_id)).all()


def test_rate_limits_are_counted_in_the_process_while_redis_is_down(rt, redis_proxy):
    client = create_app(runtime=rt).test_client()
    with rt.session() as s:
        trial = tenants.create(s, name="Small", owner_email="owner@small.example", now=rt.now())
    h = auth(trial.key.secret)
    redis_proxy.stop()
    limit = 600      # trial
    for n in range(1, limit + 1):
        resp = client.get("/api/playbooks", headers=h)
        assert resp.status_code == 200, (n, resp.json)
    assert resp.headers["X-RateLimit-Remaining"] == "0"
    over = client.get("/api/playbooks", headers=h)
    assert over.status_code == 429 and over.json["code"] == "rate_limited" and over.headers["Retry-After"]


@pytest.fixture
def silent_redis():
    """A port that accepts connections and never answers: Redis cut off by the network."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    listener.close()


def test_an_approval_answers_in_seconds_when_redis_stops_answering(database, prefix, tmp_path, silent_redis):
    runtime = _runtime(database, prefix, tmp_path, silent_redis)
    try:
        with runtime.session() as s:
            made = tenants.create(s, name="Crew", owner_email="owner@crew.example", now=runtime.now(),
                                  plan_tier="growth")
        client = create_app(runtime=runtime).test_client()
        h = auth(made.key.secret)
        _ok(client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "$identify",
                                                                     "properties": {"email": "ada@x.io"}}]}))
        pid = _ok(client.post("/api/playbooks", headers=h, json={"name": "p"})).json["id"]
        iv = _create(client, h, pid, "email")
        started = time.monotonic()
        resp = client.put(f"/api/interventions/{iv}/approve", headers=h)
        took = time.monotonic() - started
        assert resp.status_code == 200 and resp.json["status"] == "approved", resp.json
        assert took < 20, took       # the cache gives up after 1 s, the broker's client after 5 s
    finally:
        jobs_broker.install(Settings(cs_data_dir=tmp_path / "data", database_url=None, redis_url=None,
                                     cs_secret_key="t"))
