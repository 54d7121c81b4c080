"""Soak: steady mixed load on `cs serve` in production mode for --minutes; memory and backlog trend.

The verdict: after the warm-up no process's RSS grows more than GROWTH_MB and GROWTH_PCT (first
sample after the warm-up to the mean of the last three), and the overdue deliveries and queued
messages end at most BACKLOG_SLACK above their median."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import Counter

import psycopg
import redis

import harness as h
from tests.support.receiver import Receiver
from tests.support.smtp_server import Mailbox
from tests.support.workload import Driver, Workload

OPTIONS = """
--minutes 30  >=1 length of the run
--strict      exit 1 when the verdict is not ok
"""
RATE = 4.0              # units of work a second (one a tracked batch of 5, an approved intervention or a dispatch)
THREADS = 2             # client threads
DAEMON = {"CS_WEB_PROCESSES": "2", "CS_WORKER_PROCESSES": "1", "CS_WORKER_THREADS": "4"}
GROWTH_MB, GROWTH_PCT = 16, 10
BACKLOG_SLACK = 50

BACKLOG_SQL = {
    "open": "SELECT count(*) FROM deliveries WHERE status IN ('pending', 'retrying')",
    "overdue": "SELECT count(*) FROM deliveries WHERE status IN ('pending', 'retrying') "
               "AND next_attempt_at < now() - interval '1 minute'",
    "delivered": "SELECT count(*) FROM deliveries WHERE status = 'delivered'",
    "owed decisions": "SELECT count(*) FROM decision_requests",
}


def rss_mb(pid: int) -> float | None:
    rss = h.proc_status(pid).get("VmRSS")
    return int(rss.split()[0]) / 1024 if rss else None


def roles(daemon: h.Server) -> dict[str, int]:
    """role -> pid of every process of the daemon's tree."""
    table = {p.pid: p for p in h.descendants(daemon.pid)}
    out, counts = {"supervisor": daemon.pid}, Counter()
    for p in sorted(table.values(), key=lambda p: p.pid):
        parent = table.get(p.ppid)
        if "gunicorn" in p.cmdline:
            kind = "api worker" if parent is not None and "gunicorn" in parent.cmdline else "api master"
        elif "dramatiq" in p.cmdline:
            kind = "job worker" if parent is not None and "dramatiq" in parent.cmdline else "job master"
        else:
            continue
        counts[kind] += 1
        out[f"{kind} {counts[kind]}" if kind.endswith("worker") else kind] = p.pid
    return out


class Sampler:
    def __init__(self, daemon: h.Server, db: str, prefix: str, load: Workload):
        self.daemon, self.db, self.prefix, self.load = daemon, db, prefix, load
        self.redis = redis.Redis.from_url(h.REDIS, socket_timeout=5)
        self.rows: list[dict] = []
        self.pids: dict[str, list[int]] = {}
        self._answers, self._delivered = Counter(), 0

    def sample(self, minute: float) -> dict:
        row: dict = {"minute": minute}
        for role, pid in roles(self.daemon).items():
            row[role] = rss_mb(pid)
            self.pids.setdefault(role, [])
            if pid not in self.pids[role]:
                self.pids[role].append(pid)
        ns = f"{self.prefix}:dramatiq"
        row["queued"] = self.redis.llen(f"{ns}:default")
        row["delayed"] = self.redis.zcard(f"{ns}:default.DQ")
        with psycopg.connect(h.conninfo(self.db), autocommit=True, connect_timeout=5) as conn:
            for name, sql in BACKLOG_SQL.items():
                row[name] = conn.execute(sql).fetchone()[0]
        answers = Counter(self.load.answers)
        row["requests"] = sum((answers - self._answers).values())
        row["5xx"] = sum(n for code, n in (answers - self._answers).items() if code.startswith("5"))
        row["sent"] = row["delivered"] - self._delivered
        self._answers, self._delivered = answers, row["delivered"]
        self.rows.append(row)
        return row


def show(rows: list[dict], memory_roles: list[str]) -> str:
    head = ["min", *[f"{r} MB" for r in memory_roles], "queued", "delayed", "open", "overdue", "owed",
            "requests", "5xx", "delivered"]
    body = [[f"{r['minute']:g}", *[f"{r.get(m) or 0:.1f}" for m in memory_roles], r["queued"], r["delayed"],
             r["open"], r["overdue"], r["owed decisions"], r["requests"], r["5xx"], r["sent"]] for r in rows]
    return h.table(body, head)


