"""Ingest throughput: events/s through POST /api/track against a raw psycopg baseline.

    .venv/bin/python bench/ingest.py                    # 1,000,000 events over 10k users
    .venv/bin/python bench/ingest.py --events 100000    # a quick run

  1. generates a deterministic corpus (seeded): N events over 10k users in batches of 50,
     10% of the events repeating an earlier event's idempotency key (a retry, sometimes
     within the same batch), realistic event names and small properties, timestamps over
     the last 30 days; every request body and baseline array is built before any timing;
  2. makes two fresh databases (bench/harness.py), each with a tenant on the "scale" plan
     (no tracked-user limit; enough ingest keys, rotated batch by batch, to stay under
     30,000 requests a minute a key) and a small warm-up tenant; starts gunicorn with 2
     sync workers (production mode, CS_LOG_LEVEL=WARNING) and warms both sides up;
  3. first pass, then a replay of the same batches (100% duplicates), each pass cut into
     --rounds segments that the two sides take in turns:
       service:  --clients processes (http.client, one connection a request as sync
                 gunicorn workers close it) posting the pre-serialised bodies;
       baseline: 2 processes, raw psycopg, one transaction a batch (bench/ingest_baseline.py);
  4. prints per pass throughput, batch latency, CPU seconds (clients, gunicorn workers and
     PostgreSQL backends, from /proc) and the share of the machine other processes took;
     pg_stat_user_tables of events and customers after each pass; and a summary: ratio
     service / baseline (goal >= 0.5, floor 0.3), replay at least as fast as the first
     pass, dead tuples caused by the replay < 1% of the rows. --strict: exit 1 on a miss.

Measuring dead tuples. The counters are PostgreSQL's cumulative statistics, which a
backend publishes at the end of a transaction at most once a second, or after 10 s of
idleness: the baseline processes call pg_stat_force_next_flush() before they exit; the
gunicorn workers' pooled connections cannot be made to, so after each pass the bench
waits 11 s before reading. No VACUUM is run. When the server runs with autovacuum off
(as on this machine), the tables would never get planner statistics, so by default the
bench stands in for autovacuum's ANALYZE during the passes (see AutoAnalyzer;
--autoanalyze off to skip), plus the ANALYZE that would be due right after pass 1,
before the replay's starting figures are read. An ANALYZE resets n_live_tup/n_dead_tup
to its own count, so the exact figures are: +ins/+upd/+del of each pass (never reset)
and the replay's n_dead_tup difference (no ANALYZE or VACUUM runs during a replay that
writes nothing; the bench prints a note if one did). A CHECKPOINT precedes every
segment, so that none pays for another's dirty pages."""

from __future__ import annotations

import bisect
import http.client
import json
import math
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import psycopg
import requests

import harness as h
import ingest_baseline as baseline

PLAN = "scale"
BASELINE_PROCESSES = 2
RATIO_GOAL = 0.5
RATIO_FLOOR = 0.3
DEAD_GOAL = 0.01
STATS_IDLE_WAIT = 11.0  # PGSTAT_IDLE_INTERVAL (10 s) + margin
TABLES = ("events", "customers")
BENCH_APP = "cs-bench"   # application_name of the bench's own connections (not counted)
SERVICE_BACKENDS = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    f"AND backend_type = 'client backend' AND application_name <> '{BENCH_APP}'")

OPTIONS = """
--events 1_000_000     events in the corpus
--users 10_000         distinct users
--batch 50             events a request / transaction
--dup-rate 0.10        share of events repeating an earlier key
--clients 4            client processes driving the service
--seed 20261122        corpus seed
--pass-timeout 600.0   seconds of a system's pass after which it takes no new batches
--rounds 10            segments a pass is cut into, baseline and service taking turns
--autoanalyze auto|on|off  ANALYZE tables during the passes at autovacuum's default thresholds
                       (see AutoAnalyzer); auto = when the server's autovacuum is off
--skip-baseline        measure the service only
--skip-service         measure the baseline only
--py-spy DIR           record the gunicorn workers with py-spy (raw collapsed stacks) during the
                       service's first pass into DIR (py-spy must be installed; it costs CPU)
--strict               exit 1 when a goal is missed
"""

# --- the corpus -----------------------------------------------------------------------

PATHS = ["/dashboard", "/reports", "/settings", "/projects", "/projects/board", "/inbox",
         "/billing", "/integrations", "/team", "/search", "/docs/getting-started", "/analytics"]
FEATURES = ["export_csv", "bulk_edit", "filters", "automation", "api_access", "templates",
            "calendar_view", "comments", "tags", "dark_mode", "sso", "audit_log"]
BUTTONS = ["save", "cancel", "share", "new_project", "upgrade", "invite", "download", "archive"]
REPORTS = ["weekly_summary", "funnel", "retention", "revenue", "usage_by_team", "custom"]
MIMES = ["application/pdf", "image/png", "text/csv", "image/jpeg",
         "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"]
LOCALES = ["en-US", "en-GB", "de-DE", "fr-FR", "es-ES", "pt-BR", "ja-JP", "nl-NL"]
ROLES = ["engineer", "product manager", "designer", "founder", "marketing", "support lead"]
TEAM_SIZES = [1, 2, 3, 5, 8, 12, 25, 40, 80, 150, 400]

