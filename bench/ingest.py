"""Ingest throughput: events/s through POST /api/track against raw psycopg (the baseline below).

The two sides take turns segment by segment over a seeded corpus, first pass then replay
(100% duplicates); CPU by process family from /proc; dead tuples from pg_stat_user_tables,
read after the backends published them (the gunicorn workers' pooled connections only after
10 s idle). With autovacuum off, AutoAnalyzer stands in for its ANALYZE."""

from __future__ import annotations

import bisect
import http.client
import json
import math
import multiprocessing as mp
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from itertools import accumulate
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import psycopg
import requests
from psycopg import errors as pg_errors

import harness as h

PLAN = "scale"
BASELINE_PROCESSES = 2
RATIO_GOAL = 0.6
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
--statements 200       batches of the corpus run in process first, on a tenant of their own, to count
                       the SQL statements a batch of each side (0: skip)
--skip-baseline        measure the service only
--skip-service         measure the baseline only
--strict               exit 1 when a goal is missed
"""

# --- the corpus -----------------------------------------------------------------------

PATHS = ["/dashboard", "/reports", "/settings", "/projects", "/projects/board", "/inbox",
         "/billing", "/integrations", "/team", "/search", "/docs/getting-started", "/analytics"]
FEATURES = ["export_csv", "bulk_edit", "filters", "automation", "api_access", "templates",
            "calendar_view", "comments", "tags", "dark_mode", "sso", "audit_log"]
BUTTONS = ["save", "cancel", "share", "new_project", "upgrade", "invite", "download", "archive"]
REFERRERS = ["direct", "google", "newsletter", "in_app", ""]
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

# the properties of each event name, drawn in this order (c: choice, r: randrange, p: random, u: user number)
PROPS = {
    "page_viewed": lambda c, r, p, u: {"path": c(PATHS), "referrer": c(REFERRERS), "duration_ms": r(200, 90_000)},
    "feature_used": lambda c, r, p, u: {"feature": c(FEATURES), "count": r(1, 20)},
    "button_clicked": lambda c, r, p, u: {"button": c(BUTTONS), "path": c(PATHS)},
    "session_started": lambda c, r, p, u: {"device": c(["desktop", "mobile", "tablet"]),
                                           "os": c(["macOS", "Windows", "iOS", "Android", "Linux"]),
                                           "app_version": f"4.{r(0, 12)}.{r(0, 9)}"},
    "search_performed": lambda c, r, p, u: {"query_length": r(1, 40), "results": r(0, 250)},
    "comment_added": lambda c, r, p, u: {"length": r(3, 600), "thread_id": f"th_{r(1, 50_000)}"},
    "report_created": lambda c, r, p, u: {"report_type": c(REPORTS), "rows": r(10, 20_000)},
    "file_uploaded": lambda c, r, p, u: {"size_kb": r(1, 25_000), "mime": c(MIMES)},
    "dashboard_shared": lambda c, r, p, u: {"recipients": r(1, 12), "public": p() < 0.1},
    "project_created": lambda c, r, p, u: {"template": c(["blank", "kanban", "roadmap", "sprint"]),
                                           "private": p() < 0.3},
    "$identify": lambda c, r, p, u: {"name": f"User {u}", "email": f"user{u}@company{u % 1500}.example",
                                     "company": f"Company {u % 1500}", "role": c(ROLES), "team_size": c(TEAM_SIZES)},
    "invited_teammate": lambda c, r, p, u: {"invitee_role": c(["editor", "viewer", "admin"])},
    "$locale": lambda c, r, p, u: {"locale": c(LOCALES)},
    "seat_added": lambda c, r, p, u: {"seats": r(1, 6)},
    "plan_upgraded": lambda c, r, p, u: {"from_plan": "starter", "to_plan": c(["growth", "scale"])},
}


def _props(rng: random.Random, name: str, user_no: int) -> dict:
    return PROPS[name](rng.choice, rng.randrange, rng.random, user_no)


@dataclass
class Corpus:
    """Column lists of all events; batch b is [b * size, (b + 1) * size)."""

    size: int
    users: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    props: list[str] = field(default_factory=list)     # JSON text
    ts: list[str] = field(default_factory=list)        # ISO 8601, UTC
    keys: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # POST /api/track body, a batch
    columns: list[tuple] = field(default_factory=list)  # baseline arguments, a batch
    duplicates: int = 0
    duplicates_in_batch: int = 0

    def batch_events(self, b: int) -> int:
        return len(self.columns[b][0])


def make_corpus(n_events: int, n_users: int, batch: int, dup_rate: float, seed: int,
                anchor: datetime, user_prefix: str = "user") -> Corpus:
    rng = random.Random(seed)
    user_ids = [f"{user_prefix}-{i:05d}" for i in range(n_users)]
    # skewed activity: a few heavy users, a long tail of light ones
    cum_w = list(accumulate(rng.lognormvariate(0.0, 1.0) for _ in range(n_users)))
    names, cum_e = h.names(EVENT_MIX), list(accumulate(h.weights(EVENT_MIX)))
    span = timedelta(days=30).total_seconds()
    start = anchor.timestamp() - span
    window = 400 * batch  # a retry repeats an event of the last ~400 batches
    c, items = Corpus(batch), []  # items: one event's JSON each, as in the request body
    for batch_start in range(0, n_events, batch):
        k = rng.randint(3, 15)  # distinct users of this batch
        batch_users = [bisect.bisect_left(cum_w, rng.random() * cum_w[-1]) for _ in range(k)]
        for i in range(batch_start, min(n_events, batch_start + batch)):
            if i > 0 and rng.random() < dup_rate:
                j = rng.randrange(max(0, i - window), i)
                c.duplicates += 1
                if j >= batch_start:
                    c.duplicates_in_batch += 1
                c.users.append(c.users[j]); c.names.append(c.names[j]); c.props.append(c.props[j])
                c.ts.append(c.ts[j]); c.keys.append(c.keys[j]); items.append(items[j])
            else:
                u = batch_users[rng.randrange(k)]
                name = names[min(len(names) - 1, bisect.bisect_left(cum_e, rng.random() * cum_e[-1]))]
                props = json.dumps(_props(rng, name, u), separators=(",", ":"))
                at = start + span * i / n_events - rng.random() * 600.0
                ts = datetime.fromtimestamp(max(start, at), tz=timezone.utc).isoformat(timespec="milliseconds")
                key = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                uid = user_ids[u]
                c.users.append(uid); c.names.append(name); c.props.append(props)
                c.ts.append(ts); c.keys.append(key)
                items.append(f'{{"user_id":"{uid}","event":"{name}","properties":{props},'
                             f'"timestamp":"{ts}","idempotency_key":"{key}"}}')
    for b in range(0, n_events, batch):
        e = min(n_events, b + batch)
        c.bodies.append(('{"events":[' + ",".join(items[b:e]) + "]}").encode())
        c.columns.append((c.users[b:e], c.names[b:e], c.props[b:e], c.ts[b:e], c.keys[b:e]))
    return c


# --- the baseline: raw psycopg, one transaction a batch: the events from arrays (duplicate keys
# dropped, key order so that a retry racing its original cannot deadlock), then one upsert of
# the users' customers rows (sorted); no HTTP, authentication, validation or scoring

EVENTS_SQL = """
INSERT INTO events (id, tenant_id, user_id, event, properties, "timestamp", received_at, source, test, idempotency_key)
SELECT x.id, %(tenant)s, x.user_id, x.event, x.properties::json, x.ts, %(now)s, 'api', false, x.key
FROM unnest(%(ids)s::text[], %(users)s::text[], %(events)s::text[], %(props)s::text[], %(ts)s::timestamptz[],
            %(keys)s::text[]) AS x(id, user_id, event, properties, ts, key)
