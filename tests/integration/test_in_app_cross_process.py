"""In production a delivery job in one process reaches a stream held by another
(docs/channels.md, "Across processes"): the stream is held by the API in this process (a real HTTP server), the
`inapp:` delivery is run by a real `cs worker` (Dramatiq on Redis, PostgreSQL) in its own
process tree, and the wake-up between them travels over Redis pub/sub. Then the whole
daemon (`cs serve`: gunicorn and Dramatiq) holds a stream, and a graceful stop ends it at
once instead of waiting out gunicorn's graceful timeout."""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager

import pytest
import requests
from sqlalchemy import text

from cs_daemon.channels import in_app_wakeups
from cs_daemon.tenants import service as tenants
from tests.conftest import auth
from tests.integration.conftest import running_worker
from tests.support.processes import CS, Deadline, Service, Tree, free_port, poll_http, service_env
from tests.support.sse import SseClient



@pytest.fixture
def rt(production_rt):
    return production_rt


@pytest.fixture
def api(api_here):
    return api_here


@pytest.fixture
def worker(rt, tmp_path):
    with running_worker(rt, tmp_path) as tree:
        yield tree


@pytest.fixture
def streams():
    opened: list[SseClient] = []
    yield opened
    for stream in opened:
        stream.close()


def _call(base, key, method, path, body=None) -> dict:
    resp = requests.request(method, base + path, headers=auth(key), json=body, timeout=10)
    assert resp.status_code < 300, (path, resp.status_code, resp.text)
    return resp.json()


def _status(base, key, iv) -> str:
    items = _call(base, key, "GET", "/api/interventions?limit=200")["interventions"]
    return [i for i in items if i["id"] == iv][0]["status"]


def _wait_status(base, key, iv, status, worker, timeout=30.0) -> None:
    deadline = Deadline(timeout)
    while (now := _status(base, key, iv)) != status:
        assert worker.root.proc.poll() is None, f"cs worker exited\n{worker.root.describe()}"
        assert deadline, f"intervention is {now}, not {status}\n{worker.root.describe()}"
        time.sleep(0.05)


def _approve(base, key, pid, body) -> str:
    iv = _call(base, key, "POST", "/api/interventions", {"user_id": "u1", "playbook_id": pid, "channel": "in_app",
                                                        "message_body": body})["id"]
    assert _call(base, key, "PUT", f"/api/interventions/{iv}/approve")["status"] == "approved"
    return iv


def test_a_delivery_made_by_a_worker_process_reaches_a_stream_held_here(rt, api, worker, streams):
    base = api.url
    with rt.session() as s:
        key = tenants.create(s, name="Cross", owner_email="owner@cross.example", now=rt.now(),
                             plan_tier="growth").key.secret
    _call(base, key, "POST", "/api/track", {"events": [{"user_id": "u1", "event": "$identify"}]})
    pid = _call(base, key, "POST", "/api/playbooks", {"name": "Cross-process"})["id"]
    token = _call(base, key, "POST", "/api/in-app/tokens", {"user_id": "u1"})["token"]

    # offline: the worker queues it (sent); it arrives on connect
    waiting = _approve(base, key, pid, "queued while away")
    _wait_status(base, key, waiting, "sent", worker)
    stream = SseClient(f"{base}/api/in-app/stream?token={token}")
    streams.append(stream.wait_listening())
    assert stream.next().json["interventionId"] == waiting
    _wait_status(base, key, waiting, "delivered", worker)

    # online: the worker's wake-up crosses processes through Redis
    started = time.monotonic()
    live = _approve(base, key, pid, "live from the worker")
    event = stream.next(timeout=20)
    assert event.event == "intervention" and event.json["interventionId"] == live
    assert event.json["body"] == "live from the worker" and event.json["playbookName"] == "Cross-process"
    _wait_status(base, key, live, "delivered", worker)
    print(f"\n[in-app cross-process] approve -> message on the stream in {time.monotonic() - started:.3f} s")


GRACEFUL_TIMEOUT = 20       # gunicorn's, as `cs serve` starts it


