"""In-app streams held by the event loop of real daemons in production mode (`cs serve`:
gunicorn API processes and Dramatiq workers on PostgreSQL and Redis; docs/channels.md,
"Capacity"): several daemons behind a load balancer each hold their own streams and a
message reaches the stream wherever it is held; a stream whose API process restarts
loses nothing when its client resumes with Last-Event-ID; the per-process, per-tenant and
per-token caps hold on the loop."""

from __future__ import annotations

import os
import signal
import time
from contextlib import ExitStack, contextmanager

import pytest
import requests

from cs_daemon.interventions import service as interventions
from cs_daemon.tenants import service as tenants
from tests.conftest import auth
from tests.support.processes import CS, Deadline, Service, Tree, free_port, poll_http, service_env
from tests.support.sse import SseClient


@pytest.fixture
def rt(production_rt):
    return production_rt


@pytest.fixture
def streams():
    opened: list[SseClient] = []
    yield opened
    for stream in opened:
        stream.close()


@contextmanager
def daemon(rt, tmp_path, name: str, **env: str):
    """`cs serve` on the test's database and Redis prefix, one API process unless told."""
    s = rt.settings
    values = dict(DATABASE_URL=s.database_url, REDIS_URL=s.redis_url, CS_REDIS_PREFIX=s.cs_redis_prefix,
                  CS_SECRET_KEY=s.secret_key, CS_DATA_DIR=str(tmp_path / name), CS_WEB_PROCESSES="1",
                  CS_WORKER_THREADS="2")
    port = free_port()
    service = Service([CS, "serve", "--port", str(port)], env=service_env(**{**values, **env}), cwd=tmp_path,
                      log=tmp_path / f"{name}.err")
    tree = Tree(service)
    service.base = f"http://127.0.0.1:{port}"
    service.tree = tree
    try:
        yield service
    finally:
        tree.kill()


def _up(*services) -> None:
    for service in services:
        poll_http(f"{service.base}/api/health", until=lambda r: bool(service.tree.record()) and r.status_code == 200,
                  timeout=60, service=service)


def _call(base, key, method, path, body=None) -> dict:
    resp = requests.request(method, base + path, headers=auth(key), json=body, timeout=10)
    assert resp.status_code < 300, (path, resp.status_code, resp.text)
    return resp.json()


def _tenant(rt, base, name, users=("u1",)) -> tuple[str, str, str]:
    """A tenant with its users and a playbook: (tenant id, key, playbook id)."""
    with rt.session() as s:
        made = tenants.create(s, name=name, owner_email=f"owner@{name.lower()}.example", now=rt.now(),
                              plan_tier="growth")
        tenant_id, key = made.tenant.id, made.key.secret
    _call(base, key, "POST", "/api/track", {"events": [{"user_id": u, "event": "$identify"} for u in users]})
    return tenant_id, key, _call(base, key, "POST", "/api/playbooks", {"name": name})["id"]