ORDER BY x.key ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING user_id, "timestamp"
"""
CUSTOMERS_SQL = """
INSERT INTO customers (tenant_id, id, traits, state, lifecycle_stage, health, activation_score, engagement_score,
                       expansion_score, risk_level, last_activity_at, created_at, updated_at, test)
SELECT %(tenant)s, x.id, '{}', '{}', 'new', 0, 0, 0, 0, 'low', x.last, %(now)s, %(now)s, false
FROM unnest(%(ids)s::text[], %(last)s::timestamptz[]) AS x(id, last)
ON CONFLICT (tenant_id, id) DO UPDATE SET
    last_activity_at = GREATEST(customers.last_activity_at, EXCLUDED.last_activity_at), updated_at = EXCLUDED.updated_at
"""


def write_batch(conn: psycopg.Connection, tenant_id: str, users: list[str], events: list[str],
                props: list[str], ts: list[str], keys: list[str]) -> tuple[int, int]:
    now = datetime.now(timezone.utc)
    with conn.cursor() as cur:
        cur.execute(EVENTS_SQL, {"tenant": tenant_id, "now": now, "ids": [str(uuid.uuid4()) for _ in users],
                                 "users": users, "events": events, "props": props, "ts": ts, "keys": keys})
        rows, last = cur.fetchall(), {}
        for user, at in rows:
            if user not in last or at > last[user]:
                last[user] = at
        if last:
            ids = sorted(last)
            cur.execute(CUSTOMERS_SQL, {"tenant": tenant_id, "now": now, "ids": ids, "last": [last[u] for u in ids]})
    conn.commit()
    return len(rows), len(last)


def write_batch_retrying(conn: psycopg.Connection, tenant_id: str, batch, attempts: int = 3) -> tuple[int, int, int]:
    for attempt in range(attempts):
        try:
            return *write_batch(conn, tenant_id, *batch), attempt
        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
            conn.rollback()
            if attempt + 1 == attempts:
                raise


# --- passes: client processes -------------------------------------------------------------

@dataclass
class Tally:
    """What a pass did: a client process's, then summed over processes and segments."""

    label: str = ""
    planned: int = 0
    batches: int = 0
    events: int = 0
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
    retried: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    done_ids: list = field(default_factory=list)
    analyzed: Counter = field(default_factory=Counter)  # ANALYZE runs of AutoAnalyzer
    load: tuple = ()           # load average before and after
    fatal: str | None = None
    analyze_error: str | None = None

    def add(self, other: Tally) -> Tally:
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, max(a, b) if f.name == "end" else ((a[0], max(a[1], b[1])) if a else b)
                    if f.name == "load" else (a or b) if f.name in ("label", "fatal", "analyze_error") else a + b)
        return self

    @property
    def eps(self) -> float:
        return self.events / self.wall if self.wall > 0 else float("nan")

    @property
    def cpu_ours(self) -> float:
        return self.cpu_clients + self.cpu_server + self.cpu_backends

    def pct(self, p: float) -> float:
        return h.percentile(self.latencies, p) * 1000 if self.latencies else float("nan")


