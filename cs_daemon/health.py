"""GET /api/health: database, cache, llm and jobs, and the sweeps'
per-tenant failures (docs/api.md, "Health")."""

from __future__ import annotations

import logging
import time

import requests
from sqlalchemy import text

from . import __version__
from .db import get_engine
from .jobs import sweeps as sweep_runs
from .jobs.heartbeat import FRESH_FOR, last_beat_age
from .runtime import Runtime

log = logging.getLogger(__name__)
SHOWN_FAILURES = 50


class CheckFailed(RuntimeError):
    """A failure a check words itself: its text is shown as it is."""


def _timed(name: str, fn) -> dict:
    start = time.perf_counter()
    try:
        status = fn() or "ok"
        result = {"status": status}
    except Exception as exc:  # a check reports failure; it never raises
        result = {"status": "error", "error": _shown(name, exc)}
    result["latency_ms"] = round((time.perf_counter() - start) * 1000, 2)
    return result


def _shown(name: str, exc: Exception) -> str:
    """What health, which needs no key, shows of a failure: a check's own words, or the
    kind of error only; a driver's text (hosts, ports, users, URLs) goes to the log."""
    if isinstance(exc, CheckFailed):
        return str(exc)
    log.warning("health: %s check failed: %s", name, _one_line(exc))
    return f"{type(exc).__name__} (the log has the details)"


def _one_line(exc: Exception) -> str:
    text_ = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text_[0] if text_ else ''}"[:300]


def sweeps(rt: Runtime) -> dict:
    """The periodic sweeps' current per-tenant failures (jobs/sweeps.py)."""
    start = time.perf_counter()
    found = sweep_runs.failures(rt, rt.now())
    return {"status": "degraded" if found else "ok", "failing": len(found), "failures": found[:SHOWN_FAILURES],
            "latency_ms": round((time.perf_counter() - start) * 1000, 2)}


def check(rt: Runtime) -> tuple[dict, bool]:
    settings = rt.settings

    def database():
        with get_engine(settings).connect() as conn:
            conn.execute(text("SELECT 1"))

    def cache():
        if not settings.redis_url:
            return "disabled"
        rt.cache.ping()

    def llm():
        if not settings.llm_configured:
            return "disabled"
        base = (settings.openai_base_url or "https://api.openai.com/v1").rstrip("/")
        headers = {"Authorization": f"Bearer {settings.openai_api_key}"} if settings.openai_api_key else {}
        resp = requests.get(f"{base}/models", headers=headers, timeout=2, allow_redirects=False)
        if resp.status_code >= 400:
            raise CheckFailed(f"model server answered {resp.status_code}")

    def jobs():
        age = last_beat_age(rt.cache)
        if age is None or age > FRESH_FOR:
            raise CheckFailed("no worker heartbeat in the last 60 seconds")

    checks = {name: _timed(name, fn) for name, fn in
              (("database", database), ("cache", cache), ("llm", llm), ("jobs", jobs))}
    # a dependency that fails degrades the service (503); a tenant whose sweep fails does
    # not: every other tenant is served, and a 503 would take the node out for all of them
    healthy = all(c["status"] in ("ok", "disabled") for c in checks.values())
    checks["sweeps"] = sweeps(rt) if checks["cache"]["status"] != "error" else \
        {"status": "error", "error": "the cache is unreachable: sweep failures unknown"}
    body = {
        "status": "ok" if healthy else "degraded",
        "checks": checks,
        "version": __version__,
        "uptime_seconds": round(time.monotonic() - rt.started, 3),
    }
    return body, healthy