def slopes(rows: list[dict], roles_: list[str], warmup: float) -> dict[str, float]:
    """Each process's RSS trend after the warm-up, MB an hour (least squares)."""
    judged = [r for r in rows if r["minute"] > warmup]
    out = {}
    for role in roles_:
        points = [(r["minute"], r[role]) for r in judged if r.get(role)]
        if len(points) >= 3:
            out[role] = statistics.linear_regression(*zip(*points)).slope * 60
    return out


def verdict(rows: list[dict], pids: dict[str, list[int]], warmup: float) -> list[str]:
    """The problems found (none: ok)."""
    judged = [r for r in rows if r["minute"] > warmup]
    if len(judged) < 4:
        return [f"too short to judge: {len(judged)} samples after the {warmup}-minute warm-up (need 4)"]
    problems = []
    for role, seen in pids.items():
        if len(seen) > 1:
            problems.append(f"{role} restarted ({len(seen)} pids)")
            continue
        first = judged[0].get(role)
        last = statistics.fmean(r.get(role) or 0 for r in judged[-3:])
        if first and last - first > GROWTH_MB and last > first * (1 + GROWTH_PCT / 100):
            problems.append(f"{role}: RSS {first:.1f} -> {last:.1f} MB after the warm-up")
    for name in ("overdue", "queued"):
        median = statistics.median(r[name] for r in judged)
        if judged[-1][name] > median + BACKLOG_SLACK:
            problems.append(f"{name} backlog grows: {judged[-1][name]} at the end, median {median:.0f}")
    if judged[-1]["overdue"]:
        problems.append(f"{judged[-1]['overdue']} deliveries overdue more than a minute at the end")
    if any(r["5xx"] for r in rows):
        problems.append(f"{sum(r['5xx'] for r in rows)} answers 5xx")
    return problems


def run(bench: h.Bench, args) -> int:
    every, warmup = min(60.0, args.minutes * 6.0), min(3.0, args.minutes / 5)    # seconds, minutes
    db = bench.database()
    tenant = bench.tenant(db, "scale")
    hooks, actions, mailbox = Receiver(), Receiver(), Mailbox()
    bench.cleanups += [hooks.close, actions.close, mailbox.close]
    daemon = bench.serve(db, **DAEMON, CS_STREAM_SLOTS="16", SMTP_URL=mailbox.url, ALLOW_PRIVATE_WEBHOOK_URLS="1",
                         CS_LOG_LEVEL="WARNING")
    load = Workload([daemon.url()], tenant.key)
    load.setup(hooks_url=hooks.url, actions_url=actions.url)
    sampler = Sampler(daemon, db, bench.prefix, load)
    h.say(f"soak: {args.minutes} min at {RATE}/s over {THREADS} threads, a sample every {every:g} s")
    driver = Driver(load, threads=THREADS, pause=THREADS / RATE).start()
    began = time.monotonic()
    try:
        for n in range(1, int(args.minutes * 60 / every) + 1):
            time.sleep(max(0.0, began + n * every - time.monotonic()))
            daemon.check("the soak")
            row = sampler.sample(round(n * every / 60, 2))
            line = show([row], [k for k in row if k in sampler.pids]).splitlines()
            h.say("\n".join(line if n == 1 else line[1:]))
    finally:
        driver.stop()
    memory = list(sampler.pids)
    problems = verdict(sampler.rows, sampler.pids, warmup)
    print(f"\nsoak: {args.minutes} min of mixed load at {RATE} units/s on cs serve (production mode: "
          f"{DAEMON['CS_WEB_PROCESSES']} API processes, {DAEMON['CS_WORKER_PROCESSES']} x "
          f"{DAEMON['CS_WORKER_THREADS']} job threads); load average now {os.getloadavg()[0]:.2f} on {h.CPUS} CPUs")
    print(show(sampler.rows, memory))
    print(f"  RSS trend after the {warmup:g}-minute warm-up, MB an hour: "
          + ", ".join(f"{role} {mb_h:+.1f}" for role, mb_h in slopes(sampler.rows, memory, warmup).items()))
    print("verdict: " + ("ok (no memory growth beyond the warm-up, no growing backlog)" if not problems
                         else "NOT ok: " + "; ".join(problems)))
    return 1 if problems and args.strict else 0


if __name__ == "__main__":
    sys.exit(h.main("soak", __doc__, OPTIONS, run))
