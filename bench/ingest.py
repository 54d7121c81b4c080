"""Ingest throughput: events/s through POST /api/track against a raw psycopg baseline.

    .venv/bin/python bench/ingest.py                    # 1,000,000 events over 10k users
    .venv/bin/python bench/ingest.py --events 100000    # a quick run

By itself it
  1. generates a deterministic corpus (seeded): N events over 10k users in batches of 50,
     10% of the events repeating an earlier event's idempotency key (a retry: the same
     event re-sent, sometimes within the same batch), realistic event names and small
     properties, timestamps spread over the last 30 days; every request body and every
     baseline array is built before any timing;
  2. creates two fresh PostgreSQL databases (unique names), migrates both with
     cs_daemon.migrate.upgrade and makes in each a tenant on the "scale" plan (no
     tracked-user limit, 30,000 requests a minute a key; enough keys, rotated batch by
     batch, to stay under it) plus a small warm-up tenant;
  3. starts gunicorn with 2 sync workers (webapp.wsgi:app, production mode: DATABASE_URL,
     REDIS_URL with a unique CS_REDIS_PREFIX, CS_SECRET_KEY, CS_LOG_LEVEL=WARNING) on
     127.0.0.1 and warms both sides up on the warm-up tenants;
  4. first pass, then a replay of the same batches (100% duplicates), each pass cut into
     --rounds segments that the two sides take in turns, so that load from elsewhere on
     the machine hits both alike:
       service:  4 client processes (http.client, one connection a request as sync
                 gunicorn workers close it) posting the pre-serialised bodies;
       baseline: 2 processes, raw psycopg, one transaction a batch
                 (bench/ingest_baseline.py: events via INSERT ... SELECT FROM unnest(...)
                 ON CONFLICT DO NOTHING RETURNING, then the per-user upsert into customers);
  5. reads n_live_tup / n_dead_tup of events and customers from pg_stat_user_tables after
     each pass and prints throughput, CPU time a batch (clients, gunicorn workers and
     PostgreSQL backends, from /proc), the share of the machine's CPU that other
     processes took, and a summary: ratio service / baseline (goal >= 0.5), replay at
     least as fast as the first pass, dead tuples caused by the replay < 1% of the rows;
  6. tears everything down (gunicorn, client processes, databases, Redis keys of the
     prefix), also on error or Ctrl-C.

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
segment, so that none pays for another's dirty pages.

Exit status: 0 when the measurement ran (whatever the figures; --strict makes a missed
goal exit 1), 2 when setup or a request failed. CS_TEST_PG / CS_TEST_REDIS say where
PostgreSQL and Redis are (as for the tests)."""

from __future__ import annotations

import argparse
import bisect
import http.client
import json
import math
import multiprocessing as mp
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for p in (str(BENCH), str(ROOT)):
    if p not in sys.path:
        sys.path.insert(0, p)

import ingest_baseline as baseline  # noqa: E402

PG = os.environ.get("CS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("CS_TEST_REDIS", "redis://127.0.0.1:6379/0")
HOST = "127.0.0.1"
PLAN = "scale"
WORKERS = 2
BASELINE_PROCESSES = 2
RATIO_GOAL = 0.5
RATIO_FLOOR = 0.3
DEAD_GOAL = 0.01
STATS_IDLE_WAIT = 11.0  # PGSTAT_IDLE_INTERVAL (10 s) + margin
TABLES = ("events", "customers")


class BenchError(Exception):
    pass


def _conninfo(dbname: str) -> str:
    return PG.replace("postgresql+psycopg://", "postgresql://") + f"/{dbname}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


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


# --- the environment --------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path

    def log_errors(self, limit: int = 3) -> list[str]:
        """The distinct exception lines of the tracebacks in the log, with their counts."""
        import re

        found: dict[str, int] = {}
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return []
        for line in text.splitlines():
            if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Detected|Failure|Timeout)\b.*", line):
                key = line.strip()[:300]
                found[key] = found.get(key, 0) + 1
        return [f"{n} x {k}" for k, n in sorted(found.items(), key=lambda kv: -kv[1])[:limit]]

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class TenantKeys:
    tenant_id: str
    keys: list[str]
    warm_tenant_id: str
    warm_key: str


