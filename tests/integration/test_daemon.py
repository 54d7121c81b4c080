"""The daemon for real (docs/api.md, docs/configuration.md): `cs serve` in the embedded and the
production mode as subprocesses, the rate limit shared by two API processes through
Redis, and health following PostgreSQL and Redis outages behind a TCP proxy.

Nothing is mocked: PostgreSQL and Redis are the ones on this machine (see conftest),
every process started here is killed in a `finally`, and waits poll with a deadline.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from urllib.parse import urlsplit

import psycopg
import pytest
import requests
from sqlalchemy.engine import make_url

from cs_daemon.config import Settings
from cs_daemon.db import dispose_engines
from cs_daemon.jobs import broker as jobs_broker
from tests.conftest import PG, REDIS, _pg_conninfo
from tests.support.processes import (
    CS, PYTHON, Deadline, Service, Tree, free_port, poll_http, service_env, still_running,
)
from tests.support.daemon import drop_redis_keys
from tests.support.proxy import TcpProxy

TRIAL_LIMIT = 600  # requests a minute per key on the trial plan (docs/api.md, "Plans")


# --- fixtures ------------------------------------------------------------------------


def _create_database() -> tuple[str, str]:
    name = f"cs_daemon_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, f"{PG}/{name}"


def _drop_database(name: str) -> None:
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_prefix():
    prefix = f"csdaemon-{uuid.uuid4().hex[:8]}"
    yield prefix
    drop_redis_keys(prefix)


def _prod_env(database_url: str, prefix: str, tmp_path) -> dict[str, str]:
    return service_env(DATABASE_URL=database_url, REDIS_URL=REDIS, CS_REDIS_PREFIX=prefix,
                       CS_SECRET_KEY="daemon-test-secret", CS_DATA_DIR=str(tmp_path / "data"))


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory):
    """A fresh PostgreSQL database brought up to date by `cs db upgrade` (a subprocess)."""
    name, url = _create_database()
    try:
        cwd = tmp_path_factory.mktemp("upgrade")
        done = subprocess.run([CS, "db", "upgrade"], env=_prod_env(url, "csdaemon-upgrade", cwd),
                              cwd=cwd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        yield url
    finally:
        _drop_database(name)


# --- 1. embedded `cs serve --demo` -----------------------------------------------------

SERVING = r"serving on (http://127\.0\.0\.1:(\d+))(?:\s|$)"
DEMO_KEY = r"demo tenant key: (\S+)\s*$"
TRY_CURL = r"^\s*try: (curl .*?)\s*$"


def _run_printed_curl(line: str) -> dict:
    argv = shlex.split(line)
    if shutil.which(argv[0]) is None:  # no curl on this machine: send the same request
        headers = dict(argv[i + 1].split(": ", 1) for i, a in enumerate(argv) if a == "-H")
        resp = requests.get(argv[-1], headers=headers, timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.json()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_embedded_serve_demo_answers_health_and_the_printed_curl(tmp_path):
    """`cs serve --demo --port 0` without DATABASE_URL/REDIS_URL: prints its address and a
    curl line that works as printed, is healthy once the in-process worker beats, stops
    with exit 0 on SIGTERM, and a second start on the same data prints the same key."""
    data = tmp_path / "data"
    env = service_env(CS_DATA_DIR=str(data))
    argv = [CS, "serve", "--demo", "--port", "0"]

    first = Service(argv, env=env, cwd=tmp_path, log=tmp_path / "first.err")
    try:
        serving = first.wait_for_line(SERVING)
        url, port = serving.group(1), int(serving.group(2))
        assert port != 0
        key = first.wait_for_line(DEMO_KEY).group(1)
        curl_line = first.wait_for_line(TRY_CURL).group(1)
        curl_argv = shlex.split(curl_line)
        assert curl_argv[-1] == f"{url}/api/settings", curl_line
        assert f"Authorization: Bearer {key}" in curl_argv, curl_line

        health = poll_http(f"{url}/api/health", until=lambda r: r.status_code == 200,
                           timeout=20, service=first)
        body = health.json()
        assert body["status"] == "ok"
        checks = {name: c["status"] for name, c in body["checks"].items()}
        assert checks == {"database": "ok", "cache": "disabled", "llm": "disabled", "jobs": "ok", "sweeps": "ok"}

        settings = _run_printed_curl(curl_line)
        assert settings["tenant"]["name"] == "Demo"
        assert settings["api_keys"], settings
        assert requests.get(f"{url}/api/settings", timeout=5).status_code == 401

        first.signal(signal.SIGTERM)
        assert first.wait(10) == 0, first.describe()
        assert "stopped" in first.lines[-1]
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{url}/api/health", timeout=2)
    finally:
        first.kill()

    assert json.loads((data / "demo.json").read_text())["api_key"] == key

    second = Service(argv, env=env, cwd=tmp_path, log=tmp_path / "second.err")
    try:
        url2 = second.wait_for_line(SERVING).group(1)
        assert second.wait_for_line(DEMO_KEY).group(1) == key
        assert second.wait_for_line(TRY_CURL).group(1) == curl_line.replace(url, url2)
        resp = poll_http(f"{url2}/api/settings", until=lambda r: True, timeout=20,
                         service=second, headers={"Authorization": f"Bearer {key}"})
        assert resp.status_code == 200 and resp.json()["tenant"]["name"] == "Demo"
    finally:
        second.kill()  # the graceful stop was shown above


# --- 2. production `cs serve` ---------------------------------------------------------


# a request body that stops arriving: 100 bytes announced, 10 sent
STALLED_BODY = (b"POST /api/team/accept HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{\"token\":")


def _stalled_body(address) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    sock.sendall(STALLED_BODY)
    return sock


def _answer_of(sock: socket.socket) -> tuple[bytes, dict]:
    """The status line and JSON body of one answer read off a raw connection."""
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(4000)
        assert chunk, data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    return head.split(b"\r\n", 1)[0], json.loads(body)


def _healthy(sup: Service, tree: Tree) -> tuple[str, tuple[str, int]]:
    """The URL and address of a production `cs serve` once it answers health 200."""
    url = sup.wait_for_line(SERVING).group(1)
    poll_http(f"{url}/api/health", until=lambda r: tree.record() is not None and r.status_code == 200,
              timeout=40, service=sup)
    return url, (urlsplit(url).hostname, urlsplit(url).port)


def _log_after_stop(sup: Service, tmp_path) -> str:
    sup.signal(signal.SIGTERM)
    sup.wait(30)
    return (tmp_path / "serve.err").read_text() + sup.stdout()


def test_embedded_serve_closes_silent_clients_and_answers_a_stalled_body_408(tmp_path):
    """The embedded server gives each connection a thread: one that sent nothing, or part
    of a request, kept its thread for good. It now waits CS_CLIENT_TIMEOUT_SECONDS for a
    client's next bytes, as production does (docs/deploy.md, "Slow clients"): the silent
    connection is closed unanswered, a body that stops arriving gets 408, and neither
    writes an error line."""
    env = service_env(CS_DATA_DIR=str(tmp_path / "data"), CS_CLIENT_TIMEOUT_SECONDS="1")
    sup = Service([CS, "serve", "--port", "0"], env=env, cwd=tmp_path, log=tmp_path / "serve.err")
    clients = []
    try:
        url = sup.wait_for_line(SERVING).group(1)
        poll_http(f"{url}/api/health", until=lambda r: r.status_code == 200, timeout=20, service=sup)
        address = (urlsplit(url).hostname, urlsplit(url).port)
        mute = socket.create_connection(address, timeout=10)
        clients.append(mute)
        body = _stalled_body(address)
        clients.append(body)
        assert mute.recv(1000) == b""        # closed, nothing answered
        status, answer = _answer_of(body)
        assert status.startswith(b"HTTP/1.1 408") and answer["code"] == "validation_failed", (status, answer)
        log = _log_after_stop(sup, tmp_path)
        assert "Traceback" not in log and "timed out" not in log, log[-3000:]
    finally:
        for s in clients:
            s.close()
        sup.kill()


def test_production_serve_is_healthy_and_stops_every_child(tmp_path, migrated_db, redis_prefix):
    """With REDIS_URL and DATABASE_URL, `cs serve` supervises gunicorn and Dramatiq; health
    is ok only once a worker process beats through Redis; SIGTERM stops the supervisor
    (exit 0) and every process under it."""
    port = free_port()
    sup = Service([CS, "serve", "--port", str(port)], env=_prod_env(migrated_db, redis_prefix, tmp_path),
                  cwd=tmp_path, log=tmp_path / "serve.err")
    tree = Tree(sup)
    try:
        url = sup.wait_for_line(SERVING).group(1)
        assert url == f"http://127.0.0.1:{port}"

        health = poll_http(f"{url}/api/health", until=lambda r: bool(tree.record()) and r.status_code == 200,
                           timeout=40, service=sup)
        body = health.json()
        assert body["status"] == "ok", body
        checks = {name: c["status"] for name, c in body["checks"].items()}
        assert checks == {"database": "ok", "cache": "ok", "llm": "disabled", "jobs": "ok", "sweeps": "ok"}

        # The whole tree: gunicorn master + CS_WEB_PROCESSES (2) workers, dramatiq + 1 worker.
        deadline = Deadline(20)
        while True:
            live = [p for p in tree.record() if p.alive]
            gunicorn = [p for p in live if "gunicorn" in p.cmdline]
            dramatiq = [p for p in live if "dramatiq" in p.cmdline]
            if len(gunicorn) >= 3 and len(dramatiq) >= 2:
                break
            assert deadline, f"process tree incomplete: {[p.cmdline for p in live]}\n{sup.describe()}"
            time.sleep(0.1)
        # Each child leads its own session (start_new_session); their members are ours too.
        sessions = tree.sessions
        assert len(sessions) == 2 and sup.pid not in sessions

        stop = Deadline(30)
        sup.signal(signal.SIGTERM)
        assert sup.wait(stop.left + 5) == 0, sup.describe()
        while left := still_running(tree.known, sessions):
            assert stop, f"still running after SIGTERM: {[(p.pid, p.cmdline) for p in left]}"
            time.sleep(0.1)
        assert "stopped" in sup.lines[-1]
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{url}/api/health", timeout=2)
    finally:
        tree.kill()


def test_production_serve_refuses_a_too_long_request_line_in_the_error_shape(tmp_path, migrated_db, redis_prefix):
    """gunicorn refuses a request line over 4094 bytes before the app sees it: the 414 is
    JSON in the API's error shape (the document lists it), not gunicorn's HTML page."""
    sup = Service([CS, "serve", "--port", str(free_port())], env=_prod_env(migrated_db, redis_prefix, tmp_path),
                  cwd=tmp_path, log=tmp_path / "serve.err")
    tree = Tree(sup)
    try:
        url = sup.wait_for_line(SERVING).group(1)
        poll_http(f"{url}/api/health", until=lambda r: tree.record() is not None and r.status_code == 200,
                  timeout=40, service=sup)
        resp = requests.get(f"{url}/api/unsubscribe", params={"token": "x" * 5000}, timeout=10)
        assert resp.status_code == 414
        assert resp.headers["Content-Type"] == "application/json"
        assert resp.json()["code"] == "validation_failed" and resp.json()["error"].startswith("uri too long")
        assert requests.get(f"{url}/api/unsubscribe", params={"token": "x" * 4000}, timeout=10).status_code == 400
    finally:
        tree.kill()


def test_production_serve_answers_everyone_while_clients_leave_finished_connections_open(
        tmp_path, migrated_db, redis_prefix):
    """Three clients each read their whole answer (a `Connection: close` request) and then
    neither close nor send. gunicorn's gthread waited on each for up to 2 s on the thread
    that accepts and finishes every request: one API process then answered no one for
    six seconds. The API worker drains them from its poller (webapp/gunicorn_worker.py):
    each gets its answer and the end of the stream at once, and the next client is
    answered at once too."""
    sup = Service([CS, "serve", "--port", str(free_port())],
                  env={**_prod_env(migrated_db, redis_prefix, tmp_path), "CS_WEB_PROCESSES": "1"},
                  cwd=tmp_path, log=tmp_path / "serve.err")
    tree = Tree(sup)
    idle = []
    try:
        url, address = _healthy(sup, tree)
        for _ in range(3):
            s = socket.create_connection(address, timeout=5)
            s.sendall(b"GET /api/health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            idle.append(s)
        for s in idle:
            s.settimeout(1.0)   # the old wait: 2 s a connection, one after the other
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200") and b'"status"' in answer, answer[:200]
        for _ in range(3):
            assert requests.get(f"{url}/api/health", timeout=1.0).status_code == 200
    finally:
        for s in idle:
            s.close()
        tree.kill()


def test_production_serve_frees_its_threads_from_clients_that_stop_sending(tmp_path, migrated_db, redis_prefix):
    """Clients that connect and send nothing: gunicorn's gthread gave each a thread for
    up to 5 s, so four of them kept a two-thread process from answering anyone; they
    now wait in the worker's poller (webapp/gunicorn_worker.py) and the next client is
    answered at once. Then four clients send part of a request's headers and then
    nothing, a fifth the headers and part of a body: with gthread each held a thread for
    good. Every read of a request is bounded by CS_CLIENT_TIMEOUT_SECONDS
    (webapp/client_reads.py): the unfinished heads are closed without an answer, the
    unfinished body gets a 408 `request_timeout`, the next client is answered, and the
    log holds no traceback."""
    env = {**_prod_env(migrated_db, redis_prefix, tmp_path), "CS_WEB_PROCESSES": "1", "CS_API_THREADS": "2",
           "CS_CLIENT_TIMEOUT_SECONDS": "1"}
    sup = Service([CS, "serve", "--port", str(free_port())], env=env, cwd=tmp_path, log=tmp_path / "serve.err")
    tree = Tree(sup)
    silent = []
    try:
        url, address = _healthy(sup, tree)
        mute = [socket.create_connection(address, timeout=10) for _ in range(4)]
        silent += mute
        assert requests.get(f"{url}/api/health", timeout=2).status_code == 200
        for s in mute:
            assert s.recv(1000) == b""       # closed after CS_CLIENT_TIMEOUT_SECONDS, nothing answered

        for _ in range(4):
            s = socket.create_connection(address, timeout=10)
            s.sendall(b"GET /api/health HTTP/1.1\r\nHost: t\r\n")
            silent.append(s)
        body = _stalled_body(address)
        silent.append(body)

        assert requests.get(f"{url}/api/health", timeout=8).status_code == 200
        for s in silent[4:8]:
            assert s.recv(1000) == b""       # closed, nothing answered
        status, answer = _answer_of(body)
        assert status.startswith(b"HTTP/1.1 408") and answer["code"] == "validation_failed", (status, answer)
        log = _log_after_stop(sup, tmp_path)
        assert "Traceback" not in log and "Socket error" not in log, log[-3000:]
        assert "the request body stopped arriving" in log   # one line, at info level
    finally:
        for s in silent:
            s.close()
        tree.kill()


def test_production_serve_refuses_an_unmigrated_database(tmp_path, redis_prefix):
    """Against a database `cs db upgrade` never ran on, `cs serve` starts nothing and exits
    non-zero with one line saying what to run."""
    name, url = _create_database()
    try:
        sup = Service([CS, "serve", "--port", str(free_port())], env=_prod_env(url, redis_prefix, tmp_path),
                      cwd=tmp_path, log=tmp_path / "serve.err")
        tree = Tree(sup)
        try:
            code = sup.wait(30)
        finally:
            tree.kill()
    finally:
        _drop_database(name)
    assert code != 0
    stderr = sup.log.read_text()
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "cs db upgrade" in lines[0]
    assert sup.stdout().strip() == ""


# --- 3. the rate limit is shared by two API processes ----------------------------------


def test_rate_limit_is_shared_by_two_api_processes(tmp_path, migrated_db, redis_prefix):
    """Two gunicorn processes on one Redis: one key's count goes down by one per request
    whichever process answers, and request 601 of a minute is refused with 429."""
    env = _prod_env(migrated_db, redis_prefix, tmp_path)
    made = subprocess.run([CS, "tenant", "create", "Ratelimit", "--owner-email", "owner@rl.example",
                           "--plan", "trial", "--json"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["api_key"]

    servers: list[tuple[Service, str]] = []
    try:
        for n in range(2):
            port = free_port()
            svc = Service([PYTHON, "-m", "gunicorn", "webapp.wsgi:app", "--bind", f"127.0.0.1:{port}",
                           "--workers", "1"], env=env, cwd=tmp_path, log=tmp_path / f"api{n}.err",
                          new_session=True)
            servers.append((svc, f"http://127.0.0.1:{port}"))
        for svc, base in servers:
            health = poll_http(f"{base}/api/health", until=lambda r: r.status_code in (200, 503),
                               timeout=30, service=svc)
            assert health.json()["checks"]["cache"]["status"] == "ok", health.text

        sessions = [requests.Session() for _ in servers]
        for s in sessions:
            s.headers["Authorization"] = f"Bearer {key}"

        def send(n: int) -> requests.Response:
            return sessions[n % 2].get(f"{servers[n % 2][1]}/api/settings", timeout=10)

        window: int | None = None
        restarted = False
        index = 0  # requests counted in the current window
        n = 0
        while True:
            resp = send(n)
            reset = int(resp.headers["X-RateLimit-Reset"])
            if window is not None and reset != window:
                assert not restarted, "crossed two minute boundaries in one run"
                assert reset == window + 60
                restarted, index = True, 0
            window = reset
            assert resp.headers["X-RateLimit-Limit"] == str(TRIAL_LIMIT)
            if index < TRIAL_LIMIT:
                assert resp.status_code == 200, (n, resp.status_code, resp.text)
                assert int(resp.headers["X-RateLimit-Remaining"]) == TRIAL_LIMIT - 1 - index, (n, index)
            else:
                break
            index += 1
            n += 1

        assert resp.status_code == 429, resp.text
        assert resp.json()["code"] == "rate_limited"
        assert resp.headers["X-RateLimit-Remaining"] == "0"
        retry_after = int(resp.headers["Retry-After"])
        assert 1 <= retry_after <= 60
        assert abs((window - time.time()) - retry_after) <= 2

        other = send(n + 1)  # the other process refuses it too, within the same window
        if int(other.headers["X-RateLimit-Reset"]) == window:
            assert other.status_code == 429 and other.json()["code"] == "rate_limited"
    finally:
        for svc, _ in servers:
            svc.kill()


# --- 4. health follows PostgreSQL and Redis outages -----------------------------------


@pytest.fixture(scope="module")
def proxied_app(migrated_db, tmp_path_factory):
    """An in-process app whose DATABASE_URL and REDIS_URL go through TCP proxies to the real
    PostgreSQL and Redis, with the real Dramatiq worker (Redis broker) beating. Its periodic
    sweeps run too, on this module's own database, and fail while it is cut off."""
    from webapp import create_app

    tmp_path = tmp_path_factory.mktemp("proxied")
    pg = make_url(migrated_db)
    rd = urlsplit(REDIS)
    pg_proxy = TcpProxy(pg.host or "127.0.0.1", pg.port or 5432).start()
    redis_proxy = TcpProxy(rd.hostname or "127.0.0.1", rd.port or 6379).start()
    prefix = f"csdaemon-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        cs_data_dir=tmp_path,
        database_url=pg.set(host="127.0.0.1", port=pg_proxy.port).render_as_string(hide_password=False),
        redis_url=f"redis://127.0.0.1:{redis_proxy.port}{rd.path or '/0'}",
        cs_redis_prefix=prefix, cs_secret_key="daemon-test-secret",
    )
    app = create_app(settings)
    rt = app.extensions["cs"]
    try:
        rt.start_worker()
        yield app.test_client(), pg_proxy, redis_proxy
    finally:
        pg_proxy.start()
        redis_proxy.start()
        rt.stop_worker()
        pg_proxy.stop()
        redis_proxy.stop()
        dispose_engines()
        drop_redis_keys(prefix)
        jobs_broker.install(Settings(cs_data_dir=tmp_path, database_url=None, redis_url=None,
                                     cs_secret_key="t"))