@contextmanager
def _daemon(rt, tmp_path):
    """`cs serve` on a free port, up: (the daemon, its process tree, its URL); killed at the end."""
    s = rt.settings
    env = service_env(DATABASE_URL=s.database_url, REDIS_URL=s.redis_url, CS_REDIS_PREFIX=s.cs_redis_prefix,
                      CS_SECRET_KEY=rt.settings.secret_key, CS_DATA_DIR=str(tmp_path / "data"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    daemon = Service([CS, "serve", "--port", str(port)], env=env, cwd=tmp_path, log=tmp_path / "serve.err")
    tree = Tree(daemon)
    try:
        poll_http(f"{base}/api/health", until=lambda r: bool(tree.record()) and r.status_code == 200,
                  timeout=40, service=daemon)
        yield daemon, tree, base
    finally:
        tree.kill()


def _streaming(rt, base, streams, name) -> tuple[str, str, SseClient]:
    """A tenant whose user u1 holds a stream: (the tenant's id, its key, the stream)."""
    with rt.session() as session:
        made = tenants.create(session, name=name, owner_email=f"owner@{name.lower()}.example", now=rt.now(),
                              plan_tier="growth")
        tenant_id, key = made.tenant.id, made.key.secret
    _call(base, key, "POST", "/api/track", {"events": [{"user_id": "u1", "event": "$identify"}]})
    token = _call(base, key, "POST", "/api/in-app/tokens", {"user_id": "u1"})["token"]
    stream = SseClient(f"{base}/api/in-app/stream?token={token}")
    streams.append(stream.wait_listening())
    return tenant_id, key, stream


def test_the_daemon_delivers_to_its_streams_and_a_graceful_stop_ends_them_at_once(rt, tmp_path, streams):
    with _daemon(rt, tmp_path) as (daemon, tree, base):
        _, key, stream = _streaming(rt, base, streams, "Daemon")
        pid = _call(base, key, "POST", "/api/playbooks", {"name": "Daemon"})["id"]
        iv = _approve(base, key, pid, "from gunicorn and dramatiq")
        assert stream.next(timeout=20).json["interventionId"] == iv
        _wait_status(base, key, iv, "delivered", tree)

        stopping = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert stream.wait_ended(GRACEFUL_TIMEOUT), "the stream outlived the graceful stop"
        assert stream.broken is None, f"the stream was cut off, not ended: {stream.broken!r}"
        ended = time.monotonic() - stopping
        assert daemon.wait(30) == 0, daemon.describe()
        stopped = time.monotonic() - stopping
        assert ended < GRACEFUL_TIMEOUT / 2 and stopped < GRACEFUL_TIMEOUT, (ended, stopped)
        print(f"\n[in-app daemon stop] stream ended {ended:.1f} s and the daemon {stopped:.1f} s after SIGTERM")


def _waiting_on(session, table: str) -> int:
    """How many lock requests on `table` are waiting (a read blocked by a lock held here)."""
    return session.scalar(text("SELECT count(*) FROM pg_locks WHERE relation = CAST(:t AS regclass) "
                               "AND NOT granted"), {"t": table})


def test_a_graceful_stop_ends_a_stream_stuck_in_a_read_with_the_last_chunk_before_the_process_exits(
        rt, tmp_path, streams):
    """A stream whose read does not come back (its table locked here) when the API process
    stops: the process ends it, with the chunked body's last chunk, before it exits, instead
    of leaving it to be cut off when the process is gone (a broken response to its client)."""
    with _daemon(rt, tmp_path) as (daemon, tree, base):
        tenant_id, _, stream = _streaming(rt, base, streams, "Stuck")
        with rt.session() as locking, rt.session() as watching:
            locking.execute(text("LOCK TABLE in_app_messages IN ACCESS EXCLUSIVE MODE"))
            in_app_wakeups.for_settings(rt.settings).publish(tenant_id, "u1")   # the stream reads now
            deadline = Deadline(20)
            while not _waiting_on(watching, "in_app_messages"):
                assert deadline, "the stream's read did not reach the locked table"
                time.sleep(0.05)
            watching.rollback()
            daemon.signal(signal.SIGTERM)
            assert stream.wait_ended(GRACEFUL_TIMEOUT + 10), "the stream outlived the graceful stop"
        assert stream.broken is None, f"the stream was cut off, not ended: {stream.broken!r}"
        assert daemon.wait(30) == 0, daemon.describe()
