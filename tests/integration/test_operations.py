"""Operations for real (docs/operations.md): `cs serve` in the production mode with
CS_METRICS_TOKEN and CS_LOG_FORMAT=json; /metrics sums the counts of every gunicorn
process through the multi-process directory; a request's id is in a JSON log line of the
API process; `cs status` sees an API and a worker process beat and exits 0. And the same
`cs status` next to an embedded `cs serve`, then 1 once it stopped."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid

import psycopg
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
import requests

from tests.conftest import PG, REDIS, _pg_conninfo
from tests.support.processes import CS, Service, Tree, free_port, poll_http, service_env

SERVING = r"serving on (http://127\.0\.0\.1:(\d+))(?:\s|$)"
TOKEN = "ops-test-metrics-token"


@pytest.fixture
def production_env(tmp_path):
    name, prefix = f"cs_ops_{uuid.uuid4().hex[:10]}", f"csops-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env = service_env(DATABASE_URL=f"{PG}/{name}", REDIS_URL=REDIS, CS_REDIS_PREFIX=prefix,
                      CS_SECRET_KEY="ops-test-secret", CS_DATA_DIR=str(tmp_path / "data"),
                      CS_METRICS_TOKEN=TOKEN, CS_LOG_FORMAT="json",
                      PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    try:
        done = subprocess.run([CS, "db", "upgrade"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        yield env
    finally:
        with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


def _requests_to(text: str, route: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "cs_http_requests_total" and s.labels.get("route") == route)


def _status(env, cwd) -> tuple[int, dict]:
    done = subprocess.run([CS, "status", "--json"], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout)


def test_production_metrics_logs_and_status(tmp_path, production_env):
    (tmp_path / "metrics").mkdir(exist_ok=True)
    (tmp_path / "metrics" / "counter_999999.db").write_bytes(b"left from an earlier run")
    sup = Service([CS, "serve", "--port", str(free_port())], env=production_env, cwd=tmp_path,
                  log=tmp_path / "serve.err")
    tree = Tree(sup)
    try:
        url = sup.wait_for_line(SERVING).group(1)
        poll_http(f"{url}/api/health", until=lambda r: bool(tree.record()) and r.status_code == 200,
                  timeout=40, service=sup)
        assert not (tmp_path / "metrics" / "counter_999999.db").exists()   # emptied at start
        assert requests.get(f"{url}/metrics", timeout=5).status_code == 401
        sent = [requests.get(f"{url}/api/openapi.json", headers={"X-Request-Id": f"ops-{i}"}, timeout=5)
                for i in range(20)]
        assert [r.headers["X-Request-Id"] for r in sent] == [f"ops-{i}" for i in range(20)]
        # every API process's counts, whichever process answers the scrape
        for _ in range(4):
            scraped = requests.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            assert scraped.status_code == 200
            assert _requests_to(scraped.text, "/api/openapi.json") == 20
        assert "cs_job_queue_ready" in scraped.text and "cs_deliveries_overdue" in scraped.text
        lines = [json.loads(line) for line in (tmp_path / "serve.err").read_text().splitlines()
                 if line.startswith("{")]
        assert any(line["request_id"] == "ops-7" and "/api/openapi.json" in line["message"] for line in lines)
        poll_http(f"{url}/api/health", until=lambda r: _status(production_env, tmp_path)[0] == 0, timeout=30)
        code, body = _status(production_env, tmp_path)
        assert code == 0 and body["verdict"] == "ok", body
        assert len(body["processes"]["api"]) >= 2 and body["processes"]["worker"]
        sup.signal(signal.SIGTERM)
        assert sup.wait(40) == 0, sup.describe()
    finally:
        tree.kill()


def test_embedded_status_follows_the_daemon(tmp_path):
    env = service_env(CS_DATA_DIR=str(tmp_path / "data"))
    sup = Service([CS, "serve", "--port", str(free_port())], env=env, cwd=tmp_path, log=tmp_path / "serve.err")
    try:
        url = sup.wait_for_line(SERVING).group(1)
        poll_http(f"{url}/api/health", until=lambda r: _status(env, tmp_path)[0] == 0, timeout=30, service=sup)
        code, body = _status(env, tmp_path)
        assert code == 0 and body["verdict"] == "ok"
        assert [p["alive"] for p in body["processes"]["api"]] == [True]
        assert [p["alive"] for p in body["processes"]["worker"]] == [True]
    finally:
        sup.signal(signal.SIGTERM)
        sup.wait(30)