@pytest.fixture
def proxied(proxied_app):
    """The proxied app with both dependencies up again after each test."""
    yield proxied_app
    for proxy in proxied_app[1:]:
        proxy.start()


def _health(client):
    start = time.monotonic()
    resp = client.get("/api/health")
    took = time.monotonic() - start
    assert took < 5, f"health took {took:.1f} s"
    return resp


def _wait_health(client, status: int, timeout: float = 15.0):
    deadline = Deadline(timeout)
    while True:
        resp = _health(client)
        if resp.status_code == status:
            return resp
        assert deadline, f"health not {status} in {timeout} s: {resp.status_code} {resp.json}"
        time.sleep(0.1)


def _statuses(resp) -> dict[str, str]:
    return {name: c["status"] for name, c in resp.json["checks"].items()}


def test_health_is_degraded_while_postgres_is_unreachable(proxied):
    client, pg_proxy, _ = proxied
    assert _statuses(_wait_health(client, 200))["jobs"] == "ok"

    pg_proxy.stop()
    for _ in range(2):  # the first answer and the next one (no pool left to fall back on)
        resp = _health(client)
        assert resp.status_code == 503, resp.json
        assert resp.json["status"] == "degraded"
        db = resp.json["checks"]["database"]
        assert db["status"] == "error" and db["error"]
        assert _statuses(resp)["cache"] == "ok"

    pg_proxy.start()
    resp = _wait_health(client, 200)
    assert resp.json["status"] == "ok" and _statuses(resp)["database"] == "ok"


def test_health_is_degraded_while_redis_is_unreachable(proxied):
    client, _, redis_proxy = proxied
    assert _statuses(_wait_health(client, 200))["jobs"] == "ok"

    redis_proxy.stop()
    for _ in range(2):
        resp = _health(client)
        assert resp.status_code == 503, resp.json
        assert resp.json["status"] == "degraded"
        cache = resp.json["checks"]["cache"]
        assert cache["status"] == "error" and cache["error"]
        assert _statuses(resp)["database"] == "ok"

    redis_proxy.start()
    resp = _wait_health(client, 200)
    assert resp.json["status"] == "ok" and _statuses(resp)["cache"] == "ok"