class Environment:
    """Everything the run creates, and its teardown (safe to call at any stage)."""

    def __init__(self):
        tag = uuid.uuid4().hex[:10]
        self.dbs = {"service": f"cs_bench_ingest_{tag}", "baseline": f"cs_bench_ingest_{tag}_base"}
        self.created: set[str] = set()
        self.prefix = f"csbench-ingest-{tag[:8]}"
        self.secret = secrets.token_hex(32)
        self.tmp = Path(tempfile.mkdtemp(prefix="cs-bench-ingest-"))
        self.server: Server | None = None
        self.children: list = []  # multiprocessing.Process of the current pass
        self.torn_down = False

    def db_url(self, which: str) -> str:
        return f"{PG}/{self.dbs[which]}"

    def conninfo(self, which: str) -> str:
        return _conninfo(self.dbs[which])

    def _settings(self, which: str, redis_url: str | None):
        from cs_daemon.config import Settings

        return Settings(database_url=self.db_url(which), redis_url=redis_url, cs_redis_prefix=self.prefix,
                        cs_secret_key=self.secret, cs_data_dir=self.tmp)

    def create_database(self, which: str) -> None:
        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbs[which]}"')
        self.created.add(which)
        from cs_daemon import migrate

        migrate.upgrade(self._settings(which, None))

    def create_tenants(self, which: str, keys_needed: int) -> TenantKeys:
        from sqlalchemy import update

        from cs_daemon.auth import service as auth
        from cs_daemon.runtime import Runtime
        from cs_daemon.tenants import service as tenants
        from cs_daemon.tenants.models import Tenant

        rt = Runtime(self._settings(which, REDIS))
        made = {}
        for name in ("Bench", "Warmup"):
            with rt.session() as s:
                made[name] = tenants.create(s, name=name, owner_email=f"owner@{name.lower()}.example",
                                            now=rt.now(), plan_tier=PLAN)
                # the scale plan has no tracked-user limit; make sure of it
                s.execute(update(Tenant).where(Tenant.id == made[name].tenant.id)
                          .values(tracked_user_limit=None))
        tid = made["Bench"].tenant.id
        keys = [made["Bench"].key.secret]
        with rt.session(tid) as s:
            for i in range(1, keys_needed):
                keys.append(auth.issue(s, tid, role="editor", permissions=["ingest"], now=rt.now(),
                                       label=f"bench-ingest-{i}").secret)
        return TenantKeys(tid, keys, made["Warmup"].tenant.id, made["Warmup"].key.secret)

    def drop_database(self, which: str) -> None:
        from cs_daemon.db import dispose_engines

        dispose_engines()
        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbs[which]}" WITH (FORCE)')
        self.created.discard(which)

    def _child_env(self) -> dict[str, str]:
        from cs_daemon.config import Settings

        # No setting of the caller's shell may leak into the server.
        ours = {name.upper() for name in Settings.model_fields}
        env = {k: v for k, v in os.environ.items() if k.upper() not in ours}
        env.update({
            "DATABASE_URL": self.db_url("service"),
            "REDIS_URL": REDIS,
            "CS_REDIS_PREFIX": self.prefix,
            "CS_SECRET_KEY": self.secret,
            "CS_DATA_DIR": str(self.tmp / "data"),
            "CS_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def start_server(self) -> Server:
        port = _free_port()
        log = self.tmp / "gunicorn.log"
        argv = [sys.executable, "-m", "gunicorn", "webapp.wsgi:app", "--workers", str(WORKERS),
                "--bind", f"{HOST}:{port}", "--pythonpath", str(ROOT), "--graceful-timeout", "5"]
        with open(log, "wb") as fh:
            # cwd is the temp dir so a .env file in the checkout cannot change the settings
            proc = subprocess.Popen(argv, cwd=self.tmp, env=self._child_env(), stdout=fh,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.server = Server(proc, port, log)
        return self.server

    def wait_ready(self, timeout: float = 30.0) -> None:
        server = self.server
        assert server is not None
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise BenchError(f"gunicorn exited with {server.proc.returncode}:\n{server.log_tail()}")
            try:
                conn = http.client.HTTPConnection(HOST, server.port, timeout=5)
                conn.request("GET", "/api/health")
                resp = conn.getresponse()
                resp.read()
                conn.close()
                if resp.status in (200, 503):  # 503: no job worker runs, which is fine here
                    return
                last = f"HTTP {resp.status}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise BenchError(f"gunicorn not ready after {timeout:.0f} s ({last}):\n{server.log_tail()}")

    def worker_pids(self) -> list[int]:
        if self.server is None:
            return []
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.server.proc.pid)],
                             capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def stop_children(self) -> None:
        for p in self.children:
            if p.is_alive():
                p.terminate()
        for p in self.children:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.children = []

    def teardown(self) -> list[str]:
        if self.torn_down:
            return []
        self.torn_down = True
        problems: list[str] = []
        done: list[str] = []
        self.stop_children()
        server = self.server
        if server is not None:
            if server.proc.poll() is None:
                try:
                    os.killpg(server.proc.pid, signal.SIGTERM)  # its own session: master + workers
                except ProcessLookupError:
                    pass
            try:
                server.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                problems.append("gunicorn did not stop on SIGTERM; killed")
                try:
                    os.killpg(server.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                server.proc.wait(timeout=5)
            self.server = None
            done.append("gunicorn stopped")
        try:
            from cs_daemon.db import dispose_engines

            dispose_engines()
        except Exception as exc:  # pragma: no cover - best effort
            problems.append(f"disposing engines: {exc}")
        for which in sorted(self.created):
            try:
                self.drop_database(which)
                done.append(f"database {self.dbs[which]} dropped")
            except Exception as exc:
                problems.append(f"dropping database {self.dbs[which]}: {exc}")
        try:
            client = redis.Redis.from_url(REDIS, socket_timeout=5)
            found = list(client.scan_iter(f"{self.prefix}:*", count=1000))
            if found:
                client.delete(*found)
            client.close()
            done.append(f"{len(found)} Redis keys deleted")
        except Exception as exc:
            problems.append(f"deleting Redis keys {self.prefix}:*: {exc}")
        for f in sorted(self.tmp.rglob("*"), reverse=True):
            try:
                f.unlink() if f.is_file() else f.rmdir()
            except OSError:
                pass
        try:
            self.tmp.rmdir()
        except OSError:
            pass
        print(f"teardown: {', '.join(done) or 'nothing to undo'}", file=sys.stderr)
        return problems


# --- passes: client processes -------------------------------------------------------------


@dataclass
class WorkerResult:
    done: int = 0          # batches done (a prefix of the worker's list)
    events: int = 0        # events sent / written
    accepted: int = 0
    duplicates: int = 0
    over_limit: int = 0
    users: int = 0
    retries: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)  # why, for the first few retries
    latencies: list[float] = field(default_factory=list)
    done_ids: list[int] = field(default_factory=list)
    end: float = 0.0
    fatal: str | None = None
    cpu_self: float = 0.0      # this process's CPU seconds in the pass
    cpu_backend: float = 0.0   # its PostgreSQL backend's (baseline only)


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_busy() -> float:
    """CPU seconds all cores spent busy since boot (from /proc/stat)."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal
        return (f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] if len(f) > 7 else 0)) / _TICK
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_of(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in pids}


BENCH_APP = "cs-bench"   # application_name of the bench's own connections (not counted)
SERVICE_BACKENDS = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    f"AND backend_type = 'client backend' AND application_name <> '{BENCH_APP}'")


def _post(port: int, body: bytes, headers: dict) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        conn.request("POST", "/api/track", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _service_worker(ctx: dict, batch_ids: list[int], deadline: float, start, res: WorkerResult) -> None:
    corpus: Corpus = ctx["corpus"]
    headers = ctx["headers"]
    nh = len(headers)
    port = ctx["port"]
    perf = time.perf_counter
    start.wait()
    c0 = time.process_time()
    for b in batch_ids:
        if time.monotonic() > deadline:
            break
        res.cpu_self = time.process_time() - c0
        body = corpus.bodies[b]
        for attempt in range(4):
            t0 = perf()
            try:
                status, data = _post(port, body, headers[b % nh])
            except OSError as exc:
                status, data = 0, str(exc).encode()
            t1 = perf()
            if status == 200:
                break
            if status == 429 or status >= 500 or status == 0:
                res.retries += 1
                if len(res.retried) < 5:
                    res.retried.append(f"batch {b}: HTTP {status}: {data[:200]!r}")
                time.sleep(0.1 * (attempt + 1))
                continue
            break
        res.latencies.append(t1 - t0)
        res.done += 1
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
    res.cpu_self = time.process_time() - c0


def _baseline_worker(ctx: dict, batch_ids: list[int], deadline: float, start, res: WorkerResult) -> None:
    corpus: Corpus = ctx["corpus"]
    tenant = ctx["tenant_id"]
    perf = time.perf_counter
    with psycopg.connect(ctx["conninfo"], connect_timeout=5) as conn:
        conn.execute("SELECT 1")
        conn.commit()
        backend = conn.info.backend_pid
        start.wait()
        c0, b0 = time.process_time(), cpu_seconds(backend)
        for b in batch_ids:
            if time.monotonic() > deadline:
                break
            t0 = perf()
            inserted, users, retries = baseline.write_batch_retrying(conn, tenant, corpus.columns[b])
            res.latencies.append(perf() - t0)
            n = corpus.batch_events(b)
            res.done += 1
            res.done_ids.append(b)
            res.events += n
            res.accepted += inserted
            res.duplicates += n - inserted
            res.users += users
            res.retries += retries
        res.end = time.monotonic()
        res.cpu_self = time.process_time() - c0
        res.cpu_backend = cpu_seconds(backend) - b0
        baseline.force_stats_flush(conn)


def _child_main(fn, ctx, idx, batch_ids, deadline, ready, start, queue) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    res = WorkerResult()
    try:
        ready.put(idx)
        fn(ctx, batch_ids, deadline, start, res)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        res.fatal = f"{type(exc).__name__}: {exc}"
    if not res.end:
        res.end = time.monotonic()
    queue.put((idx, res))


@dataclass
class PassResult:
    label: str
    batches: int
    planned: int
    events: int
    wall: float
    accepted: int
    duplicates: int
    over_limit: int
    users: int
    retries: int
    failed: int
    errors: list[str]
    retried: list[str]
    latencies: list[float]
    done_ids: list[int]
    cpu_clients: float = 0.0
    cpu_backends: float = 0.0
    cpu_server: float = 0.0    # gunicorn workers (service only)
    load: tuple = ()           # 1-minute load average before and after
    analyzed: dict = field(default_factory=dict)  # ANALYZE runs of AutoAnalyzer
    cpu_machine: float = 0.0   # all cores' busy seconds during the pass, whoever used them

    @property
    def cpu_ours(self) -> float:
        return self.cpu_clients + self.cpu_server + self.cpu_backends

    @property
    def cpu_per_batch_ms(self) -> float:
        return 1000.0 * self.cpu_ours / max(1, self.batches)
    analyze_error: str | None = None

    @property
    def eps(self) -> float:
        return self.events / self.wall if self.wall > 0 else float("nan")

    @property
    def complete(self) -> bool:
        return self.batches == self.planned

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


class AutoAnalyzer:
    """Stands in for autovacuum's ANALYZE when the server runs without autovacuum (as this
    machine's does), so the tables get planner statistics as on a default installation:
    every 2 s, ANALYZE a table whose n_mod_since_analyze passed 50 + 10% of its rows
    (autovacuum_analyze_threshold / _scale_factor defaults). No VACUUM: dead tuples stay
    as the passes leave them. A thread of the parent, started after the fork."""

    def __init__(self, conninfo: str):
        import threading

        self.conninfo = conninfo
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.runs: dict[str, int] = {}
        self.error: str | None = None

    def _run(self) -> None:
        try:
            with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5,
                                 application_name=BENCH_APP) as conn:
                while not self.stop.wait(2.0):
                    self.once(conn)
        except Exception as exc:  # reported, never fatal
            self.error = f"{type(exc).__name__}: {exc}"

    def once(self, conn) -> dict[str, int]:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        due = conn.execute(
            "SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
            "WHERE s.schemaname = 'public' AND s.relname = ANY(%s) "
            "AND s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)",
            [list(TABLES)]).fetchall()
        for (rel,) in due:
            conn.execute(f'ANALYZE "{rel}"')
            self.runs[rel] = self.runs.get(rel, 0) + 1
        return self.runs

    @classmethod
    def catch_up(cls, conninfo: str) -> dict[str, int]:
        """The ANALYZE that autovacuum would run soon after a pass (done before the replay,
        so that none runs during it)."""
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
            return cls(conninfo).once(conn)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=60)


def run_pass(env: Environment, label: str, fn, ctx: dict, lists: list[list[int]],
             timeout: float, analyze: str | None = None) -> PassResult:
    """Fork one process a list, start them together, wait for all; wall time is from the
    common start to the last one's end. `analyze`: the conninfo to run AutoAnalyzer on."""
    load_before = os.getloadavg()
    mp_ctx = mp.get_context("fork")
    ready, queue, start = mp_ctx.Queue(), mp_ctx.Queue(), mp_ctx.Event()
    deadline = time.monotonic() + timeout
    env.children = [mp_ctx.Process(target=_child_main, daemon=True,
                                   args=(fn, ctx, i, lst, deadline, ready, start, queue))
                    for i, lst in enumerate(lists)]
    for p in env.children:
        p.start()
    for _ in lists:
        ready.get(timeout=60)
    time.sleep(0.2)  # let the baseline workers connect before the clock starts
    busy0 = machine_busy()
    t0 = time.monotonic()
    start.set()
    results: dict[int, WorkerResult] = {}
    analyzer = AutoAnalyzer(analyze) if analyze else None
    if analyzer:
        analyzer.__enter__()
    try:
        while len(results) < len(lists):
            try:
                idx, res = queue.get(timeout=timeout + 120)
            except Exception:
                raise BenchError(f"{label}: client processes did not report within {timeout + 120:.0f} s") from None
            results[idx] = res
    finally:
        if analyzer:
            analyzer.__exit__()
    busy = machine_busy() - busy0
    env.stop_children()
    ordered = [results[i] for i in range(len(lists))]
    fatal = [r.fatal for r in ordered if r.fatal]
    if fatal:
        raise BenchError(f"{label}: {fatal[0]}")
    lat = [x for r in ordered for x in r.latencies]
    return PassResult(
        label=label, batches=sum(r.done for r in ordered), planned=sum(len(x) for x in lists),
        events=sum(r.events for r in ordered), wall=max(r.end for r in ordered) - t0,
        accepted=sum(r.accepted for r in ordered), duplicates=sum(r.duplicates for r in ordered),
        over_limit=sum(r.over_limit for r in ordered), users=sum(r.users for r in ordered),
        retries=sum(r.retries for r in ordered), failed=sum(r.failed for r in ordered),
        errors=[e for r in ordered for e in r.errors][:5],
        retried=[e for r in ordered for e in r.retried][:5], latencies=lat,
        done_ids=sorted(i for r in ordered for i in r.done_ids),
        cpu_clients=sum(r.cpu_self for r in ordered), cpu_backends=sum(r.cpu_backend for r in ordered),
        load=(load_before[0], os.getloadavg()[0]),
        analyzed=dict(analyzer.runs) if analyzer else {},
        cpu_machine=busy,
        analyze_error=analyzer.error if analyzer else None,
    )


class BackendCpu(threading.Thread):
    """CPU time the database's backends spent during a pass. The pool retires a
    connection after 5 minutes, so backends end and start during a long pass: they are
    sampled twice a second, a backend that appears counts from zero (it started within
    the pass), and one that ends counts up to its last sample (at most half a second of
    its CPU is missed)."""

    def __init__(self, conninfo: str):
        super().__init__(daemon=True)
        self.conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=5, application_name=BENCH_APP)
        self.first, self.last = {}, {}
        self.stopping = threading.Event()
        self.sample(started=True)

    def sample(self, started: bool = False) -> None:
        for (pid,) in self.conn.execute(SERVICE_BACKENDS).fetchall():
            cpu = cpu_seconds(pid)
            if cpu:
                self.first.setdefault(pid, cpu if started else 0.0)
                self.last[pid] = cpu

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            self.sample()

    def stop(self) -> float:
        self.stopping.set()
        self.join()
        self.sample()
        self.conn.close()
        return sum(self.last[p] - self.first[p] for p in self.last)


