"""Ingest throughput: events/s through POST /api/track against raw psycopg (the baseline below).

The sides take turns segment by segment, first pass then replay (100% duplicates). With
autovacuum off, the bench runs its ANALYZE (analyze() below)."""

from __future__ import annotations

import bisect
import json
import math
import multiprocessing as mp
import os
import queue
import random
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from itertools import accumulate
from types import SimpleNamespace

import psycopg

import harness as h

PLAN = "scale"
BATCH = 50                 # events a request / transaction
DUP_RATE = 0.10            # share of events repeating the key of one of the last ~400 batches
CLIENTS = {"baseline": 2, "service": 4}   # client processes of each side
ROUNDS = 10                # segments a pass is cut into
STATEMENT_BATCHES = 200    # batches run in process first to count the SQL statements a batch
RATIO_GOAL = 0.6
DEAD_GOAL = 0.01
STATS_IDLE_WAIT = 11.0     # the gunicorn workers' backends publish their statistics after 10 s idle
TABLES = ["events", "customers"]
BENCH_APP = "cs-bench"     # application_name of the bench's own connections (not counted)
SERVICE_BACKENDS = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    f"AND backend_type = 'client backend' AND application_name <> '{BENCH_APP}'")

OPTIONS = """
--events 1_000_000  >=50 events in the corpus
--users 10_000      >=1 distinct users
--strict            exit 1 when a goal is missed
"""

# --- the corpus: most traffic page views and feature use; identity, locale and an expansion
# signal (an expansion event of scoring.py, the team size) rare

EVENT_MIX = [("page_viewed", 50.0), ("feature_used", 30.0), ("session_started", 15.0), ("invited_teammate", 2.3),
             ("$identify", 2.0), ("$locale", 0.5)]


def props(rng: random.Random, name: str, user_no: int) -> dict:
    if name == "$identify":
        return {"name": f"User {user_no}", "email": f"user{user_no}@company{user_no % 1500}.example",
                "company": f"Company {user_no % 1500}", "role": rng.choice(h.ROLES),
                "team_size": rng.choice([1, 2, 3, 5, 8, 12, 25, 40, 80, 150, 400])}
    if name == "$locale":
        return {"locale": rng.choice(h.names(h.LOCALES))}
    return {"path": f"/page/{rng.randrange(12)}", "count": rng.randrange(1, 90_000)}


def make_corpus(n_events: int, n_users: int, seed: int, prefix: str = "user") -> SimpleNamespace:
    """Batches of BATCH events over the last 30 days: request bodies and the baseline's columns."""
    rng = random.Random(seed)
    activity = list(accumulate(rng.lognormvariate(0.0, 1.0) for _ in range(n_users)))  # a few heavy users
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0).timestamp()
    names, weights = h.names(EVENT_MIX), h.weights(EVENT_MIX)
    rows, items = [], []   # (user, event, properties, timestamp, key); one event's JSON each
    for i in range(n_events):
        if i % BATCH == 0:
            users = [bisect.bisect_left(activity, rng.random() * activity[-1]) for _ in range(rng.randint(3, 15))]
        if i and rng.random() < DUP_RATE:
            j = rng.randrange(max(0, i - 400 * BATCH), i)
            rows.append(rows[j])
            items.append(items[j])
            continue
        u = rng.choice(users)
        name = rng.choices(names, weights)[0]
        at = datetime.fromtimestamp(end - 30 * 86400 * (1 - i / n_events) - rng.random() * 600, tz=timezone.utc)
        row = (f"{prefix}-{u:05d}", name, json.dumps(props(rng, name, u), separators=(",", ":")),
               at.isoformat(timespec="milliseconds"), str(uuid.UUID(int=rng.getrandbits(128), version=4)))
        rows.append(row)
        items.append('{"user_id":"%s","event":"%s","properties":%s,"timestamp":"%s","idempotency_key":"%s"}' % row)
    starts = range(0, n_events, BATCH)
    return SimpleNamespace(
        bodies=[('{"events":[' + ",".join(items[b:b + BATCH]) + "]}").encode() for b in starts],
        columns=[[list(c) for c in zip(*rows[b:b + BATCH])] for b in starts],
        events=n_events, users=len({r[0] for r in rows}), keys=len({r[4] for r in rows}))