def _service_worker(job: dict, batch_ids: list[int], deadline: float, start, res: Tally) -> None:
    corpus, headers, perf = job["corpus"], job["headers"], time.perf_counter
    start.wait()
    c0 = time.process_time()
    for b in batch_ids:
        if time.monotonic() > deadline:
            break
        res.cpu_clients = time.process_time() - c0
        for attempt in range(4):
            t0 = perf()
            conn = http.client.HTTPConnection(h.HOST, job["port"], timeout=60)
            try:
                conn.request("POST", "/api/track", body=corpus.bodies[b], headers=headers[b % len(headers)])
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
            except OSError as exc:
                status, data = 0, str(exc).encode()
            finally:
                conn.close()
            t1 = perf()
            if status == 200 or not (status == 429 or status >= 500 or status == 0):
                break
            res.retries += 1
            res.retried += [f"batch {b}: HTTP {status}: {data[:200]!r}"] * (len(res.retried) < 5)
            time.sleep(0.1 * (attempt + 1))
        res.latencies.append(t1 - t0)
        res.batches, res.events = res.batches + 1, res.events + corpus.batch_events(b)
        res.done_ids.append(b)
        if status != 200:
            res.failed += 1
            res.errors.append(f"batch {b}: HTTP {status}: {data[:300]!r}")
            if status not in (429, 0) and status < 500 or res.failed > 50:
                res.fatal = res.errors[-1]
                return
            continue
        out = json.loads(data)
        res.accepted, res.duplicates = res.accepted + out["accepted"], res.duplicates + out["duplicates"]
        res.over_limit += out["over_limit"]
    res.cpu_clients = time.process_time() - c0


def _baseline_worker(job: dict, batch_ids: list[int], deadline: float, start, res: Tally) -> None:
    corpus, perf = job["corpus"], time.perf_counter
    with psycopg.connect(job["conninfo"], connect_timeout=5) as conn:
        conn.execute("SELECT 1")
        conn.commit()
        backend = [conn.info.backend_pid]
        start.wait()
        c0, b0 = time.process_time(), h.cpu_seconds(backend)
        for b in batch_ids:
            if time.monotonic() > deadline:
                break
            t0 = perf()
            inserted, users, retries = write_batch_retrying(conn, job["tenant_id"], corpus.columns[b])
            res.latencies.append(perf() - t0)
            n = corpus.batch_events(b)
            res.batches, res.events = res.batches + 1, res.events + n
            res.accepted, res.duplicates = res.accepted + inserted, res.duplicates + n - inserted
            res.done_ids.append(b)
            res.users, res.retries = res.users + users, res.retries + retries
        res.end = time.monotonic()
        res.cpu_clients, res.cpu_backends = time.process_time() - c0, h.cpu_seconds(backend) - b0
        conn.execute("SELECT pg_stat_force_next_flush()")   # publish this backend's statistics now
        conn.commit()