def measured_pass(env: Environment, conninfo: str, label: str, ctx: dict, lists: list[list[int]],
                  timeout: float, analyze: str | None = None) -> PassResult:
    """A service pass, with the CPU time of the gunicorn workers and of their PostgreSQL
    backends."""
    workers = env.worker_pids()
    w0 = cpu_of(workers)
    backends = BackendCpu(conninfo)
    backends.start()
    res = run_pass(env, label, _service_worker, ctx, lists, timeout, analyze)
    res.cpu_backends = backends.stop()
    w1 = cpu_of(workers)
    res.cpu_server = sum(w1[p] - w0[p] for p in workers)
    return res


@dataclass
class System:
    """One side of the comparison: how a batch list is driven, and its database."""

    name: str
    conninfo: str
    tenant_id: str
    fn: object
    workers: int
    ctx: dict


def check_server(server, when: str) -> None:
    if server is not None and server.proc.poll() is not None:
        raise BenchError(f"gunicorn died during {when}:\n{server.log_tail()}")


def merge(label: str, parts: list[PassResult], planned: int) -> PassResult:
    """The segments of one system's pass as one result (wall times add up)."""
    if not parts:
        return PassResult(label, 0, planned, 0, 0.0, 0, 0, 0, 0, 0, 0, [], [], [], [])
    analyzed: dict[str, int] = {}
    for p in parts:
        for k, v in p.analyzed.items():
            analyzed[k] = analyzed.get(k, 0) + v
    return PassResult(
        label=label, batches=sum(p.batches for p in parts), planned=planned,
        events=sum(p.events for p in parts), wall=sum(p.wall for p in parts),
        accepted=sum(p.accepted for p in parts), duplicates=sum(p.duplicates for p in parts),
        over_limit=sum(p.over_limit for p in parts), users=sum(p.users for p in parts),
        retries=sum(p.retries for p in parts), failed=sum(p.failed for p in parts),
        errors=[e for p in parts for e in p.errors][:5], retried=[e for p in parts for e in p.retried][:5],
        latencies=[x for p in parts for x in p.latencies], done_ids=sorted(i for p in parts for i in p.done_ids),
        cpu_clients=sum(p.cpu_clients for p in parts), cpu_backends=sum(p.cpu_backends for p in parts),
        cpu_server=sum(p.cpu_server for p in parts), load=(parts[0].load[0], max(p.load[1] for p in parts)),
        analyzed=analyzed, analyze_error=next((p.analyze_error for p in parts if p.analyze_error), None),
        cpu_machine=sum(p.cpu_machine for p in parts),
    )


