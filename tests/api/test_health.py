"""GET /api/health (docs/api.md, "Health"); dependency outages are in tests/integration."""

from __future__ import annotations

import time

import pytest

from cs_daemon.jobs import heartbeat


@pytest.fixture
def worker(rt):
    rt.start_worker()
    yield
    rt.stop_worker()


def _wait_healthy(client, deadline=10.0):
    end = time.monotonic() + deadline
    while True:
        resp = client.get("/api/health")
        if resp.status_code == 200 or time.monotonic() > end:
            return resp
        time.sleep(0.05)


def test_health_ok_with_a_live_worker(client, worker, settings):
    resp = _wait_healthy(client)
    assert resp.status_code == 200
    body = resp.json
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "cache", "llm", "jobs", "sweeps"}
    assert body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["cache"]["status"] == ("ok" if settings.redis_url else "disabled")
    assert body["checks"]["llm"]["status"] == "disabled"
    assert body["checks"]["jobs"]["status"] == "ok"
    assert isinstance(body["checks"]["database"]["latency_ms"], (int, float))
    assert body["version"] and body["uptime_seconds"] >= 0


def test_health_needs_no_key(client):
    assert client.get("/api/health").status_code in (200, 503)


def test_health_is_degraded_without_a_worker_heartbeat(client):
    resp = client.get("/api/health")
    assert resp.status_code == 503
    assert resp.json["status"] == "degraded"
    assert resp.json["checks"]["jobs"]["status"] == "error"
    assert "heartbeat" in resp.json["checks"]["jobs"]["error"]


def test_stale_heartbeat_is_degraded(client, rt, monkeypatch):
    heartbeat.beat(rt.cache)
    assert client.get("/api/health").status_code == 200
    real = time.time
    monkeypatch.setattr(heartbeat.time, "time", lambda: real() + 61)
    resp = client.get("/api/health")
    assert resp.status_code == 503 and resp.json["checks"]["jobs"]["status"] == "error"


def test_configured_llm_that_fails_is_degraded(tmp_path, backend, request, sqlite_template, clock):
    from cs_daemon.runtime import Runtime
    from tests.conftest import clean, make_settings
    from webapp import create_app

    pg = request.getfixturevalue("pg_url") if backend == "postgres" else None
    settings = make_settings(backend, tmp_path, pg, sqlite_template,
                             openai_base_url="http://127.0.0.1:9/v1", openai_model="m")
    clean(settings)
    rt = Runtime(settings, clock)
    heartbeat.beat(rt.cache)
    resp = create_app(runtime=rt).test_client().get("/api/health")
    clean(settings)
    assert resp.status_code == 503
    assert resp.json["checks"]["llm"]["status"] == "error"
    # health needs no key: the kind of error, never the model server's address
    assert resp.json["checks"]["llm"]["error"] == "ConnectionError (the log has the details)"


def test_configured_llm_that_answers_is_ok(tmp_path, backend, request, sqlite_template, clock):
    """A real OpenAI-compatible peer on loopback answering GET /v1/models."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cs_daemon.runtime import Runtime
    from tests.conftest import clean, make_settings
    from webapp import create_app

    seen = []

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        pg = request.getfixturevalue("pg_url") if backend == "postgres" else None
        settings = make_settings(backend, tmp_path, pg, sqlite_template, openai_model="m",
                                 openai_base_url=f"http://127.0.0.1:{server.server_port}/v1",
                                 openai_api_key="sk-local")
        clean(settings)
        rt = Runtime(settings, clock)
        heartbeat.beat(rt.cache)
        resp = create_app(runtime=rt).test_client().get("/api/health")
        clean(settings)
    finally:
        server.shutdown()
    assert resp.status_code == 200
    assert resp.json["checks"]["llm"]["status"] == "ok"
    assert seen == [("/v1/models", "Bearer sk-local")]
