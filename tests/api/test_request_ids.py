"""Request ids and log lines (docs/operations.md, "Logs"): every response carries
X-Request-Id, echoed when the client sent a sane one; the log lines of a request name it and
its tenant; CS_LOG_FORMAT=json writes one JSON object a line; a 500 logs the traceback once."""

from __future__ import annotations

import json
import logging

import pytest

from cs_daemon import logs
from tests.conftest import auth


@pytest.fixture
def log_lines(capsys):
    """Our own stderr handler in the JSON format; returns a reader of the lines written."""
    logs.setup_logging("INFO", "json")
    capsys.readouterr()

    def read() -> list[dict]:
        return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]

    yield read
    logs.setup_logging("INFO", "text")


def test_every_response_carries_a_request_id(client, tenant):
    seen = set()
    for resp in (client.get("/api/settings", headers=auth(tenant.key)), client.get("/api/nowhere"),
                 client.get("/api/settings"), client.get("/api/health")):
        rid = resp.headers.get("X-Request-Id")
        assert rid and 1 <= len(rid) <= 128
        seen.add(rid)
    assert len(seen) == 4   # made anew for each


@pytest.mark.parametrize("sent, kept", [
    ("req-42:abc/DEF", True), ("x" * 128, True),
    ("x" * 129, False), ("has space", False), ("tab\there", False), ("é", False),
])
def test_a_sane_request_id_is_echoed_else_replaced(client, tenant, sent, kept):
    resp = client.get("/api/settings", headers={**auth(tenant.key), "X-Request-Id": sent})
    assert resp.status_code == 200
    assert (resp.headers["X-Request-Id"] == sent) is kept
    assert resp.headers["X-Request-Id"]


def test_the_log_line_of_a_request_names_its_id_and_tenant(client, tenant, log_lines):
    resp = client.get("/api/settings", headers={**auth(tenant.key), "X-Request-Id": "trace-me-1"})
    assert resp.headers["X-Request-Id"] == "trace-me-1"
    lines = log_lines()
    mine = [line for line in lines if line["request_id"] == "trace-me-1"]
    assert mine, lines
    assert all(line["tenant_id"] == tenant.id for line in mine)
    access = [line for line in mine if line["logger"] == "webapp.access"]
    assert access and "GET /api/settings 200" in access[0]["message"]
    assert set(access[0]) >= {"time", "level", "logger", "message", "request_id", "tenant_id"}
    # the next request, with no key, names neither that id nor that tenant
    client.get("/api/health")
    later = log_lines()
    assert later and all(line["request_id"] != "trace-me-1" and line["tenant_id"] == "-" for line in later)


def test_text_format_names_the_request_id_too(client, tenant, capsys):
    logs.setup_logging("INFO", "text")
    capsys.readouterr()
    client.get("/api/settings", headers={**auth(tenant.key), "X-Request-Id": "text-line-7"})
    err = capsys.readouterr().err
    assert f"[request_id=text-line-7 tenant={tenant.id}]" in err


def test_a_500_logs_its_request_id_and_traceback_once(app, client, tenant, monkeypatch, log_lines):
    from cs_daemon.tenants import service

    def boom(*a, **kw):
        raise RuntimeError("kaboom in the settings read")

    monkeypatch.setattr(service, "get", boom)
    app.config["PROPAGATE_EXCEPTIONS"] = False
    resp = client.get("/api/settings", headers={**auth(tenant.key), "X-Request-Id": "err-500-a"})
    assert resp.status_code == 500 and resp.headers["X-Request-Id"] == "err-500-a"
    lines = log_lines()
    with_trace = [line for line in lines if "traceback" in line]
    assert len(with_trace) == 1, lines
    assert with_trace[0]["request_id"] == "err-500-a" and with_trace[0]["level"] == "ERROR"
    assert "kaboom in the settings read" in with_trace[0]["traceback"]
    assert with_trace[0]["tenant_id"] == tenant.id