def run_interleaved(env: Environment, systems: list[System], label: str, batches: dict[str, list[int]],
                    rounds: int, timeout: float, autoanalyze: bool) -> dict[str, PassResult]:
    """Each system's batches in `rounds` consecutive segments, the systems taking turns
    segment by segment (which one goes first alternates), so that load from elsewhere on
    the machine hits both alike. A CHECKPOINT precedes every segment, so none pays for
    the other's dirty pages. A system whose segments used up `timeout` seconds stops."""
    parts: dict[str, list[PassResult]] = {sy.name: [] for sy in systems}
    used = {sy.name: 0.0 for sy in systems}
    segments = {name: [ids[len(ids) * r // rounds: len(ids) * (r + 1) // rounds] for r in range(rounds)]
                for name, ids in batches.items()}
    for r in range(rounds):
        for sy in (systems if r % 2 == 0 else systems[::-1]):
            ids = segments[sy.name][r]
            left = timeout - used[sy.name]
            if not ids or left <= 0:
                continue
            checkpoint(sy.conninfo)
            lists = [ids[i::sy.workers] for i in range(sy.workers)]
            an = sy.conninfo if autoanalyze else None
            tag = f"{sy.name} {label}"
            if sy.name == "service":
                res = measured_pass(env, sy.conninfo, tag, sy.ctx, lists, left, an)
            else:
                res = run_pass(env, tag, sy.fn, sy.ctx, lists, left, an)
            used[sy.name] += res.wall
            parts[sy.name].append(res)
            print(f"{tag} round {r + 1}/{rounds}: {res.events:,} events in {res.wall:.1f} s, "
                  f"{res.eps:,.0f} ev/s (load {res.load[1]:.1f})", file=sys.stderr)
    return {name: merge(f"{name} {label}", ps, len(batches[name])) for name, ps in parts.items()}


def split(n_batches: int, workers: int) -> list[list[int]]:
    """Round robin, so the workers together follow the corpus order."""
    return [list(range(i, n_batches, workers)) for i in range(workers)]


# --- table statistics ------------------------------------------------------------------------


STAT_COLS = ("n_live_tup", "n_dead_tup", "n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del",
             "vacuum_count", "autovacuum_count", "analyze_count", "autoanalyze_count")


def read_stats(conninfo: str) -> dict[str, dict[str, int]]:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            f"SELECT relname, {', '.join(STAT_COLS)} FROM pg_stat_user_tables "
            "WHERE schemaname = 'public' AND relname = ANY(%s)", [list(TABLES)]).fetchall()
    return {r[0]: dict(zip(STAT_COLS, r[1:])) for r in rows}


def checkpoint(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("CHECKPOINT")


def counts(conninfo: str, tenant_id: str) -> dict[str, int]:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t} WHERE tenant_id = %s", [tenant_id]).fetchone()[0]
                for t in ("events", "customers", "outbox_events")}