# --- the baseline: raw psycopg, one transaction a batch: the events from arrays (duplicate keys
# dropped, in key order so that two batches cannot deadlock), then one upsert of the users'
# customers rows (sorted); no HTTP, authentication, validation or scoring

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
                props: list[str], ts: list[str], keys: list[str]) -> int:
    now = datetime.now(timezone.utc)
    with conn.cursor() as cur:
        cur.execute(EVENTS_SQL, {"tenant": tenant_id, "now": now, "ids": [str(uuid.uuid4()) for _ in users],
                                 "users": users, "events": events, "props": props, "ts": ts, "keys": keys})
        rows, last = cur.fetchall(), {}
        for user, at in rows:
            last[user] = max(at, last.get(user, at))
        if last:
            ids = sorted(last)
            cur.execute(CUSTOMERS_SQL, {"tenant": tenant_id, "now": now, "ids": ids, "last": [last[u] for u in ids]})
    conn.commit()
    return len(rows)


# --- passes: client processes ---------------------------------------------------------------

@dataclass
class Tally:
    """What a client process did, then summed over processes and segments."""

    batches: int = 0
    events: int = 0
    accepted: int = 0
    wall: float = 0.0
    end: float = 0.0
    cpu_clients: float = 0.0   # the client processes' own CPU seconds
    cpu_server: float = 0.0    # the gunicorn workers' (service)
    cpu_backends: float = 0.0  # their PostgreSQL backends'
    latencies: list = field(default_factory=list)
    fatal: str | None = None

    def add(self, other: Tally) -> Tally:
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, max(a, b) if f.name == "end" else (a or b) if f.name == "fatal" else a + b)
        return self

    def count(self, events: int, accepted: int, t0: float) -> None:
        self.latencies.append(time.perf_counter() - t0)
        self.batches, self.events, self.accepted = self.batches + 1, self.events + events, self.accepted + accepted

    @property
    def eps(self) -> float:
        return self.events / self.wall

    @property
    def cpu(self) -> float:
        return self.cpu_clients + self.cpu_server + self.cpu_backends

    def ms(self, seconds: float) -> float:
        """CPU ms a batch."""
        return 1000.0 * seconds / self.batches