# (name, weight): most traffic is page views and feature use; identity, locale and
# expansion signals are rare.
EVENT_MIX = [
    ("page_viewed", 33.0), ("feature_used", 18.0), ("button_clicked", 10.0),
    ("session_started", 9.0), ("search_performed", 6.0), ("comment_added", 5.0),
    ("report_created", 5.0), ("file_uploaded", 3.5), ("dashboard_shared", 2.5),
    ("project_created", 2.7), ("$identify", 2.0), ("invited_teammate", 1.5),
    ("$locale", 0.5), ("seat_added", 0.5), ("plan_upgraded", 0.3),
]


def _props(rng: random.Random, name: str, user_no: int) -> dict:
    c = rng.choice
    r = rng.randrange
    if name == "page_viewed":
        return {"path": c(PATHS), "referrer": c(["direct", "google", "newsletter", "in_app", ""]),
                "duration_ms": r(200, 90_000)}
    if name == "feature_used":
        return {"feature": c(FEATURES), "count": r(1, 20)}
    if name == "button_clicked":
        return {"button": c(BUTTONS), "path": c(PATHS)}
    if name == "session_started":
        return {"device": c(["desktop", "mobile", "tablet"]), "os": c(["macOS", "Windows", "iOS", "Android", "Linux"]),
                "app_version": f"4.{r(0, 12)}.{r(0, 9)}"}
    if name == "search_performed":
        return {"query_length": r(1, 40), "results": r(0, 250)}
    if name == "comment_added":
        return {"length": r(3, 600), "thread_id": f"th_{r(1, 50_000)}"}
    if name == "report_created":
        return {"report_type": c(REPORTS), "rows": r(10, 20_000)}
    if name == "file_uploaded":
        return {"size_kb": r(1, 25_000), "mime": c(MIMES)}
    if name == "dashboard_shared":
        return {"recipients": r(1, 12), "public": rng.random() < 0.1}
    if name == "project_created":
        return {"template": c(["blank", "kanban", "roadmap", "sprint"]), "private": rng.random() < 0.3}
    if name == "$identify":
        company = user_no % 1500
        return {"name": f"User {user_no}", "email": f"user{user_no}@company{company}.example",
                "company": f"Company {company}", "role": c(ROLES), "team_size": c(TEAM_SIZES)}
    if name == "invited_teammate":
        return {"invitee_role": c(["editor", "viewer", "admin"])}
    if name == "$locale":
        return {"locale": c(LOCALES)}
    if name == "seat_added":
        return {"seats": r(1, 6)}
    if name == "plan_upgraded":
        return {"from_plan": "starter", "to_plan": c(["growth", "scale"])}
    return {}


@dataclass
class Corpus:
    """Column lists of all events; batch b is [b * size, (b + 1) * size)."""

    size: int
    users: list[str]
    names: list[str]
    props: list[str]     # JSON text
    ts: list[str]        # ISO 8601, UTC
    keys: list[str]
    bodies: list[bytes] = field(default_factory=list)       # POST /api/track body, a batch
    columns: list[tuple] = field(default_factory=list)      # baseline arguments, a batch
    duplicates: int = 0
    duplicates_in_batch: int = 0

    @property
    def n_events(self) -> int:
        return len(self.users)

    @property
    def n_batches(self) -> int:
        return len(self.bodies)

    def batch_events(self, b: int) -> int:
        return min(self.size, self.n_events - b * self.size)


def make_corpus(n_events: int, n_users: int, batch: int, dup_rate: float, seed: int,
                anchor: datetime, user_prefix: str = "user") -> Corpus:
    rng = random.Random(seed)
    user_ids = [f"{user_prefix}-{i:05d}" for i in range(n_users)]
    # skewed activity: a few heavy users, a long tail of light ones
    weights = [rng.lognormvariate(0.0, 1.0) for _ in range(n_users)]
    cum_w, acc = [], 0.0
    for w in weights:
        acc += w
        cum_w.append(acc)
    names = [n for n, _ in EVENT_MIX]
    cum_e, acc = [], 0.0
    for _, w in EVENT_MIX:
        acc += w
        cum_e.append(acc)
    span = timedelta(days=30).total_seconds()
    start = anchor.timestamp() - span
    window = 400 * batch  # a retry repeats an event of the last ~400 batches

    c = Corpus(batch, [], [], [], [], [])
    items: list[str] = []  # one event's JSON, as in the request body
    total_users, total_e = cum_w[-1], cum_e[-1]
    i = 0
    while i < n_events:
        n = min(batch, n_events - i)
        batch_start = i
        k = rng.randint(3, 15)  # distinct users of this batch
        batch_users = [bisect.bisect_left(cum_w, rng.random() * total_users) for _ in range(k)]
        for _ in range(n):
            if i > 0 and rng.random() < dup_rate:
                j = rng.randrange(max(0, i - window), i)
                c.duplicates += 1
                if j >= batch_start:
                    c.duplicates_in_batch += 1
                c.users.append(c.users[j]); c.names.append(c.names[j]); c.props.append(c.props[j])
                c.ts.append(c.ts[j]); c.keys.append(c.keys[j]); items.append(items[j])
            else:
                u = batch_users[rng.randrange(k)]
                name = names[min(len(names) - 1, bisect.bisect_left(cum_e, rng.random() * total_e))]
                props = json.dumps(_props(rng, name, u), separators=(",", ":"))
                at = start + span * i / n_events - rng.random() * 600.0
                ts = datetime.fromtimestamp(max(start, at), tz=timezone.utc).isoformat(timespec="milliseconds")
                key = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                uid = user_ids[u]
                c.users.append(uid); c.names.append(name); c.props.append(props)
                c.ts.append(ts); c.keys.append(key)
                items.append(f'{{"user_id":"{uid}","event":"{name}","properties":{props},'
                             f'"timestamp":"{ts}","idempotency_key":"{key}"}}')
            i += 1
    for b in range(0, n_events, batch):
        e = min(n_events, b + batch)
        c.bodies.append(('{"events":[' + ",".join(items[b:e]) + "]}").encode())
        c.columns.append((c.users[b:e], c.names[b:e], c.props[b:e], c.ts[b:e], c.keys[b:e]))
    return c