def _child_main(fn, job, idx, batch_ids, deadline, ready, start, queue) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    res = Tally(planned=len(batch_ids))
    try:
        ready.put(idx)
        fn(job, batch_ids, deadline, start, res)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        res.fatal = f"{type(exc).__name__}: {exc}"
    res.end = res.end or time.monotonic()
    queue.put((idx, res))


class AutoAnalyzer(threading.Thread):
    """Autovacuum's ANALYZE where the server runs without autovacuum: at the start of a segment
    and every 2 s, ANALYZE a table whose n_mod_since_analyze passed 50 + 10% of its rows (the
    defaults). No VACUUM. The check at the start matters: a segment lasts about 2 s, and a
    service whose plans run without statistics would measure how many ANALYZEs luck gave it."""

    def __init__(self, conninfo: str):
        super().__init__(daemon=True)
        self.conninfo, self.stopping, self.runs, self.error = conninfo, threading.Event(), Counter(), None

    def run(self) -> None:
        try:
            with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5, application_name=BENCH_APP) as conn:
                self.once(conn)
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


CHILDREN: list = []  # multiprocessing.Process of the current pass


def stop_children() -> None:
    for p in CHILDREN:
        p.terminate()
    for p in CHILDREN:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    CHILDREN.clear()


def run_pass(label: str, sy, lists: list[list[int]], timeout: float, analyze: bool = False) -> Tally:
    """One forked process a list, started together; wall time from the start to the last end."""
    load_before = os.getloadavg()[0]
    meter = h.CpuMeter(sy.families, every=0.5) if sy.families else None
    mp_ctx = mp.get_context("fork")
    ready, queue, start = mp_ctx.Queue(), mp_ctx.Queue(), mp_ctx.Event()
    deadline = time.monotonic() + timeout
    CHILDREN[:] = [mp_ctx.Process(target=_child_main, args=(sy.fn, sy.job, i, lst, deadline, ready, start, queue),
                                  daemon=True) for i, lst in enumerate(lists)]
    for p in CHILDREN:
        p.start()
    for _ in lists:
        ready.get(timeout=60)
    time.sleep(0.2)  # let the baseline workers connect before the clock starts
    probe, t0 = h.LoadProbe(), time.monotonic()
    start.set()
    analyzer = AutoAnalyzer(sy.conninfo) if analyze else None
    if analyzer:
        analyzer.start()
    results: dict[int, Tally] = {}
    try:
        while len(results) < len(lists):
            try:
                idx, res = queue.get(timeout=timeout + 120)
            except Exception:
                raise h.BenchError(f"{label}: client processes did not report within {timeout + 120:.0f} s") from None
            results[idx] = res
    finally:
        if analyzer:
            analyzer.stopping.set()
            analyzer.join(timeout=60)
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