def request_bytes(port: int, body: bytes, headers: dict[str, str]) -> bytes:
    """One POST /api/track as the bytes a sender writes (Content-Length, no chunks)."""
    head = ["POST /api/track HTTP/1.1", f"Host: {h.HOST}:{port}", f"Content-Length: {len(body)}",
            *(f"{k}: {v}" for k, v in headers.items()), "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def answer(raw: bytes) -> tuple[int, bytes]:
    """The status and the body of a whole HTTP/1.1 response (read to the server's close)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or len(head) < 12:
        raise h.BenchError(f"not an HTTP response: {raw[:120]!r}")
    return int(head[9:12]), body


def service_client(job: dict, batch_ids: list[int], start, res: Tally) -> None:
    """A lean sender: each batch's request made before the clock starts and written on a new
    connection (the sync workers close each one), the answer read to the server's close.
    The senders stand for the tenants' machines but share the service's CPUs here, so they
    should take as little of them as they can: http.client took about 0.3 ms a batch more
    (bench/README.md)."""
    corpus, keys = job["corpus"], job["headers"]
    requests = {b: request_bytes(job["port"], corpus.bodies[b], keys[b % len(keys)]) for b in batch_ids}
    address = (h.HOST, job["port"])
    start.wait()
    c0 = time.process_time()
    for b in batch_ids:
        t0 = time.perf_counter()
        with socket.create_connection(address, timeout=60) as conn:
            conn.sendall(requests[b])
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        status, data = answer(b"".join(chunks))
        if status != 200:
            raise h.BenchError(f"batch {b}: HTTP {status}: {data[:300]!r}")
        res.count(len(corpus.columns[b][0]), json.loads(data)["accepted"], t0)
    res.cpu_clients = time.process_time() - c0


def baseline_client(job: dict, batch_ids: list[int], start, res: Tally) -> None:
    columns = job["corpus"].columns
    with psycopg.connect(job["conninfo"], connect_timeout=5) as conn:
        backend = [conn.info.backend_pid]
        start.wait()
        c0, b0 = time.process_time(), h.cpu_seconds(backend)
        for b in batch_ids:
            t0 = time.perf_counter()
            res.count(len(columns[b][0]), write_batch(conn, job["tenant_id"], *columns[b]), t0)
        res.end = time.monotonic()
        res.cpu_clients, res.cpu_backends = time.process_time() - c0, h.cpu_seconds(backend) - b0
        conn.execute("SELECT pg_stat_force_next_flush()")   # publish this backend's statistics now
        conn.commit()


def child_main(client, job, batch_ids, ready, start, results) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    res = Tally()
    try:
        ready.put(None)
        client(job, batch_ids, start, res)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        res.fatal = f"{type(exc).__name__}: {exc}"
    res.end = res.end or time.monotonic()
    results.put(res)


CHILDREN: list = []  # multiprocessing.Process of the current segment


def stop_children() -> None:
    for p in CHILDREN:
        p.kill()
        p.join(timeout=5)
    CHILDREN.clear()


def analyze(conninfo: str, stopping: threading.Event | None = None) -> None:
    """Autovacuum's ANALYZE where the server runs without autovacuum (no VACUUM): a table whose
    n_mod_since_analyze passed 50 + 10% of its rows (the defaults) now and, until `stopping`,
    every 2 s. The check at a segment's start matters: without statistics the service's plans
    would measure how many ANALYZEs luck gave it."""
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5, application_name=BENCH_APP) as conn:
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            for (rel,) in conn.execute(
                    "SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
                    "WHERE s.relname = ANY(%s) AND s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)",
                    [TABLES]).fetchall():
                conn.execute(f'ANALYZE "{rel}"')
            if stopping is None or stopping.wait(2.0):
                return


def run_segment(side, job: dict, batch_ids: list[int], autoanalyze: bool) -> Tally:
    """The batches split over the side's client processes, started together; wall time from the
    start to the last end."""
    meter = h.CpuMeter(side.families, every=0.5) if side.families else None
    ctx = mp.get_context("fork")
    ready, start, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    n = CLIENTS[side.name]
    CHILDREN[:] = [ctx.Process(target=child_main, daemon=True,
                               args=(side.client, job, batch_ids[i::n], ready, start, results)) for i in range(n)]
    for p in CHILDREN:
        p.start()
    for _ in CHILDREN:
        ready.get(timeout=60)
    time.sleep(0.2)  # let the baseline's clients connect before the clock starts
    t0, stopping = time.monotonic(), threading.Event()
    start.set()
    analyzer = threading.Thread(target=analyze, args=(side.conninfo, stopping), daemon=True)
    if autoanalyze:
        analyzer.start()
    out = Tally()
    try:
        for _ in range(n):
            out.add(results.get(timeout=1800))
    except queue.Empty:
        raise h.BenchError(f"{side.name}: client processes did not report within 30 minutes") from None
    finally:
        stopping.set()
        if autoanalyze:
            analyzer.join(timeout=60)
    stop_children()
    if out.fatal:
        raise h.BenchError(f"{side.name}: {out.fatal}")
    cpu = meter.stop() if meter else {}
    out.wall, out.cpu_server = out.end - t0, cpu.get("server", 0.0)
    out.cpu_backends = cpu.get("backends", out.cpu_backends)
    return out


def run_pass(sides: list, label: str, autoanalyze: bool) -> dict[str, Tally]:
    """Each side's batches in ROUNDS segments, the sides taking turns (h.interleave), a
    CHECKPOINT before each so that none pays for another's dirty pages."""
    out = {side.name: Tally() for side in sides}
    batches = range(len(sides[0].job["corpus"].bodies))
    for r, side in h.interleave(ROUNDS, sides):
        with psycopg.connect(side.conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CHECKPOINT")
        res = run_segment(side, side.job, batches[len(batches) * r // ROUNDS: len(batches) * (r + 1) // ROUNDS],
                          autoanalyze)
        out[side.name].add(res)
        h.say(f"{side.name} {label} round {r + 1}/{ROUNDS}: {res.events:,} events, {res.eps:,.0f} ev/s")
    return out


def dead_tuples(conninfo: str) -> dict[str, tuple[int, int]]:
    """(live, dead) tuples of each table."""
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return {r[0]: r[1:] for r in conn.execute("SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables "
                                                  "WHERE relname = ANY(%s)", [TABLES])}


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def tenant(bench: h.Bench, db: str, keys: int = 1, name: str = "Bench", rt=None):
    return bench.tenant(db, PLAN, name=name, unlimited=True, keys=keys, role="editor", permissions=["ingest"], rt=rt)


def statements(bench: h.Bench, sides: list, corpus) -> dict[str, list[str]]:
    """Per side, in this process on a fresh tenant, first pass and replay of the first batches:
    psycopg executes a batch, and the service's CPU ms a batch (Flask test client, no HTTP)."""
    from webapp import create_app

    counted, execute, out = [0], psycopg.Cursor.execute, {}

    def counting(cur, *args, **kwargs):
        counted[0] += 1
        return execute(cur, *args, **kwargs)

    psycopg.Cursor.execute = counting
    try:
        for side in sides:
            made = tenant(bench, side.db)
            client = create_app(runtime=made.rt).test_client() if side.name == "service" else None
            conn = psycopg.connect(side.conninfo, connect_timeout=5)
            out[side.name], batches = [], min(STATEMENT_BATCHES, len(corpus.bodies))
            for _ in ("pass 1", "replay"):
                counted[0], c0 = 0, time.process_time()
                for b in range(batches):
                    if client is None:
                        write_batch(conn, made.id, *corpus.columns[b])
                        continue
                    resp = client.post("/api/track", data=corpus.bodies[b], headers=headers(made.key))
                    if resp.status_code != 200:
                        raise h.BenchError(f"statements: HTTP {resp.status_code} {resp.get_data()[:300]!r}")
                cpu = f" ({1000 * (time.process_time() - c0) / batches:.1f} ms CPU)" * bool(client)
                out[side.name].append(f"{counted[0] / batches:.2f}{cpu}")
            conn.close()
    finally:
        psycopg.Cursor.execute = execute
    return out


def run(bench: h.Bench, args) -> int:
    from cs_daemon.db import dispose_engines
    from cs_daemon.plans import plan

    bench.cleanups.append(stop_children)
    corpus = make_corpus(args.events, args.users, 20261122)
    warm = make_corpus(40 * BATCH, 200, 20261123, "warm")
    batches = len(corpus.bodies)
    h.say(f"corpus: {corpus.events:,} events, {batches:,} batches, {corpus.users:,} users, {corpus.keys:,} unique keys")
    keys = max(1, math.ceil(2 * batches * 1.05 / (plan(PLAN).requests_per_minute * 0.9)))  # never over the limit
    with psycopg.connect(h.conninfo(), autocommit=True, connect_timeout=5) as conn:
        pg, autovacuum = (conn.execute(f"SHOW {x}").fetchone()[0] for x in ("server_version", "autovacuum"))
    sides = []
    for name, client in (("baseline", baseline_client), ("service", service_client)):
        db = bench.database("_base" if name == "baseline" else "")
        made = tenant(bench, db, keys if name == "service" else 1)
        made.warm = tenant(bench, db, name="Warmup", rt=made.rt)
        job = {"corpus": corpus, "tenant_id": made.id, "conninfo": h.conninfo(db),
               "headers": list(map(headers, made.keys))}
        sides.append(SimpleNamespace(name=name, db=db, conninfo=h.conninfo(db), tenant=made, client=client, job=job,
                                     families=None))
    counts = statements(bench, sides, corpus)
    dispose_engines()  # no pooled connection may cross the fork of the client processes
    baseline, service = sides
    srv, _ = bench.api(service.db, headers(service.tenant.warm.keys[0]), PLAN, CS_LOG_LEVEL="WARNING")
    service.job["port"] = srv.port
    for side in sides:
        run_segment(side, dict(side.job, corpus=warm, tenant_id=side.tenant.warm.id,
                               headers=[headers(side.tenant.warm.key)]), range(len(warm.bodies)), False)
    workers = srv.children()
    backends = psycopg.connect(service.conninfo, autocommit=True, connect_timeout=5, application_name=BENCH_APP)
    bench.cleanups.append(backends.close)
    service.families = lambda: {"server": workers, "backends": [r[0] for r in backends.execute(SERVICE_BACKENDS)]}
    autoanalyze = autovacuum == "off"
    first = run_pass(sides, "pass 1", autoanalyze)
    time.sleep(STATS_IDLE_WAIT)
    for side in sides:
        if autoanalyze:
            analyze(side.conninfo)  # what autovacuum would run soon, so that none runs in the replay
        side.dead = dead_tuples(side.conninfo)
    replay = run_pass(sides, "replay", autoanalyze)
    srv.check("the replay")
    time.sleep(STATS_IDLE_WAIT)

    print(f"\nIngest: POST /api/track (gunicorn 2 sync workers, {CLIENTS['service']} client processes, plan {PLAN}, "
          f"{keys} key(s) rotated) vs raw psycopg ({CLIENTS['baseline']} processes)")
    print(f"  PostgreSQL {pg}, autovacuum {autovacuum}" + " (ANALYZE by the bench at its thresholds)" * autoanalyze
          + f"; {h.CPUS} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"  corpus: {corpus.events:,} events, {corpus.users:,} users, {batches:,} batches of {BATCH}, "
          f"{corpus.keys:,} unique keys ({100 * (1 - corpus.keys / corpus.events):.1f}% repeated)")
    for side in sides:
        print(f"  statements a batch ({side.name}, in process, first {STATEMENT_BATCHES} batches): "
              "first pass {}, replay {}".format(*counts[side.name]))
    rows, problems, missed = [], [], False
    for side in sides:
        with psycopg.connect(side.conninfo, autocommit=True, connect_timeout=5) as conn:
            stored = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE tenant_id = %s", [side.tenant.id]).fetchone()[0]
                      for t in TABLES}
        for table, want in (("events", corpus.keys), ("customers", corpus.users)):
            if stored[table] != want:
                problems.append(f"{side.name}: {stored[table]:,} {table} stored, {want:,} expected")
        if replay[side.name].accepted:
            problems.append(f"{side.name}: the replay accepted {replay[side.name].accepted:,} events (expected 0)")
        for label, p in (("pass 1", first[side.name]), ("replay", replay[side.name])):
            rows.append([f"{side.name} {label}", p.events, f"{p.eps:,.0f}",
                         f"{h.percentile(p.latencies, 50) * 1000:.1f}", p.accepted, p.ms(p.cpu), p.ms(p.cpu_clients),
                         p.ms(p.cpu_server), p.ms(p.cpu_backends)])
        after = dead_tuples(side.conninfo)
        side.dead = {t: (after[t][1] - side.dead[t][1], after[t][0]) for t in TABLES}
        print(f"  stored: {stored['events']:,} events, {stored['customers']:,} customers ({side.name})")
    print()
    print(h.table(rows, ["pass", "events", "ev/s", "batch p50 ms", "accepted", "CPU ms a batch", "clients", "app",
                             "PostgreSQL"]))
    for p in problems:
        print(f"  CHECK FAILED: {p}")
    ratio = first["service"].eps / first["baseline"].eps
    cpu = {k: p.ms(p.cpu) for k, p in first.items()}
    print(f"\n  first pass ratio (service / baseline): {ratio:.2f} (goal >= {RATIO_GOAL}: "
          f"{'met' if ratio >= RATIO_GOAL else 'NOT met'}); CPU-bound ratio {cpu['baseline'] / cpu['service']:.2f}")
    for side in sides:
        speed = replay[side.name].eps / first[side.name].eps
        dead = {t: 100.0 * d / max(1, live) for t, (d, live) in side.dead.items()}
        ok = speed >= 1.0 and max(dead.values()) < 100 * DEAD_GOAL
        missed |= side.name == "service" and not ok
        print(f"  {side.name}: replay {speed:.2f}x the first pass, dead tuples caused by the replay: "
              + ", ".join(f"{t} {side.dead[t][0]:+,} ({dead[t]:.3f}%)" for t in TABLES)
              + f" (goals >= 1.0x, < 1%: {'met' if ok else 'NOT met'})")
    if problems:
        return 2
    return 1 if args.strict and (missed or ratio < RATIO_GOAL) else 0


if __name__ == "__main__":
    sys.exit(h.main("ingest", __doc__, OPTIONS, run))