# --- passes: client processes -------------------------------------------------------------


@dataclass
class Tally:
    """What a pass did: a client process's, then summed over processes and segments."""

    label: str = ""
    planned: int = 0
    batches: int = 0       # batches done
    events: int = 0        # events sent / written
    accepted: int = 0
    duplicates: int = 0
    over_limit: int = 0
    users: int = 0
    retries: int = 0
    failed: int = 0
    wall: float = 0.0
    end: float = 0.0
    cpu_clients: float = 0.0   # the client processes' own CPU seconds
    cpu_backends: float = 0.0  # their PostgreSQL backends'
    cpu_server: float = 0.0    # gunicorn workers' (service only)
    cpu_machine: float = 0.0   # all cores' busy seconds during the pass, whoever used them
    errors: list = field(default_factory=list)
    retried: list = field(default_factory=list)  # why, for the first few retries
    latencies: list = field(default_factory=list)
    done_ids: list = field(default_factory=list)
    analyzed: Counter = field(default_factory=Counter)  # ANALYZE runs of AutoAnalyzer
    load: tuple = ()           # 1-minute load average before and after
    fatal: str | None = None
    analyze_error: str | None = None

    def add(self, other: Tally) -> Tally:
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name == "end":
                b = max(a, b)
            elif f.name == "load":
                b = (a[0], max(a[1], b[1])) if a else b
            elif f.name in ("label", "fatal", "analyze_error"):
                b = a or b
            else:
                b = a + b
            setattr(self, f.name, b)
        return self

    @property
    def eps(self) -> float:
        return self.events / self.wall if self.wall > 0 else float("nan")

    @property
    def complete(self) -> bool:
        return self.batches == self.planned

    @property
    def cpu_ours(self) -> float:
        return self.cpu_clients + self.cpu_server + self.cpu_backends

    @property
    def cpu_per_batch_ms(self) -> float:
        return 1000.0 * self.cpu_ours / max(1, self.batches)

    def pct(self, p: float) -> float:
        return h.percentile(self.latencies, p) * 1000 if self.latencies else float("nan")