def run_interleaved(systems: list, label: str, batches: dict[str, list[int]], rounds: int, timeout: float,
                    autoanalyze: bool) -> dict[str, Tally]:
    """Each system's batches in `rounds` segments, the systems taking turns (h.interleave), a
    CHECKPOINT before each so that none pays for another's dirty pages."""
    out = {sy.name: Tally(label=f"{sy.name} {label}") for sy in systems}
    for r, sy in h.interleave(rounds, systems):
        ids = batches[sy.name][len(batches[sy.name]) * r // rounds: len(batches[sy.name]) * (r + 1) // rounds]
        if not ids or out[sy.name].wall >= timeout:
            continue
        with psycopg.connect(sy.conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CHECKPOINT")
        res = run_pass(f"{sy.name} {label}", sy, [ids[i::sy.workers] for i in range(sy.workers)],
                       timeout - out[sy.name].wall, autoanalyze)
        out[sy.name].add(res)
        h.say(f"{res.label} round {r + 1}/{rounds}: {res.events:,} events in {res.wall:.1f} s, "
              f"{res.eps:,.0f} ev/s (load {res.load[1]:.1f})")
    for sy in systems:
        out[sy.name].planned, out[sy.name].done_ids = len(batches[sy.name]), sorted(out[sy.name].done_ids)
    return out


# --- table statistics ------------------------------------------------------------------------

STAT_COLS = ("n_live_tup", "n_dead_tup", "n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "analyze_count",
             "autoanalyze_count")


def read_stats(conninfo: str) -> dict[str, dict[str, int]]:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(f"SELECT relname, {', '.join(STAT_COLS)} FROM pg_stat_user_tables "
                            "WHERE schemaname = 'public' AND relname = ANY(%s)", [list(TABLES)]).fetchall()
    return {r[0]: dict(zip(STAT_COLS, r[1:])) for r in rows}


def catch_up(conninfo: str, autoanalyze: bool, stats: dict) -> dict:
    """After pass 1, the ANALYZE autovacuum would run soon (so that none runs in the replay)."""
    if not autoanalyze:
        return stats
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        if ran := AutoAnalyzer(conninfo).once(conn):
            h.say(f"catch-up ANALYZE before the replay: {dict(ran)}")
    return read_stats(conninfo)


def _dead_pct(dead: int, live: int) -> float:
    return 100.0 * dead / live if live else float("nan")


def replay_dead(ph) -> dict[str, tuple[int, int, float]]:
    """Per table: dead tuples the replay caused, live tuples, their share."""
    out = {}
    for t in TABLES:
        dead = ph.s2.get(t, {}).get("n_dead_tup", 0) - ph.s1r.get(t, {}).get("n_dead_tup", 0)
        live = ph.s2.get(t, {}).get("n_live_tup", 0)
        out[t] = (dead, live, _dead_pct(dead, live))
    return out


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def print_pass(p: Tally, pad: str = " " * 25) -> None:
    print(f"  {p.label:<22} {p.events:>10,} ev {p.batches:>7,} req {p.wall:>8.1f} s {p.eps:>9,.0f} ev/s"
          f"   batch p50 {p.pct(50):6.1f} ms p95 {p.pct(95):6.1f} ms")
    print(f"{pad}accepted={p.accepted:,} duplicates={p.duplicates:,} over_limit={p.over_limit:,}"
          + f" users-upserted={p.users:,}" * bool(p.users) + f" retries={p.retries} failed={p.failed}"
          + (f"  (STOPPED AT TIME LIMIT after {p.batches:,} of {p.planned:,} batches)" * (p.batches != p.planned)))
    per = 1000.0 / max(1, p.batches)
    cpu = [f"clients {p.cpu_clients:.1f}"] + [f"gunicorn workers {p.cpu_server:.1f}"] * bool(p.cpu_server)
    share = [f"{p.cpu_server * per:.1f} ms app"] * bool(p.cpu_server) + [f"{p.cpu_backends * per:.1f} ms PG"]
    print(f"{pad}CPU s: {', '.join(cpu)}, PG backends {p.cpu_backends:.1f} (= {', '.join(share)} a batch); "
          f"load avg {p.load[0]:.2f} -> {p.load[1]:.2f}")
    print(f"{pad}machine: {p.cpu_machine:.1f} CPU s busy of {h.CPUS * p.wall:.1f} available; ours {p.cpu_ours:.1f} "
          f"({p.cpu_ours * per:.1f} ms a batch), everything else {max(0.0, p.cpu_machine - p.cpu_ours):.1f}")
    if p.analyzed or p.analyze_error:
        print(f"{pad}ANALYZE runs (autoanalyze stand-in): {dict(sorted(p.analyzed.items())) or 'none'}"
              + (f"; error: {p.analyze_error}" if p.analyze_error else ""))
    for e in [f"error: {e}" for e in p.errors[:5]] + [f"retried: {e}" for e in p.retried[:5]]:
        print(f"{pad}{e}")


def print_stats(ph) -> None:
    print(f"  pg_stat_user_tables ({ph.name}):")
    rows, passes = [], (("pass 1", ph.s0, ph.s1), ("replay", ph.s1r, ph.s2))
    for t in TABLES:
        for tag, before, after in passes:
            a, b = after.get(t, {}), before.get(t, {})
            rows.append([t, tag, a.get("n_live_tup", 0), a.get("n_dead_tup", 0),
                         f"{_dead_pct(a.get('n_dead_tup', 0), a.get('n_live_tup', 0)):.2f}%",
                         *(a.get(k, 0) - b.get(k, 0) for k in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del",
                                                               "n_dead_tup"))])
    print(h.table(rows, ["table", "after", "n_live", "n_dead", "dead %", "+ins", "+upd", "+hot", "+del", "+dead"],
                  "<<>>>>>>>>", "    "))
    if ran := [tag for tag, before, after in passes for t in TABLES if after.get(t, {}).get("analyze_count", 0)
               + after.get(t, {}).get("autoanalyze_count", 0) > before.get(t, {}).get("analyze_count", 0)
               + before.get(t, {}).get("autoanalyze_count", 0)]:
        print(f"    note: ANALYZE ran during {', '.join(dict.fromkeys(ran))}: it resets n_dead_tup (+upd, +del count)")


# --- main -------------------------------------------------------------------------------

def tenants(bench: h.Bench, db: str, keys: int):
    """The measured tenant with `keys` ingest keys, and the warm-up tenant."""
    made = bench.tenant(db, PLAN, unlimited=True, keys=keys, role="editor", permissions=["ingest"])
    made.warm = bench.tenant(db, PLAN, name="Warmup", unlimited=True, rt=made.rt)
    return made


def warm_up(sy, corpus: Corpus, tenant) -> None:
    job = dict(sy.job, corpus=corpus, tenant_id=tenant.id, headers=[headers(tenant.key)])
    n = len(corpus.bodies)
    p = run_pass(f"{sy.name} warm-up", SimpleNamespace(**{**vars(sy), "job": job}),
                 [list(range(i, n, sy.workers)) for i in range(sy.workers)], 120)
    h.say(f"{p.label}: {p.batches} batches, {p.eps:,.0f} ev/s, accepted={p.accepted} duplicates={p.duplicates} "
          f"retries={p.retries} failed={p.failed}" + "".join(f"\n  error: {e}" for e in p.errors[:5]))


def run(bench: h.Bench, args) -> int:
    from cs_daemon.db import dispose_engines
    from cs_daemon.plans import plan

    t_start = time.monotonic()
    bench.cleanups.append(stop_children)
    anchor = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    corpus = make_corpus(args.events, args.users, args.batch, args.dup_rate, args.seed, anchor)
    warm = make_corpus(40 * args.batch, 200, args.batch, args.dup_rate, args.seed + 1, anchor, "warm")
    v = SimpleNamespace(corpus=corpus, unique_keys=len(set(corpus.keys)), distinct_users=len(set(corpus.users)),
                        t_start=t_start, n=len(corpus.users), batches=len(corpus.bodies))
    v.repeats = (f"{corpus.duplicates:,} repeated keys ({100.0 * corpus.duplicates / v.n:.1f}%, "
                 f"{corpus.duplicates_in_batch:,} within their batch)")
    h.say(f"corpus: {v.n:,} events, {v.batches:,} batches, {v.distinct_users:,} users, {v.unique_keys:,} unique keys, "
          f"{v.repeats}; built in {time.monotonic() - t_start:.1f} s")
    limit = plan(PLAN).requests_per_minute
    v.keys_needed = max(1, math.ceil(2 * v.batches * 1.05 / (limit * 0.9)))   # never over the limit in total
    with psycopg.connect(h.conninfo(), autocommit=True, connect_timeout=5) as conn:
        pg, v.autovacuum, sync = (conn.execute(f"SHOW {x}").fetchone()[0]
                                  for x in ("server_version", "autovacuum", "synchronous_commit"))
    v.pg = f"PostgreSQL {pg} (autovacuum={v.autovacuum}, synchronous_commit={sync})"
    v.autoanalyze = args.autoanalyze == "on" or (args.autoanalyze == "auto" and v.autovacuum == "off")
    systems, made, srv = [], {}, None
    for name, fn, workers, keys in (("baseline", _baseline_worker, BASELINE_PROCESSES, 1),
                                    ("service", _service_worker, args.clients, v.keys_needed)):
        if not getattr(args, f"skip_{name}"):
            db = bench.database("_base" if name == "baseline" else "")
            made[name] = tenants(bench, db, keys)
            job = {"corpus": corpus, "tenant_id": made[name].id, "conninfo": h.conninfo(db),
                   "headers": [headers(k) for k in made[name].keys]}
            systems.append(SimpleNamespace(name=name, db=db, conninfo=h.conninfo(db), tenant_id=made[name].id, fn=fn,
                                           workers=workers, job=job, families=None))
    v.statements = statements(bench, systems, corpus, args.statements) if args.statements else {}
    dispose_engines()  # no pooled connection may cross the fork of the client processes
    for sy in systems:
        if sy.name == "service":
            srv = bench.gunicorn(sy.db, CS_LOG_LEVEL="WARNING")
            resp = requests.post(srv.url("/api/track"), data=warm.bodies[0], headers=headers(made["service"].warm.key),
                                 timeout=30)
            if resp.status_code != 200 or resp.headers.get("X-RateLimit-Limit") != str(limit):
                raise h.BenchError(f"warm-up request: HTTP {resp.status_code} {resp.text[:300]}, X-RateLimit-Limit "
                                   f"{resp.headers.get('X-RateLimit-Limit')!r} (expected {limit}: production mode, "
                                   f"plan {PLAN})\n{srv.log(30)}")
            sy.job["port"] = srv.port
        warm_up(sy, warm, made[sy.name].warm)
    if srv:
        workers = srv.children()
        backends = psycopg.connect(systems[-1].conninfo, autocommit=True, connect_timeout=5, application_name=BENCH_APP)
        bench.cleanups.append(backends.close)
        systems[-1].families = lambda: {"server": workers,
                                        "backends": [r[0] for r in backends.execute(SERVICE_BACKENDS)]}
    idle = STATS_IDLE_WAIT if srv else 0.5  # the gunicorn workers publish their statistics late
    time.sleep(idle if srv else 0)
    s0 = {sy.name: read_stats(sy.conninfo) for sy in systems}
    p1 = run_interleaved(systems, "pass 1", {sy.name: list(range(v.batches)) for sy in systems}, args.rounds,
                         args.pass_timeout, v.autoanalyze)
    if srv:
        srv.check("pass 1")
    time.sleep(idle)
    s1 = {sy.name: read_stats(sy.conninfo) for sy in systems}
    s1r = {sy.name: catch_up(sy.conninfo, v.autoanalyze, s1[sy.name]) for sy in systems}
    p2 = run_interleaved(systems, "replay", {sy.name: p1[sy.name].done_ids for sy in systems}, args.rounds,
                         args.pass_timeout, v.autoanalyze)
    if srv:
        srv.check("the replay")
    time.sleep(idle)
    phases = {sy.name: SimpleNamespace(
        name=sy.name, p1=p1[sy.name], p2=p2[sy.name], s0=s0[sy.name], s1=s1[sy.name],
        s1r=s1r[sy.name], s2=read_stats(sy.conninfo), rows=counts(sy.conninfo, sy.tenant_id),
        server_errors=srv_errors(srv) if sy.name == "service" else []) for sy in systems}
    return report(args, phases, v)


def statements(bench: h.Bench, systems, corpus: Corpus, n: int) -> dict[str, str]:
    """Per side, in this process on a fresh tenant, first pass and replay of the first n batches:
    psycopg executes a batch, and the service's CPU ms a batch (Flask test client, no HTTP)."""
    from webapp import create_app

    counted, execute, out = [0], psycopg.Cursor.execute, {}

    def counting(cur, *args, **kwargs):
        counted[0] += 1
        return execute(cur, *args, **kwargs)

    psycopg.Cursor.execute = counting
    try:
        for sy in systems:
            made = tenants(bench, sy.db, 1)
            client = create_app(runtime=made.rt).test_client() if sy.name == "service" else None
            conn = psycopg.connect(sy.conninfo, connect_timeout=5) if client is None else None
            figures, batches = [], min(n, len(corpus.bodies))
            for _ in ("pass 1", "replay"):
                counted[0], c0 = 0, time.process_time()
                for b in range(batches):
                    if client:
                        resp = client.post("/api/track", data=corpus.bodies[b], headers=headers(made.key))
                        if resp.status_code != 200:
                            raise h.BenchError(f"statements: HTTP {resp.status_code} {resp.get_data()[:300]!r}")
                    else:
                        write_batch(conn, made.id, *corpus.columns[b])
                figures.append(f"{counted[0] / batches:.2f}" + f" ({1000 * (time.process_time() - c0) / batches:.1f}"
                               " ms CPU)" * bool(client))
            if conn:
                conn.close()
            out[sy.name] = "first pass {}, replay {}".format(*figures)
    finally:
        psycopg.Cursor.execute = execute
    return out


def counts(conninfo: str, tenant_id: str) -> dict[str, int]:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t} WHERE tenant_id = %s", [tenant_id]).fetchone()[0]
                for t in ("events", "customers", "outbox_events")}


