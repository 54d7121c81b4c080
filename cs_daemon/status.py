"""What `cs status` tells the engineer on call (docs/operations.md, "cs status"): each
process kind's heartbeats, the job queues and their age, deliveries due, overdue and
failed in the last hour by channel and endpoint, the sweeps' last runs and failures,
open in-app streams, the findings, and a one-line verdict: "stuck" when something is
(no live worker or API process, a delivery overdue, a job waiting too long, a sweep that
stopped running), else "ok"."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from . import ops_state
from .delivery import health as delivery_health
from .jobs import queues
from .jobs import sweeps as sweep_runs
from .jobs.heartbeat import FRESH_FOR

KINDS = ("api", "worker")
FORGET_PROCESS_AFTER = 3600      # a process silent this long is gone: its record is dropped
SWEEP_LATE_AFTER = 900           # a sweep whose last run is older than this has stopped


@dataclass
class Limits:
    overdue_after: timedelta = timedelta(minutes=5)
    queue_age: timedelta = timedelta(minutes=5)


@dataclass
class Finding:
    check: str          # processes | queues | deliveries | sweeps
    stuck: bool
    message: str


@dataclass
class Report:
    verdict: str
    summary: str
    checked_at: datetime
    processes: dict[str, list[dict]]
    queues: list[dict]
    deliveries: list[dict]
    sweeps: dict
    streams_open: int
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def report(rt, limits: Limits) -> Report:
    now, findings = rt.now(), []
    processes = _processes(rt, findings)
    depths = _queues(rt, limits, findings)
    backlog = _deliveries(rt, now, limits, findings)
    sweeps = _sweeps(rt, now, findings)
    streams = sum(p.get("streams_open", 0) for p in processes["api"] if p["alive"])
    stuck = [f for f in findings if f.stuck]
    verdict = "stuck" if stuck else "ok"
    summary = (f"STUCK: {stuck[0].message}" + (f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else "")) if stuck \
        else f"ok: {_alive(processes, 'api')} API and {_alive(processes, 'worker')} worker processes alive" + \
             (f"; {len(findings)} warnings" if findings else "; nothing stuck")
    return Report(verdict, summary, now, processes, depths, backlog, sweeps, streams, findings)


def _alive(processes: dict, kind: str) -> int:
    return sum(1 for p in processes[kind] if p["alive"])


def _processes(rt, findings: list[Finding]) -> dict[str, list[dict]]:
    wall = time.time()
    records = ops_state.read(rt, ops_state.HEARTBEATS)
    gone = [name for name, r in records.items() if wall - float(r.get("at", 0)) > FORGET_PROCESS_AFTER]
    ops_state.drop(rt, ops_state.HEARTBEATS, gone)
    out: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for name, r in sorted(records.items()):
        if name in gone or r.get("kind") not in out:
            continue
        age = max(0.0, wall - float(r["at"]))
        out[r["kind"]].append({"host": r.get("host"), "pid": r.get("pid"), "last_beat_seconds_ago": round(age, 1),
                               "alive": age <= FRESH_FOR, "up_seconds": round(wall - float(r.get("started", wall)), 1),
                               **({"streams_open": r["streams_open"]} if "streams_open" in r else {})})
    for kind in KINDS:
        if not any(p["alive"] for p in out[kind]):
            seen = out[kind]
            last = f"; last beat {min(p['last_beat_seconds_ago'] for p in seen):.0f} s ago" if seen else ""
            findings.append(Finding("processes", True, f"no {kind} process alive (no heartbeat in {FRESH_FOR} s{last})"))
    return out


def _queues(rt, limits: Limits, findings: list[Finding]) -> list[dict]:
    if not rt.settings.production:
        return []   # the embedded queue lives in the daemon's memory: its /metrics shows it
    try:
        depths = queues.depths(rt.settings)
    except Exception as exc:
        findings.append(Finding("queues", True, f"job queues unreadable: {type(exc).__name__}: {exc}"))
        return []
    for d in depths:
        if d.oldest_age_seconds is not None and d.oldest_age_seconds > limits.queue_age.total_seconds():
            findings.append(Finding("queues", True, f"queue {d.queue}: the oldest of {d.ready} jobs has waited "
                                                    f"{d.oldest_age_seconds:.0f} s"))
    return [asdict(d) for d in depths]


def _deliveries(rt, now: datetime, limits: Limits, findings: list[Finding]) -> list[dict]:
    with rt.session(atomic=False) as s:
        rows = delivery_health.by_endpoint(s, now, limits.overdue_after)
    for b in rows:
        if b.overdue:
            findings.append(Finding("deliveries", True, f"{b.overdue} {b.channel} deliveries to {b.endpoint} overdue "
                                                        f"(due more than {_span(limits.overdue_after)} ago)"))
        if b.failed_last_hour:
            findings.append(Finding("deliveries", False, f"{b.failed_last_hour} {b.channel} deliveries to {b.endpoint} "
                                                         "failed for good in the last hour"))
    return [asdict(b) for b in rows]


def _sweeps(rt, now: datetime, findings: list[Finding]) -> dict:
    runs = sorted(ops_state.read(rt, ops_state.SWEEP_RUNS).values(), key=lambda r: r.get("sweep", ""))
    for run in runs:
        age = (now - datetime.fromisoformat(run["at"])).total_seconds()
        run["age_seconds"] = round(age, 1)
        if age > SWEEP_LATE_AFTER:
            findings.append(Finding("sweeps", True, f"{run['sweep']} last ran {age / 60:.0f} min ago"))
    failures = sweep_runs.failures(rt, now)
    for f in failures:
        findings.append(Finding("sweeps", False, f"{f['sweep']} fails for tenant {f['tenant_id']} "
                                                 f"({f['count']} runs in a row): {f['error']}"))
    return {"runs": runs, "failures": failures}


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60} min" if seconds >= 120 and seconds % 60 == 0 else f"{seconds} s"