def _post(port: int, body: bytes, headers: dict) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(h.HOST, port, timeout=60)
    try:
        conn.request("POST", "/api/track", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _service_worker(ctx: dict, batch_ids: list[int], deadline: float, start, res: Tally) -> None:
    corpus, headers, port, perf = ctx["corpus"], ctx["headers"], ctx["port"], time.perf_counter
    start.wait()
    c0 = time.process_time()
    for b in batch_ids:
        if time.monotonic() > deadline:
            break
        res.cpu_clients = time.process_time() - c0
        for attempt in range(4):
            t0 = perf()
            try:
                status, data = _post(port, corpus.bodies[b], headers[b % len(headers)])
            except OSError as exc:
                status, data = 0, str(exc).encode()
            t1 = perf()
            if status == 200 or not (status == 429 or status >= 500 or status == 0):
                break
            res.retries += 1
            if len(res.retried) < 5:
                res.retried.append(f"batch {b}: HTTP {status}: {data[:200]!r}")
            time.sleep(0.1 * (attempt + 1))
        res.latencies.append(t1 - t0)
        res.batches += 1
        res.done_ids.append(b)
        res.events += corpus.batch_events(b)
        if status != 200:
            res.failed += 1
            res.errors.append(f"batch {b}: HTTP {status}: {data[:300]!r}")
            if status not in (429, 0) and status < 500 or res.failed > 50:
                res.fatal = res.errors[-1]
                return
            continue
        out = json.loads(data)
        res.accepted += out["accepted"]
        res.duplicates += out["duplicates"]
        res.over_limit += out["over_limit"]
    res.cpu_clients = time.process_time() - c0


def _baseline_worker(ctx: dict, batch_ids: list[int], deadline: float, start, res: Tally) -> None:
    corpus, tenant, perf = ctx["corpus"], ctx["tenant_id"], time.perf_counter
    with psycopg.connect(ctx["conninfo"], connect_timeout=5) as conn:
        conn.execute("SELECT 1")
        conn.commit()
        backend = [conn.info.backend_pid]
        start.wait()
        c0, b0 = time.process_time(), h.cpu_seconds(backend)
        for b in batch_ids:
            if time.monotonic() > deadline:
                break
            t0 = perf()
            inserted, users, retries = baseline.write_batch_retrying(conn, tenant, corpus.columns[b])
            res.latencies.append(perf() - t0)
            n = corpus.batch_events(b)
            res.batches += 1
            res.done_ids.append(b)
            res.events += n
            res.accepted += inserted
            res.duplicates += n - inserted
            res.users += users
            res.retries += retries
        res.end = time.monotonic()
        res.cpu_clients = time.process_time() - c0
        res.cpu_backends = h.cpu_seconds(backend) - b0
        baseline.force_stats_flush(conn)


def _child_main(fn, ctx, idx, batch_ids, deadline, ready, start, queue) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    res = Tally(planned=len(batch_ids))
    try:
        ready.put(idx)
        fn(ctx, batch_ids, deadline, start, res)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        res.fatal = f"{type(exc).__name__}: {exc}"
    res.end = res.end or time.monotonic()
    queue.put((idx, res))


class AutoAnalyzer(threading.Thread):
    """Stands in for autovacuum's ANALYZE when the server runs without autovacuum (as this
    machine's does), so the tables get planner statistics as on a default installation:
    every 2 s, ANALYZE a table whose n_mod_since_analyze passed 50 + 10% of its rows
    (autovacuum_analyze_threshold / _scale_factor defaults). No VACUUM: dead tuples stay
    as the passes leave them. A thread of the parent, started after the fork."""

    def __init__(self, conninfo: str):
        super().__init__(daemon=True)
        self.conninfo, self.stopping = conninfo, threading.Event()
        self.runs: Counter = Counter()
        self.error: str | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5,
                                 application_name=BENCH_APP) as conn:
                while not self.stopping.wait(2.0):
                    self.once(conn)
        except Exception as exc:  # reported, never fatal
            self.error = f"{type(exc).__name__}: {exc}"

    def once(self, conn) -> Counter:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        for (rel,) in conn.execute(
                "SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
                "WHERE s.schemaname = 'public' AND s.relname = ANY(%s) "
                "AND s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)", [list(TABLES)]).fetchall():
            conn.execute(f'ANALYZE "{rel}"')
            self.runs[rel] += 1
        return self.runs

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)


CHILDREN: list = []  # multiprocessing.Process of the current pass


def stop_children() -> None:
    for p in CHILDREN:
        if p.is_alive():
            p.terminate()
    for p in CHILDREN:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    CHILDREN.clear()


def run_pass(label: str, fn, ctx: dict, lists: list[list[int]], timeout: float, analyze: str | None = None,
             families=None) -> Tally:
    """Fork one process a list, start them together, wait for all; wall time is from the
    common start to the last one's end. `analyze`: the conninfo to run AutoAnalyzer on;
    `families`: the gunicorn workers and PostgreSQL backends whose CPU counts (service)."""
    load_before = os.getloadavg()[0]
    meter = h.CpuMeter(families, every=0.5) if families else None
    mp_ctx = mp.get_context("fork")
    ready, queue, start = mp_ctx.Queue(), mp_ctx.Queue(), mp_ctx.Event()
    deadline = time.monotonic() + timeout
    CHILDREN[:] = [mp_ctx.Process(target=_child_main, daemon=True,
                                  args=(fn, ctx, i, lst, deadline, ready, start, queue)) for i, lst in enumerate(lists)]
    for p in CHILDREN:
        p.start()
    for _ in lists:
        ready.get(timeout=60)
    time.sleep(0.2)  # let the baseline workers connect before the clock starts
    probe = h.LoadProbe()
    t0 = time.monotonic()
    start.set()
    results: dict[int, Tally] = {}
    analyzer = AutoAnalyzer(analyze) if analyze else None
    if analyzer:
        analyzer.start()
    try:
        while len(results) < len(lists):
            try:
                idx, res = queue.get(timeout=timeout + 120)
            except Exception:
                raise h.BenchError(f"{label}: client processes did not report within {timeout + 120:.0f} s") from None
            results[idx] = res
    finally:
        if analyzer:
            analyzer.stop()
    busy = probe.busy_seconds()
    stop_children()
    out = Tally(label=label)
    for i in range(len(lists)):
        out.add(results[i])
    if out.fatal:
        raise h.BenchError(f"{label}: {out.fatal}")
    cpu = meter.stop() if meter else {}
    out.wall, out.cpu_machine, out.load = out.end - t0, busy, (load_before, os.getloadavg()[0])
    out.cpu_server, out.cpu_backends = cpu.get("server", 0.0), cpu.get("backends", out.cpu_backends)
    if analyzer:
        out.analyzed, out.analyze_error = analyzer.runs, analyzer.error
    return out


@dataclass
class System:
    """One side of the comparison: how a batch list is driven, and its database."""

    name: str
    conninfo: str
    tenant_id: str
    fn: object
    workers: int
    ctx: dict
    families: object = None