def catch_up(conninfo: str, autoanalyze: bool, stats: dict) -> dict:
    """After pass 1: the pending autoanalyze, then the statistics the replay starts from."""
    if not autoanalyze:
        return stats
    ran = AutoAnalyzer.catch_up(conninfo)
    if ran:
        print(f"catch-up ANALYZE before the replay: {ran}", file=sys.stderr)
    return read_stats(conninfo)


def wait_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


@dataclass
class Phase:
    name: str
    p1: PassResult
    p2: PassResult
    s0: dict
    s1: dict
    s1r: dict   # the replay's starting point (after a catch-up ANALYZE, if any)
    s2: dict
    rows: dict[str, int]
    server_errors: list[str] = field(default_factory=list)


def _dead_pct(dead: int, live: int) -> float:
    return 100.0 * dead / live if live else float("nan")


def _report_warmup(p: PassResult) -> None:
    print(f"{p.label}: {p.batches} batches, {p.eps:,.0f} ev/s, accepted={p.accepted} "
          f"duplicates={p.duplicates} retries={p.retries} failed={p.failed}"
          + "".join(f"\n  error: {e}" for e in p.errors)
          + "".join(f"\n  retried: {e}" for e in p.retried), file=sys.stderr)


def print_pass(p: PassResult) -> None:
    extra = f" users-upserted={p.users:,}" if p.users else ""
    print(f"  {p.label:<22} {p.events:>10,} ev {p.batches:>7,} req {p.wall:>8.1f} s {p.eps:>9,.0f} ev/s"
          f"   batch p50 {p.pct(0.5):6.1f} ms p95 {p.pct(0.95):6.1f} ms")
    print(f"  {'':<22} accepted={p.accepted:,} duplicates={p.duplicates:,} over_limit={p.over_limit:,}"
          f"{extra} retries={p.retries} failed={p.failed}"
          + ("" if p.complete else f"  (STOPPED AT TIME LIMIT after {p.batches:,} of {p.planned:,} batches)"))
    cpu = [f"clients {p.cpu_clients:.1f}"]
    if p.cpu_server:
        cpu.append(f"gunicorn workers {p.cpu_server:.1f}")
    cpu.append(f"PG backends {p.cpu_backends:.1f}")
    per = 1000.0 / max(1, p.batches)
    print(f"  {'':<22} CPU s: {', '.join(cpu)} (= " + ", ".join(
        x for x in (f"{p.cpu_server * per:.1f} ms app" if p.cpu_server else "",
                    f"{p.cpu_backends * per:.1f} ms PG") if x) + f" a batch); load avg {p.load[0]:.2f} -> "
          f"{p.load[1]:.2f}" if p.load else "")
    if p.cpu_machine:
        cores = os.cpu_count() or 1
        print(f"  {'':<22} machine: {p.cpu_machine:.1f} CPU s busy of {cores * p.wall:.1f} available; ours "
              f"{p.cpu_ours:.1f} ({p.cpu_per_batch_ms:.1f} ms a batch), everything else "
              f"{max(0.0, p.cpu_machine - p.cpu_ours):.1f} (other processes on this machine, Redis, "
              f"PostgreSQL's own background work)")
    if p.analyzed or p.analyze_error:
        print(f"  {'':<22} ANALYZE runs (autoanalyze stand-in): "
              f"{', '.join(f'{k} {v}' for k, v in sorted(p.analyzed.items())) or 'none'}"
              + (f"; error: {p.analyze_error}" if p.analyze_error else ""))
    for e in p.errors:
        print(f"  {'':<22} error: {e}")
    for e in p.retried:
        print(f"  {'':<22} retried: {e}")


