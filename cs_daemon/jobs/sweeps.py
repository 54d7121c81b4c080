"""Periodic sweeps, one tenant at a time: each tenant's work runs in its own
transaction(s) and error boundary, so one tenant's failure never stops another's.

`for_each_tenant(rt, sweep, tenant_ids, work)` calls `work(tenant_id)` for each tenant.
A tenant whose work raises is logged with its id, counted, and recorded (ops_state: a
Redis hash in production, files under CS_DATA_DIR in the embedded mode, so `cs status`,
another process, reads them too) as a failure of that sweep, which `GET /api/health`
shows under the `sweeps` check; the next tenant goes on. The record is cleared as soon as the tenant's sweep succeeds again, and forgotten
FORGET_AFTER after its last failure (a tenant no longer swept). docs/api.md, "Health".

`work` raises SkippedStoredData after its work is done (committed) when it had to leave
out stored data that no longer validates (a playbook written before today's rules): the
rest of the tenant's work is done, and the failure record says what was left out.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable

from .. import logs, metrics, ops_state
from .context import runtime

log = logging.getLogger(__name__)

FAILURES_KEY = "sweeps:failures"        # a hash: "<sweep>:<tenant id>" -> the failure as JSON
FORGET_AFTER = timedelta(hours=1)
ERROR_CHARS = 300


class SkippedStoredData(Exception):
    """The tenant's work was done, but for stored data that no longer validates."""


@dataclass
class Tally:
    tenants: int = 0
    done: int = 0
    failed: list[str] = field(default_factory=list)


def for_each_tenant(rt, sweep: str, tenant_ids: Iterable[str], work: Callable[[str], int | None]) -> Tally:
    """Run `work(tenant_id)` for each tenant, each in its own error boundary; returns
    how many tenants ran, the sum of what `work` returned, and the tenants that failed."""
    failing = _failing(rt, sweep)
    tally = Tally()
    started = time.monotonic()
    for tenant_id in tenant_ids:
        tally.tenants += 1
        with logs.bind(tenant_id=tenant_id):
            _one_tenant(rt, sweep, tenant_id, work, tally, failing)
    if tally.failed:
        log.warning("%s: %d of %d tenants failed", sweep, len(tally.failed), tally.tenants)
    ran(rt, sweep, time.monotonic() - started, tally)
    return tally


def sweep_tenants(sweep: str, tenants_of: Callable[[Any, datetime], Iterable[str]],
                  work: Callable[[Any, str, datetime], int | None]) -> Tally:
    """A whole sweep, at one `now`: `tenants_of(session, now)` lists the tenants to sweep (in a
    session of no tenant), then `work(rt, tenant_id, now)` runs for each, as for_each_tenant says."""
    rt = runtime()
    now = rt.now()
    with rt.session() as session:
        tenant_ids = tenants_of(session, now)
    return for_each_tenant(rt, sweep, tenant_ids, lambda tenant_id: work(rt, tenant_id, now))


def ran(rt, sweep: str, seconds: float, tally: Tally) -> None:
    """A sweep's run: its duration to /metrics and its last run for `cs status`."""
    try:
        metrics.SWEEP_SECONDS.labels(sweep=sweep).observe(seconds)
        ops_state.put(rt, ops_state.SWEEP_RUNS, sweep,
                      {"sweep": sweep, "at": rt.now().isoformat(), "seconds": round(seconds, 3),
                       "tenants": tally.tenants, "done": tally.done, "failed": len(tally.failed)})
    except Exception as exc:   # the sweep's work stands
        log.warning("%s: its run not recorded: %s", sweep, exc)


def _one_tenant(rt, sweep: str, tenant_id: str, work, tally: Tally, failing: dict) -> None:
    try:
        tally.done += work(tenant_id) or 0
    except Exception as exc:  # the boundary: this tenant's failure is recorded, the rest go on
        tally.failed.append(tenant_id)
        if isinstance(exc, SkippedStoredData):
            log.warning("%s: tenant %s: %s", sweep, tenant_id, exc)
        else:
            log.exception("%s: tenant %s failed: %s", sweep, tenant_id, _one_line(exc))
        _record(rt, sweep, tenant_id, exc, failing.get(tenant_id))
        metrics.bump(metrics.SWEEP_FAILURES, sweep=sweep, tenant_id=tenant_id)
    else:
        if tenant_id in failing:
            _forget(rt, [f"{sweep}:{tenant_id}"])


def failures(rt, now: datetime) -> list[dict]:
    """Every sweep's current failures, newest first: [{sweep, tenant_id, error, at,
    count}] (`count`: failed runs in a row). Old ones are forgotten on the way."""
    entries, stale = [], []
    for name, entry in _read(rt).items():
        if datetime.fromisoformat(entry["at"]) < now - FORGET_AFTER:
            stale.append(name)
        else:
            entries.append(entry)
    if stale:
        _forget(rt, stale)
    return sorted(entries, key=lambda e: (e["at"], e["sweep"], e["tenant_id"]), reverse=True)


def _failing(rt, sweep: str) -> dict[str, dict]:
    return {entry["tenant_id"]: entry for entry in _read(rt).values() if entry["sweep"] == sweep}


def _record(rt, sweep: str, tenant_id: str, exc: Exception, before: dict | None) -> None:
    entry = {"sweep": sweep, "tenant_id": tenant_id, "error": _shown(exc), "at": rt.now().isoformat(),
             "count": (before or {}).get("count", 0) + 1}
    try:
        ops_state.put(rt, FAILURES_KEY, f"{sweep}:{tenant_id}", entry)
    except Exception as store_error:  # an unreachable cache must not stop the sweep
        log.warning("%s: failure of tenant %s not recorded: %s", sweep, tenant_id, store_error)


def _read(rt) -> dict[str, dict]:
    """The records by their field, those that read as failures."""
    try:
        found = ops_state.read(rt, FAILURES_KEY)
    except Exception as exc:
        log.warning("sweep failures not read: %s", exc)
        return {}
    return {name: entry for name, entry in found.items() if _valid(entry)}


def _forget(rt, names: list[str]) -> None:
    try:
        ops_state.drop(rt, FAILURES_KEY, names)
    except Exception as exc:
        log.warning("sweep failures not cleared: %s", exc)


def _valid(entry) -> bool:
    try:
        datetime.fromisoformat(entry["at"])
        return isinstance(entry["sweep"], str) and isinstance(entry["tenant_id"], str)
    except (ValueError, KeyError, TypeError):
        return False


def _shown(exc: Exception) -> str:
    """What the record (and so the keyless health check) says of a failure: what was left
    out, for stored data skipped (ids and field paths only), else the kind of error alone;
    an exception's text can carry the tenant's stored data, so it goes only to the log."""
    if isinstance(exc, SkippedStoredData):
        return _one_line(exc)
    return f"{type(exc).__name__} (the worker's log has the details)"


def _one_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text[:ERROR_CHARS]