def run_interleaved(systems: list[System], label: str, batches: dict[str, list[int]], rounds: int,
                    timeout: float, autoanalyze: bool) -> dict[str, Tally]:
    """Each system's batches in `rounds` consecutive segments, the systems taking turns
    segment by segment (harness.interleave), a CHECKPOINT before each, so that none pays
    for the other's dirty pages. A system whose segments used up `timeout` seconds stops."""
    out = {sy.name: Tally(label=f"{sy.name} {label}") for sy in systems}
    for r, sy in h.interleave(rounds, systems):
        ids = batches[sy.name][len(batches[sy.name]) * r // rounds: len(batches[sy.name]) * (r + 1) // rounds]
        left = timeout - out[sy.name].wall
        if not ids or left <= 0:
            continue
        with psycopg.connect(sy.conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CHECKPOINT")
        res = run_pass(f"{sy.name} {label}", sy.fn, sy.ctx, [ids[i::sy.workers] for i in range(sy.workers)], left,
                       sy.conninfo if autoanalyze else None, sy.families)
        out[sy.name].add(res)
        h.say(f"{sy.name} {label} round {r + 1}/{rounds}: {res.events:,} events in {res.wall:.1f} s, "
              f"{res.eps:,.0f} ev/s (load {res.load[1]:.1f})")
    for sy in systems:
        out[sy.name].planned, out[sy.name].done_ids = len(batches[sy.name]), sorted(out[sy.name].done_ids)
    return out


def split(n_batches: int, workers: int) -> list[list[int]]:
    """Round robin, so the workers together follow the corpus order."""
    return [list(range(i, n_batches, workers)) for i in range(workers)]


# --- table statistics ------------------------------------------------------------------------


STAT_COLS = ("n_live_tup", "n_dead_tup", "n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del",
             "vacuum_count", "autovacuum_count", "analyze_count", "autoanalyze_count")


def read_stats(conninfo: str) -> dict[str, dict[str, int]]:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(f"SELECT relname, {', '.join(STAT_COLS)} FROM pg_stat_user_tables "
                            "WHERE schemaname = 'public' AND relname = ANY(%s)", [list(TABLES)]).fetchall()
    return {r[0]: dict(zip(STAT_COLS, r[1:])) for r in rows}


def counts(conninfo: str, tenant_id: str) -> dict[str, int]:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t} WHERE tenant_id = %s", [tenant_id]).fetchone()[0]
                for t in ("events", "customers", "outbox_events")}


def catch_up(conninfo: str, autoanalyze: bool, stats: dict) -> dict:
    """After pass 1: the ANALYZE that autovacuum would run soon (done before the replay, so
    that none runs during it), then the statistics the replay starts from."""
    if not autoanalyze:
        return stats
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        ran = AutoAnalyzer(conninfo).once(conn)
    if ran:
        h.say(f"catch-up ANALYZE before the replay: {dict(ran)}")
    return read_stats(conninfo)


def wait_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


@dataclass
class Phase:
    name: str
    p1: Tally
    p2: Tally
    s0: dict
    s1: dict
    s1r: dict   # the replay's starting point (after a catch-up ANALYZE, if any)
    s2: dict
    rows: dict[str, int]
    server_errors: list[str] = field(default_factory=list)


def _dead_pct(dead: int, live: int) -> float:
    return 100.0 * dead / live if live else float("nan")


def _report_warmup(p: Tally) -> None:
    h.say(f"{p.label}: {p.batches} batches, {p.eps:,.0f} ev/s, accepted={p.accepted} duplicates={p.duplicates} "
          f"retries={p.retries} failed={p.failed}" + "".join(f"\n  error: {e}" for e in p.errors[:5])
          + "".join(f"\n  retried: {e}" for e in p.retried[:5]))


def print_pass(p: Tally) -> None:
    pad = " " * 25
    print(f"  {p.label:<22} {p.events:>10,} ev {p.batches:>7,} req {p.wall:>8.1f} s {p.eps:>9,.0f} ev/s"
          f"   batch p50 {p.pct(50):6.1f} ms p95 {p.pct(95):6.1f} ms")
    print(f"{pad}accepted={p.accepted:,} duplicates={p.duplicates:,} over_limit={p.over_limit:,}"
          + (f" users-upserted={p.users:,}" if p.users else "") + f" retries={p.retries} failed={p.failed}"
          + ("" if p.complete else f"  (STOPPED AT TIME LIMIT after {p.batches:,} of {p.planned:,} batches)"))
    per = 1000.0 / max(1, p.batches)
    cpu = [f"clients {p.cpu_clients:.1f}"] + [f"gunicorn workers {p.cpu_server:.1f}"] * bool(p.cpu_server)
    share = [f"{p.cpu_server * per:.1f} ms app"] * bool(p.cpu_server) + [f"{p.cpu_backends * per:.1f} ms PG"]
    print(f"{pad}CPU s: {', '.join(cpu)}, PG backends {p.cpu_backends:.1f} (= {', '.join(share)} a batch); "
          f"load avg {p.load[0]:.2f} -> {p.load[1]:.2f}")
    if p.cpu_machine:
        print(f"{pad}machine: {p.cpu_machine:.1f} CPU s busy of {h.CPUS * p.wall:.1f} available; ours "
              f"{p.cpu_ours:.1f} ({p.cpu_per_batch_ms:.1f} ms a batch), everything else "
              f"{max(0.0, p.cpu_machine - p.cpu_ours):.1f} (other processes on this machine, Redis, "
              f"PostgreSQL's own background work)")
    if p.analyzed or p.analyze_error:
        print(f"{pad}ANALYZE runs (autoanalyze stand-in): "
              f"{', '.join(f'{k} {v}' for k, v in sorted(p.analyzed.items())) or 'none'}"
              + (f"; error: {p.analyze_error}" if p.analyze_error else ""))
    for e in p.errors[:5]:
        print(f"{pad}error: {e}")
    for e in p.retried[:5]:
        print(f"{pad}retried: {e}")