def _serving(base) -> bool:
    try:
        return requests.get(f"{base}/api/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _token(base, key, user="u1") -> str:
    return _call(base, key, "POST", "/api/in-app/tokens", {"user_id": user})["token"]


def _approve(base, key, pid, body, user="u1") -> str:
    iv = _call(base, key, "POST", "/api/interventions", {"user_id": user, "playbook_id": pid, "channel": "in_app",
                                                        "message_body": body})["id"]
    assert _call(base, key, "PUT", f"/api/interventions/{iv}/approve")["status"] == "approved"
    return iv


def _status(base, key, iv) -> str:
    items = _call(base, key, "GET", "/api/interventions?limit=200")["interventions"]
    return [i for i in items if i["id"] == iv][0]["status"]


def _open(base, streams, token, last_event_id=None) -> SseClient:
    stream = SseClient(f"{base}/api/in-app/stream?token={token}", last_event_id=last_event_id)
    streams.append(stream)
    return stream.wait_listening()


def _hang_up(streams) -> None:
    """Close the clients while their daemons still run (a killed daemon cuts their reads)."""
    for stream in streams:
        stream.close()


def _api_process(service) -> int:
    """The pid of the daemon's one gunicorn worker (the API process)."""
    table = {p.pid: p for p in service.tree.record()}
    [pid] = [p.pid for p in table.values() if "gunicorn" in p.cmdline and p.ppid in table
             and "gunicorn" in table[p.ppid].cmdline and p.alive]
    return pid


def test_a_message_approved_through_one_daemon_reaches_a_stream_held_by_another(rt, tmp_path, streams):
    with ExitStack() as stack:
        first, second = (stack.enter_context(daemon(rt, tmp_path, name)) for name in ("first", "second"))
        _up(first, second)
        _, key, pid = _tenant(rt, second.base, "Spread", users=("u1", "u2"))
        here = _open(first.base, streams, _token(second.base, key))
        there = _open(second.base, streams, _token(first.base, key, "u2"))

        started = time.monotonic()
        iv = _approve(second.base, key, pid, "held by the first daemon")
        event = here.next(timeout=20)
        took = time.monotonic() - started
        assert event.event == "intervention" and event.json["interventionId"] == iv
        assert event.json["body"] == "held by the first daemon"
        back = _approve(first.base, key, pid, "held by the second daemon", user="u2")
        assert there.next(timeout=20).json["interventionId"] == back
        deadline = Deadline(20)
        while _status(first.base, key, iv) != "delivered" or _status(second.base, key, back) != "delivered":
            assert deadline, "the messages were written but not marked delivered"
            time.sleep(0.05)
        assert here.events.empty() and there.events.empty()
        _hang_up(streams)
        print(f"\n[in-app scale-out] approve on one daemon -> message on the other's stream in {took:.3f} s")


def test_a_stream_resumes_after_its_api_process_restarts_and_loses_nothing(rt, tmp_path, streams):
    with daemon(rt, tmp_path, "restart") as service:
        _up(service)
        base = service.base
        tenant_id, key, pid = _tenant(rt, base, "Restart")
        token = _token(base, key)
        stream = _open(base, streams, token)
        first = _approve(base, key, pid, "before the restart")
        seen = stream.next(timeout=20)
        assert seen.json["interventionId"] == first

        old = _api_process(service)
        os.kill(old, signal.SIGTERM)             # a restart: gunicorn's master starts another API process
        assert stream.wait_ended(10), "the stream outlived its API process"
        with rt.session(tenant_id) as s:        # approved while the client is away (the job runs in the daemon)
            away = interventions.create(s, tenant_id, user_id="u1", playbook_id=pid, channel="in_app",
                                        message_body="while away", now=rt.now(), test=False).id
            interventions.approve(s, away, now=rt.now())

        deadline = Deadline(60)
        while not _serving(base) or _api_process(service) == old:
            assert deadline, f"no new API process\n{service.describe()}"
            time.sleep(0.1)
        resumed = _open(base, streams, token, last_event_id=seen.id)
        event = resumed.next(timeout=20)
        assert event.json["interventionId"] == away and int(event.id) > int(seen.id)
        later = _approve(base, key, pid, "after the restart")
        assert resumed.next(timeout=20).json["interventionId"] == later       # nothing repeated in between
        _hang_up(streams)


def _refused(base, token) -> requests.Response:
    resp = requests.get(f"{base}/api/in-app/stream", params={"token": token}, timeout=10)
    assert resp.status_code == 429 and resp.json()["code"] == "rate_limited", resp.text
    return resp


def test_the_caps_of_a_process_a_tenant_and_a_token_hold_on_the_event_loop(rt, tmp_path, streams):
    """4 streams a process, a tenant half of them (2), a token 2."""
    with daemon(rt, tmp_path, "caps", CS_STREAM_SLOTS="4", CS_STREAM_TENANT_SHARE="50",
                CS_STREAMS_PER_TOKEN="2") as service:
        _up(service)
        base = service.base
        _, key, _ = _tenant(rt, base, "Greedy", users=("u1", "u2"))
        token = _token(base, key)
        first = _open(base, streams, token)
        _open(base, streams, token)
        refused = _refused(base, token)
        assert "stream token" in refused.json()["error"] and refused.headers["Retry-After"] == "30"
        refused = _refused(base, _token(base, key, "u2"))                   # a fresh token: the tenant is full
        assert "tenant" in refused.json()["error"] and refused.headers["Retry-After"] == "30"

        _, other, _ = _tenant(rt, base, "Other", users=("v1", "v2"))
        _open(base, streams, _token(base, other, "v1"))                   # another tenant is unaffected
        _open(base, streams, _token(base, other, "v2"))
        _, third, _ = _tenant(rt, base, "Third")
        refused = _refused(base, _token(base, third))                        # the process is full
        assert "maximum of 4" in refused.json()["error"] and refused.headers["Retry-After"] == "5"

        first.close()                              # the loop sees the hang-up at once and gives the slot back
        deadline = Deadline(5)
        while (again := SseClient(f"{base}/api/in-app/stream?token={token}")).status == 429:
            assert deadline, "the closed stream's slot never came back"
            time.sleep(0.05)
        streams.append(again.wait_listening())
        _hang_up(streams)