def srv_errors(srv: h.Server, limit: int = 3) -> list[str]:
    """The distinct exception lines in the server's log, with their counts."""
    found = Counter(line.strip()[:300] for line in srv.log().splitlines()
                    if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Detected|Failure|Timeout)\b.*", line))
    return [f"{n} x {k}" for k, n in found.most_common(limit)]


def report(args, phases: dict, v: SimpleNamespace) -> int:
    print("\nIngest throughput: POST /api/track (gunicorn) vs raw psycopg baseline")
    print(f"  {v.pg}, {h.CPUS} CPU(s), 127.0.0.1")
    print(f"  corpus: {v.n:,} events, {v.distinct_users:,} users, {v.batches:,} batches of {args.batch}, {v.repeats}, "
          f"{v.unique_keys:,} unique; seed {args.seed}")
    print(f"  service: gunicorn 2 sync workers, {args.clients} client processes (http.client, pre-serialised "
          f"bodies), plan {PLAN}, {v.keys_needed} API key(s) rotated")
    print(f"  baseline: {BASELINE_PROCESSES} processes, raw psycopg, one transaction a batch")
    print("  planner statistics: " + (f"ANALYZE at autovacuum's default thresholds during the passes (the server's "
                                      f"autovacuum is {v.autovacuum}; no VACUUM)" if v.autoanalyze else
                                      f"none run by the bench (server autovacuum={v.autovacuum})") + "\n")
    for name, figures in v.statements.items():
        print(f"  statements a batch ({name}, in process, first {args.statements} batches): {figures}")
    problems = []
    for name, ph in phases.items():
        print_pass(ph.p1)
        print_pass(ph.p2)
        print(f"{' ' * 25}rows of the tenant: " + " ".join(f"{k}={n:,}" for k, n in ph.rows.items()))
        for e in ph.server_errors:
            print(f"{' ' * 25}gunicorn log: {e}")
        print_stats(ph)
        print()
        for what, want in (("events", v.unique_keys), ("customers", v.distinct_users)):
            if ph.p1.batches == ph.p1.planned and ph.rows[what] != want:
                problems.append(f"{name}: {ph.rows[what]:,} {what} stored, {want:,} expected")
        if ph.p2.accepted:
            problems.append(f"{name}: the replay accepted {ph.p2.accepted:,} events (expected 0)")
    for p in problems:
        print(f"  CHECK FAILED: {p}")
    print("Summary")
    missed = bool(problems)
    svc, base = phases.get("service"), phases.get("baseline")
    if svc and base:
        ratio = svc.p1.eps / base.p1.eps
        missed |= ratio < RATIO_GOAL
        print(f"  first pass: service {svc.p1.eps:,.0f} ev/s, baseline {base.p1.eps:,.0f} ev/s, ratio {ratio:.2f} "
              f"(goal >= {RATIO_GOAL}: " + ("met)" if ratio >= RATIO_GOAL else "NOT met)" if ratio >= RATIO_FLOOR
                                           else f"NOT met, below the {RATIO_FLOOR} floor)"))
        print(f"  replay:     service {svc.p2.eps:,.0f} ev/s, baseline {base.p2.eps:,.0f} ev/s, "
              f"ratio {svc.p2.eps / base.p2.eps:.2f}")
        ms = {k: 1000.0 * p.cpu_ours / max(1, p.batches)
              for k, p in (("s1", svc.p1), ("b1", base.p1), ("s2", svc.p2), ("b2", base.p2))}
        print(f"  CPU a batch (clients + server + PostgreSQL backends): first pass service {ms['s1']:.1f} ms, "
              f"baseline {ms['b1']:.1f} ms (CPU-bound ratio {ms['b1'] / ms['s1']:.2f}); replay service "
              f"{ms['s2']:.1f} ms, baseline {ms['b2']:.1f} ms")
    for name, ph in phases.items():
        speed, dead = ph.p2.eps / ph.p1.eps, replay_dead(ph)
        dead_ok = all(pct < 100 * DEAD_GOAL for _, _, pct in dead.values())
        missed |= name == "service" and not (speed >= 1.0 and dead_ok)
        after = ", ".join(f"{t} {_dead_pct(ph.s2[t]['n_dead_tup'], ph.s2[t]['n_live_tup']):.1f}%"
                          for t in TABLES if t in ph.s2)
        print(f"  {name}: replay / first pass = {speed:.2f}x ({'met' if speed >= 1.0 else 'NOT met'}: >= 1.0); "
              f"dead tuples caused by the replay: "
              + "; ".join(f"{t} +{d:,} ({pct:.3f}% of {live:,} rows)" for t, (d, live, pct) in dead.items())
              + f" ({'met' if dead_ok else 'NOT met'}: < 1%); dead/live after the replay, all passes: {after}")
    if incomplete := [ph.p1.label for ph in phases.values() if ph.p1.batches != ph.p1.planned]:
        print(f"  note: {', '.join(incomplete)} stopped at --pass-timeout; figures are over the part done")
    print(f"  total run {time.monotonic() - v.t_start:.1f} s")
    return 1 if args.strict and missed else 0


def check(args) -> str | None:
    if (args.events < args.batch or not 1 <= args.batch <= 100 or not 0 <= args.dup_rate < 1
            or args.clients < 1 or args.rounds < 1):
        return "need --events >= --batch, 1 <= --batch <= 100, 0 <= --dup-rate < 1, --clients >= 1, --rounds >= 1"


if __name__ == "__main__":
    sys.exit(h.main("ingest", __doc__, OPTIONS, run, check))