def print_stats(phase: Phase) -> None:
    print(f"  pg_stat_user_tables ({phase.name}):")
    rows = []
    for t in TABLES:
        for tag, before, after in (("pass 1", phase.s0, phase.s1), ("replay", phase.s1r, phase.s2)):
            a, b = after.get(t, {}), before.get(t, {})
            d = {k: a.get(k, 0) - b.get(k, 0) for k in STAT_COLS}
            rows.append([t, tag, a.get("n_live_tup", 0), a.get("n_dead_tup", 0),
                         f"{_dead_pct(a.get('n_dead_tup', 0), a.get('n_live_tup', 0)):.2f}%",
                         *(d[k] for k in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "n_dead_tup"))])
    print(h.table(rows, ["table", "after", "n_live", "n_dead", "dead %", "+ins", "+upd", "+hot", "+del", "+dead"],
                  "<<>>>>>>>>", "    "))
    vac = {t: sum(phase.s2.get(t, {}).get(k, 0) - phase.s0.get(t, {}).get(k, 0)
                  for k in ("vacuum_count", "autovacuum_count")) for t in TABLES}
    if any(vac.values()):
        print(f"    note: (auto)vacuum ran during the passes ({vac}); n_dead_tup deltas are then lower bounds")
    for tag, before, after in (("pass 1", phase.s0, phase.s1), ("replay", phase.s1r, phase.s2)):
        ran = {t: sum(after.get(t, {}).get(k, 0) - before.get(t, {}).get(k, 0)
                      for k in ("analyze_count", "autoanalyze_count")) for t in TABLES}
        ran = {t: n for t, n in ran.items() if n}
        if ran:
            print(f"    note: ANALYZE ran during {tag} ({ran}): it resets n_live_tup/n_dead_tup to its own "
                  f"count, so that pass's +dead is not the number of tuples it killed (+upd, +del are)")


def replay_dead(phase: Phase) -> dict[str, tuple[int, int, float]]:
    out = {}
    for t in TABLES:
        dead = phase.s2.get(t, {}).get("n_dead_tup", 0) - phase.s1r.get(t, {}).get("n_dead_tup", 0)
        live = phase.s2.get(t, {}).get("n_live_tup", 0)
        out[t] = (dead, live, _dead_pct(dead, live))
    return out


# --- main -------------------------------------------------------------------------------


def tenants(bench: h.Bench, db: str, keys: int):
    """The measured tenant with `keys` ingest keys, and the warm-up tenant."""
    made = bench.tenant(db, PLAN, unlimited=True, keys=keys, role="editor", permissions=["ingest"])
    made.warm = bench.tenant(db, PLAN, name="Warmup", unlimited=True, rt=made.rt)
    return made


def py_spy(bench: h.Bench, out: Path, pids: list[int]) -> list[subprocess.Popen]:
    out.mkdir(parents=True, exist_ok=True)
    spies = [subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--format",
                               "raw", "--rate", "50", "--output", str(out / f"worker-{pid}.txt")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids]
    bench.cleanups.append(lambda: [spy.kill() for spy in spies if spy.poll() is None])
    time.sleep(1.0)
    return spies