def print_stats(phase: Phase) -> None:
    print(f"  pg_stat_user_tables ({phase.name}):")
    print(f"    {'table':<10} {'after':<8} {'n_live':>10} {'n_dead':>10} {'dead %':>8} "
          f"{'+ins':>10} {'+upd':>10} {'+hot':>10} {'+del':>6} {'+dead':>10}")
    for t in TABLES:
        for tag, before, after in (("pass 1", phase.s0, phase.s1), ("replay", phase.s1r, phase.s2)):
            a, b = after.get(t, {}), before.get(t, {})
            d = {k: a.get(k, 0) - b.get(k, 0) for k in STAT_COLS}
            print(f"    {t:<10} {tag:<8} {a.get('n_live_tup', 0):>10,} {a.get('n_dead_tup', 0):>10,} "
                  f"{_dead_pct(a.get('n_dead_tup', 0), a.get('n_live_tup', 0)):>7.2f}% "
                  f"{d['n_tup_ins']:>10,} {d['n_tup_upd']:>10,} {d['n_tup_hot_upd']:>10,} "
                  f"{d['n_tup_del']:>6,} {d['n_dead_tup']:>10,}")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events in the corpus (default 1,000,000)")
    ap.add_argument("--users", type=int, default=10_000, help="distinct users (default 10,000)")
    ap.add_argument("--batch", type=int, default=50, help="events a request / transaction (default 50)")
    ap.add_argument("--dup-rate", type=float, default=0.10, help="share of events repeating an earlier key (0.10)")
    ap.add_argument("--clients", type=int, default=4, help="client processes driving the service (default 4)")
    ap.add_argument("--seed", type=int, default=20261122, help="corpus seed")
    ap.add_argument("--pass-timeout", type=float, default=600.0,
                    help="seconds of a system's pass after which it takes no new batches (default 600)")
    ap.add_argument("--rounds", type=int, default=10,
                    help="segments a pass is cut into, baseline and service taking turns (default 10)")
    ap.add_argument("--autoanalyze", choices=("auto", "on", "off"), default="auto",
                    help="ANALYZE tables during the passes at autovacuum's default thresholds "
                         "(see AutoAnalyzer); auto = when the server's autovacuum is off (default)")
    ap.add_argument("--skip-baseline", action="store_true", help="measure the service only")
    ap.add_argument("--skip-service", action="store_true", help="measure the baseline only")
    ap.add_argument("--py-spy", metavar="DIR",
                    help="record the gunicorn workers with py-spy (raw collapsed stacks) during the "
                         "service's first pass into DIR (py-spy must be installed; it costs CPU)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    args = ap.parse_args(argv)
    if (args.events < args.batch or not 1 <= args.batch <= 100 or not 0 <= args.dup_rate < 1
            or args.clients < 1 or args.rounds < 1):
        ap.error("need --events >= --batch, 1 <= --batch <= 100, 0 <= --dup-rate < 1, --clients >= 1, "
                 "--rounds >= 1")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    t_start = time.monotonic()
    env = Environment()
    status = 0
    spies: list[subprocess.Popen] = []
    try:
        from cs_daemon.plans import plan

        anchor = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
        t = time.monotonic()
        corpus = make_corpus(args.events, args.users, args.batch, args.dup_rate, args.seed, anchor)
        warm = make_corpus(40 * args.batch, 200, args.batch, args.dup_rate, args.seed + 1, anchor, "warm")
        unique_keys = len(set(corpus.keys))
        distinct_users = len(set(corpus.users))
        body_bytes = sum(len(b) for b in corpus.bodies)
        print(f"corpus: {corpus.n_events:,} events, {corpus.n_batches:,} batches of {args.batch}, "
              f"{distinct_users:,} users, {unique_keys:,} unique keys, {corpus.duplicates:,} repeats "
              f"({100.0 * corpus.duplicates / corpus.n_events:.1f}%; {corpus.duplicates_in_batch:,} within "
              f"their batch), {body_bytes / corpus.n_batches / 1024:.1f} KiB a body; "
              f"built in {time.monotonic() - t:.1f} s", file=sys.stderr)

        limit = plan(PLAN).requests_per_minute
        # A key never exceeding the limit in total can never exceed it within a minute.
        keys_needed = max(1, math.ceil(2 * corpus.n_batches * 1.05 / (limit * 0.9)))
        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            pg_version = conn.execute("SHOW server_version").fetchone()[0]
            autovacuum = conn.execute("SHOW autovacuum").fetchone()[0]
            sync_commit = conn.execute("SHOW synchronous_commit").fetchone()[0]
        autoanalyze = args.autoanalyze == "on" or (args.autoanalyze == "auto" and autovacuum == "off")
        phases: dict[str, Phase] = {}
        systems: list[System] = []

        # setup: both databases, the tenants, the server; warm-ups
        if not args.skip_baseline:
            env.create_database("baseline")
            tk_b = env.create_tenants("baseline", 1)
            ci_b = env.conninfo("baseline")
            systems.append(System("baseline", ci_b, tk_b.tenant_id, _baseline_worker, BASELINE_PROCESSES,
                                  {"corpus": corpus, "tenant_id": tk_b.tenant_id, "conninfo": ci_b}))
        server = None
        if not args.skip_service:
            env.create_database("service")
            tk_s = env.create_tenants("service", keys_needed)
            ci_s = env.conninfo("service")
        from cs_daemon.db import dispose_engines

        dispose_engines()
        print(f"databases {', '.join(env.dbs[w] for w in sorted(env.created))}; Redis prefix {env.prefix}",
              file=sys.stderr)
        if not args.skip_baseline:
            w = run_pass(env, "baseline warm-up", _baseline_worker,
                         {"corpus": warm, "tenant_id": tk_b.warm_tenant_id, "conninfo": ci_b},
                         split(warm.n_batches, BASELINE_PROCESSES), 120)
            _report_warmup(w)
        if not args.skip_service:
            server = env.start_server()
            env.wait_ready()
            # a first request: production mode and plan show in the rate-limit header
            conn = http.client.HTTPConnection(HOST, server.port, timeout=30)
            conn.request("POST", "/api/track", body=warm.bodies[0],
                         headers={"Authorization": f"Bearer {tk_s.warm_key}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            if resp.status != 200:
                raise BenchError(f"warm-up request: HTTP {resp.status}: {data[:300]!r}\n{server.log_tail()}")
            if resp.getheader("X-RateLimit-Limit") != str(limit):
                raise BenchError(f"expected X-RateLimit-Limit {limit} (production mode, plan {PLAN}), got "
                                 f"{resp.getheader('X-RateLimit-Limit')!r}")
            warm_headers = [{"Authorization": f"Bearer {tk_s.warm_key}", "Content-Type": "application/json"}]
            w = run_pass(env, "service warm-up", _service_worker,
                         {"corpus": warm, "headers": warm_headers, "port": server.port},
                         split(warm.n_batches, args.clients), 120)
            _report_warmup(w)
            headers = [{"Authorization": f"Bearer {k}", "Content-Type": "application/json"} for k in tk_s.keys]
            systems.append(System("service", ci_s, tk_s.tenant_id, _service_worker, args.clients,
                                  {"corpus": corpus, "headers": headers, "port": server.port}))
            wait_until(time.monotonic() + STATS_IDLE_WAIT)  # the workers' warm-up statistics

        s0 = {sy.name: read_stats(sy.conninfo) for sy in systems}
        everything = list(range(corpus.n_batches))
        if args.py_spy and server is not None:
            out = Path(args.py_spy)
            out.mkdir(parents=True, exist_ok=True)
            for pid in env.worker_pids():
                spies.append(subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--format",
                     "raw", "--rate", "50", "--output", str(out / f"worker-{pid}.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.0)
        p1 = run_interleaved(env, systems, "pass 1", {sy.name: everything for sy in systems},
                             args.rounds, args.pass_timeout, autoanalyze)
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
        spies.clear()
        check_server(server, "pass 1")
        wait_until(time.monotonic() + (STATS_IDLE_WAIT if server is not None else 0.5))
        s1 = {sy.name: read_stats(sy.conninfo) for sy in systems}
        s1r = {sy.name: catch_up(sy.conninfo, autoanalyze, s1[sy.name]) for sy in systems}
        p2 = run_interleaved(env, systems, "replay", {sy.name: p1[sy.name].done_ids for sy in systems},
                             args.rounds, args.pass_timeout, autoanalyze)
        check_server(server, "the replay")
        wait_until(time.monotonic() + (STATS_IDLE_WAIT if server is not None else 0.5))
        for sy in systems:
            s2 = read_stats(sy.conninfo)
            phases[sy.name] = Phase(sy.name, p1[sy.name], p2[sy.name], s0[sy.name], s1[sy.name],
                                    s1r[sy.name], s2, counts(sy.conninfo, sy.tenant_id),
                                    server.log_errors() if sy.name == "service" and server else [])

        # --- report ---------------------------------------------------------------------
        print()
        print("Ingest throughput: POST /api/track (gunicorn) vs raw psycopg baseline")
        print(f"  PostgreSQL {pg_version} (autovacuum={autovacuum}, synchronous_commit={sync_commit}), "
              f"{os.cpu_count()} CPU(s), 127.0.0.1")
        print(f"  corpus: {corpus.n_events:,} events, {distinct_users:,} users, {corpus.n_batches:,} batches "
              f"of {args.batch}, {corpus.duplicates:,} repeated keys ({100.0 * corpus.duplicates / corpus.n_events:.1f}%, "
              f"{corpus.duplicates_in_batch:,} within their batch), {unique_keys:,} unique; seed {args.seed}")
        print(f"  service: gunicorn {WORKERS} sync workers, {args.clients} client processes (http.client, "
              f"pre-serialised bodies), plan {PLAN}, {keys_needed} API key(s) rotated")
        print(f"  baseline: {BASELINE_PROCESSES} processes, raw psycopg, one transaction a batch")
        print(f"  planner statistics: " + (
            "ANALYZE at autovacuum's default thresholds during the passes (the server's autovacuum is "
            f"{autovacuum}; no VACUUM is run)" if autoanalyze else
            f"none run by the bench (server autovacuum={autovacuum})"))
        print()
        for name in ("baseline", "service"):
            ph = phases.get(name)
            if ph is None:
                continue
            print_pass(ph.p1)
            print_pass(ph.p2)
            print(f"  {'':<22} rows of the tenant: events={ph.rows['events']:,} customers={ph.rows['customers']:,}"
                  f" outbox_events={ph.rows['outbox_events']:,}")
            for e in ph.server_errors:
                print(f"  {'':<22} gunicorn log: {e}")
            print_stats(ph)
            print()
        problems = []
        for name, ph in phases.items():
            if ph.p1.complete and ph.rows["events"] != unique_keys:
                problems.append(f"{name}: {ph.rows['events']:,} events stored, {unique_keys:,} expected")
            if ph.p1.complete and ph.rows["customers"] != distinct_users:
                problems.append(f"{name}: {ph.rows['customers']:,} customers, {distinct_users:,} expected")
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
        for name, ph in phases.items():
            speed = ph.p2.eps / ph.p1.eps
            ok = speed >= 1.0
            if name == "service":
                missed |= not ok
            dead = replay_dead(ph)
            parts = []
            for t in TABLES:
                d, live, pct = dead[t]
                good = pct < 100 * DEAD_GOAL
                if name == "service":
                    missed |= not good
                parts.append(f"{t} +{d:,} ({pct:.3f}% of {live:,} rows)")
            after = ", ".join(f"{t} {_dead_pct(ph.s2[t]['n_dead_tup'], ph.s2[t]['n_live_tup']):.1f}%"
                              for t in TABLES if t in ph.s2)
            print(f"  {name}: replay / first pass = {speed:.2f}x ({'met' if ok else 'NOT met'}: >= 1.0); "
                  f"dead tuples caused by the replay: {'; '.join(parts)} "
                  f"({'met' if all(v[2] < 100 * DEAD_GOAL for v in dead.values()) else 'NOT met'}: < 1%); "
                  f"dead/live after the replay, all passes: {after}")
        incomplete = [ph.p1.label for ph in phases.values() if not ph.p1.complete]
        if incomplete:
            print(f"  note: {', '.join(incomplete)} stopped at --pass-timeout; figures are over the part done")
        print(f"  total run {time.monotonic() - t_start:.1f} s")
        if args.strict and missed:
            status = 1
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        status = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the teardown finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for spy in spies:
            if spy.poll() is None:
                spy.kill()
        problems = env.teardown()
        for p in problems:
            print(f"teardown: {p}", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return status


if __name__ == "__main__":
    sys.exit(main())