def run(bench: h.Bench, args) -> int:
    from cs_daemon.db import dispose_engines
    from cs_daemon.plans import plan

    t_start = time.monotonic()
    bench.cleanups.append(stop_children)
    anchor = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    t = time.monotonic()
    corpus = make_corpus(args.events, args.users, args.batch, args.dup_rate, args.seed, anchor)
    warm = make_corpus(40 * args.batch, 200, args.batch, args.dup_rate, args.seed + 1, anchor, "warm")
    unique_keys, distinct_users = len(set(corpus.keys)), len(set(corpus.users))
    repeats = (f"{corpus.duplicates:,} repeated keys ({100.0 * corpus.duplicates / corpus.n_events:.1f}%, "
               f"{corpus.duplicates_in_batch:,} within their batch)")
    h.say(f"corpus: {corpus.n_events:,} events, {corpus.n_batches:,} batches of {args.batch}, {distinct_users:,} "
          f"users, {unique_keys:,} unique keys, {repeats}, {sum(map(len, corpus.bodies)) / corpus.n_batches / 1024:.1f}"
          f" KiB a body; built in {time.monotonic() - t:.1f} s")
    limit = plan(PLAN).requests_per_minute
    # A key never exceeding the limit in total can never exceed it within a minute.
    keys_needed = max(1, math.ceil(2 * corpus.n_batches * 1.05 / (limit * 0.9)))
    with psycopg.connect(h.conninfo(), autocommit=True, connect_timeout=5) as conn:
        pg_version, autovacuum, sync_commit = (conn.execute(f"SHOW {x}").fetchone()[0]
                                               for x in ("server_version", "autovacuum", "synchronous_commit"))
    autoanalyze = args.autoanalyze == "on" or (args.autoanalyze == "auto" and autovacuum == "off")
    systems: list[System] = []
    srv = spies = None
    if not args.skip_baseline:
        db_b = bench.database("_base")
        tk_b, ci_b = tenants(bench, db_b, 1), h.conninfo(db_b)
        systems.append(System("baseline", ci_b, tk_b.id, _baseline_worker, BASELINE_PROCESSES,
                              {"corpus": corpus, "tenant_id": tk_b.id, "conninfo": ci_b}))
    if not args.skip_service:
        db_s = bench.database()
        tk_s, ci_s = tenants(bench, db_s, keys_needed), h.conninfo(db_s)
    dispose_engines()  # no pooled connection may cross the fork of the client processes
    h.say(f"databases {', '.join(bench.created)}; Redis prefix {bench.prefix}")
    if not args.skip_baseline:
        _report_warmup(run_pass("baseline warm-up", _baseline_worker,
                                {"corpus": warm, "tenant_id": tk_b.warm.id, "conninfo": ci_b},
                                split(warm.n_batches, BASELINE_PROCESSES), 120))
    if not args.skip_service:
        srv = bench.gunicorn(db_s, CS_LOG_LEVEL="WARNING")
        srv.wait_http("/api/health", ok=(200, 503))  # 503: no job worker runs, which is fine here
        warm_headers = [{"Authorization": f"Bearer {tk_s.warm.key}", "Content-Type": "application/json"}]
        # a first request: production mode and plan show in the rate-limit header
        resp = requests.post(srv.url("/api/track"), data=warm.bodies[0], headers=warm_headers[0], timeout=30)
        if resp.status_code != 200:
            raise h.BenchError(f"warm-up request: HTTP {resp.status_code}: {resp.text[:300]}\n{srv.log()[-3000:]}")
        if resp.headers.get("X-RateLimit-Limit") != str(limit):
            raise h.BenchError(f"expected X-RateLimit-Limit {limit} (production mode, plan {PLAN}), got "
                               f"{resp.headers.get('X-RateLimit-Limit')!r}")
        _report_warmup(run_pass("service warm-up", _service_worker,
                                {"corpus": warm, "headers": warm_headers, "port": srv.port},
                                split(warm.n_batches, args.clients), 120))
        workers = srv.children()
        backends = psycopg.connect(ci_s, autocommit=True, connect_timeout=5, application_name=BENCH_APP)
        bench.cleanups.append(backends.close)
        families = lambda: {"server": workers, "backends": [r[0] for r in backends.execute(SERVICE_BACKENDS)]}  # noqa: E731
        headers = [{"Authorization": f"Bearer {k}", "Content-Type": "application/json"} for k in tk_s.keys]
        systems.append(System("service", ci_s, tk_s.id, _service_worker, args.clients,
                              {"corpus": corpus, "headers": headers, "port": srv.port}, families))
        wait_until(time.monotonic() + STATS_IDLE_WAIT)  # the workers' warm-up statistics

    s0 = {sy.name: read_stats(sy.conninfo) for sy in systems}
    if args.py_spy and srv is not None:
        spies = py_spy(bench, Path(args.py_spy), srv.children())
    everything = list(range(corpus.n_batches))
    p1 = run_interleaved(systems, "pass 1", {sy.name: everything for sy in systems}, args.rounds,
                         args.pass_timeout, autoanalyze)
    for spy in spies or []:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
    idle = STATS_IDLE_WAIT if srv is not None else 0.5
    if srv:
        srv.check("pass 1")
    wait_until(time.monotonic() + idle)
    s1 = {sy.name: read_stats(sy.conninfo) for sy in systems}
    s1r = {sy.name: catch_up(sy.conninfo, autoanalyze, s1[sy.name]) for sy in systems}
    p2 = run_interleaved(systems, "replay", {sy.name: p1[sy.name].done_ids for sy in systems}, args.rounds,
                         args.pass_timeout, autoanalyze)
    if srv:
        srv.check("the replay")
    wait_until(time.monotonic() + idle)
    phases = {sy.name: Phase(sy.name, p1[sy.name], p2[sy.name], s0[sy.name], s1[sy.name], s1r[sy.name],
                             read_stats(sy.conninfo), counts(sy.conninfo, sy.tenant_id),
                             srv_errors(srv) if sy.name == "service" else []) for sy in systems}
    return report(args, phases, SimpleNamespace(
        corpus=corpus, pg=f"PostgreSQL {pg_version} (autovacuum={autovacuum}, synchronous_commit={sync_commit})",
        autovacuum=autovacuum, autoanalyze=autoanalyze, repeats=repeats, unique_keys=unique_keys,
        distinct_users=distinct_users, keys_needed=keys_needed, t_start=t_start))


def srv_errors(srv: h.Server, limit: int = 3) -> list[str]:
    """The distinct exception lines of the tracebacks in the server's log, with their counts."""
    import re

    found = Counter(line.strip()[:300] for line in srv.log().splitlines()
                    if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Detected|Failure|Timeout)\b.*", line))
    return [f"{n} x {k}" for k, n in found.most_common(limit)]


def report(args, phases: dict[str, Phase], v: SimpleNamespace) -> int:
    corpus = v.corpus
    print("\nIngest throughput: POST /api/track (gunicorn) vs raw psycopg baseline")
    print(f"  {v.pg}, {h.CPUS} CPU(s), 127.0.0.1")
    print(f"  corpus: {corpus.n_events:,} events, {v.distinct_users:,} users, {corpus.n_batches:,} batches "
          f"of {args.batch}, {v.repeats}, {v.unique_keys:,} unique; seed {args.seed}")
    print(f"  service: gunicorn 2 sync workers, {args.clients} client processes (http.client, "
          f"pre-serialised bodies), plan {PLAN}, {v.keys_needed} API key(s) rotated")
    print(f"  baseline: {BASELINE_PROCESSES} processes, raw psycopg, one transaction a batch")
    print("  planner statistics: " + (
        "ANALYZE at autovacuum's default thresholds during the passes (the server's autovacuum is "
        f"{v.autovacuum}; no VACUUM is run)" if v.autoanalyze else
        f"none run by the bench (server autovacuum={v.autovacuum})") + "\n")
    problems = []
    for name, ph in sorted(phases.items()):
        print_pass(ph.p1)
        print_pass(ph.p2)
        print(f"{' ' * 25}rows of the tenant: events={ph.rows['events']:,} customers={ph.rows['customers']:,}"
              f" outbox_events={ph.rows['outbox_events']:,}")
        for e in ph.server_errors:
            print(f"{' ' * 25}gunicorn log: {e}")
        print_stats(ph)
        print()
        if ph.p1.complete and ph.rows["events"] != v.unique_keys:
            problems.append(f"{name}: {ph.rows['events']:,} events stored, {v.unique_keys:,} expected")
        if ph.p1.complete and ph.rows["customers"] != v.distinct_users:
            problems.append(f"{name}: {ph.rows['customers']:,} customers, {v.distinct_users:,} expected")
        if ph.p2.accepted:
            problems.append(f"{name}: the replay accepted {ph.p2.accepted:,} events (expected 0)")
    for p in problems:
        print(f"  CHECK FAILED: {p}")
    print("Summary")
    missed = bool(problems)
    svc, base = phases.get("service"), phases.get("baseline")
    if svc and base:
        ratio = svc.p1.eps / base.p1.eps
        verdict = ("met" if ratio >= RATIO_GOAL else
                   "NOT met" if ratio >= RATIO_FLOOR else f"NOT met, below the {RATIO_FLOOR} floor")
        missed |= ratio < RATIO_GOAL
        print(f"  first pass: service {svc.p1.eps:,.0f} ev/s, baseline {base.p1.eps:,.0f} ev/s, "
              f"ratio {ratio:.2f} (goal >= {RATIO_GOAL}: {verdict})")
        print(f"  replay:     service {svc.p2.eps:,.0f} ev/s, baseline {base.p2.eps:,.0f} ev/s, "
              f"ratio {svc.p2.eps / base.p2.eps:.2f}")
        print(f"  CPU a batch (clients + server + PostgreSQL backends): first pass service "
              f"{svc.p1.cpu_per_batch_ms:.1f} ms, baseline {base.p1.cpu_per_batch_ms:.1f} ms "
              f"(CPU-bound ratio {base.p1.cpu_per_batch_ms / svc.p1.cpu_per_batch_ms:.2f}); replay service "
              f"{svc.p2.cpu_per_batch_ms:.1f} ms, baseline {base.p2.cpu_per_batch_ms:.1f} ms")
    for name, ph in sorted(phases.items()):
        speed, dead = ph.p2.eps / ph.p1.eps, replay_dead(ph)
        dead_ok = all(pct < 100 * DEAD_GOAL for _, _, pct in dead.values())
        missed |= name == "service" and not (speed >= 1.0 and dead_ok)
        after = ", ".join(f"{t} {_dead_pct(ph.s2[t]['n_dead_tup'], ph.s2[t]['n_live_tup']):.1f}%"
                          for t in TABLES if t in ph.s2)
        print(f"  {name}: replay / first pass = {speed:.2f}x ({'met' if speed >= 1.0 else 'NOT met'}: >= 1.0); "
              f"dead tuples caused by the replay: "
              + "; ".join(f"{t} +{d:,} ({pct:.3f}% of {live:,} rows)" for t, (d, live, pct) in dead.items())
              + f" ({'met' if dead_ok else 'NOT met'}: < 1%); dead/live after the replay, all passes: {after}")
    incomplete = [ph.p1.label for ph in phases.values() if not ph.p1.complete]
    if incomplete:
        print(f"  note: {', '.join(incomplete)} stopped at --pass-timeout; figures are over the part done")
    print(f"  total run {time.monotonic() - v.t_start:.1f} s")
    return 1 if args.strict and missed else 0


def check(args) -> str | None:
    if (args.events < args.batch or not 1 <= args.batch <= 100 or not 0 <= args.dup_rate < 1
            or args.clients < 1 or args.rounds < 1):
        return "need --events >= --batch, 1 <= --batch <= 100, 0 <= --dup-rate < 1, --clients >= 1, --rounds >= 1"


if __name__ == "__main__":
    sys.exit(h.main("ingest", __doc__, OPTIONS, run, check))
