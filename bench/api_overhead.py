"""How much the API layer costs: GET /api/settings against a bare Flask + psycopg route.

    .venv/bin/python bench/api_overhead.py            # or: just bench

By itself, with no arguments, it
  1. creates a fresh PostgreSQL database (unique name), migrates it, and makes a tenant on
     the "scale" plan (30,000 requests a minute a key) with its admin key, through
     cs_daemon.tenants.service.create; more keys when the request count needs them;
  2. starts two gunicorns, 2 sync workers each, on 127.0.0.1: the real app
     (webapp.wsgi:app, production mode: DATABASE_URL + REDIS_URL, a unique CS_REDIS_PREFIX
     and CS_SECRET_KEY) and bench/bare_app.py (one raw psycopg query a request);
  3. drives both with the same sequential client (requests.Session) - warm-up first, then
     the measured requests interleaved in rounds so drift hits both alike - and prints
     p50/p95/p99 latency, throughput and the p50 ratio (ours / bare; goal <= 2.0);
  4. tears everything down (gunicorns, database, Redis keys of the prefix), also on error
     or Ctrl-C.

Exit status: 0 when the measurement ran (whatever the ratio; --strict makes a missed
goal exit 1), 2 when setup or a request failed. CS_TEST_PG / CS_TEST_REDIS say where
PostgreSQL and Redis are (as for the tests)."""

from __future__ import annotations

import argparse
import math
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PG = os.environ.get("CS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("CS_TEST_REDIS", "redis://127.0.0.1:6379/0")
HOST = "127.0.0.1"
GOAL = 2.0
WORKERS = 2
PLAN = "scale"


class BenchError(Exception):
    pass


def _conninfo(dbname: str) -> str:
    return PG.replace("postgresql+psycopg://", "postgresql://") + f"/{dbname}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _no_control_socket() -> list[str]:
    """gunicorn >= 27 opens a control socket at one fixed path under ~/.gunicorn by default;
    the two servers of this run (and any other gunicorn on the machine) would share it."""
    from gunicorn import config

    names = {setting.name for setting in config.KNOWN_SETTINGS}
    return ["--no-control-socket"] if "control_socket_disable" in names else []


# --- the environment: database, tenant, keys, gunicorns ---------------------------


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    port: int
    log: Path

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Environment:
    """Everything the run creates, and its teardown (safe to call at any stage)."""

    def __init__(self):
        self.dbname = f"cs_bench_{uuid.uuid4().hex[:10]}"
        self.prefix = f"csbench-{uuid.uuid4().hex[:8]}"
        self.secret = secrets.token_hex(32)
        self.db_url = f"{PG}/{self.dbname}"
        self.tmp = Path(tempfile.mkdtemp(prefix="cs-bench-"))
        self.db_created = False
        self.servers: list[Server] = []
        self.keys: list[str] = []
        self.tenant_id: str | None = None
        self.torn_down = False

    # setup

    def create_database(self) -> None:
        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.db_created = True
        from cs_daemon import migrate
        from cs_daemon.config import Settings

        migrate.upgrade(Settings(database_url=self.db_url, redis_url=None, cs_secret_key=self.secret,
                                 cs_data_dir=self.tmp))

    def create_tenant(self, keys_needed: int) -> None:
        from cs_daemon.auth import service as auth
        from cs_daemon.config import Settings
        from cs_daemon.runtime import Runtime
        from cs_daemon.tenants import service as tenants

        rt = Runtime(Settings(database_url=self.db_url, redis_url=REDIS, cs_redis_prefix=self.prefix,
                              cs_secret_key=self.secret, cs_data_dir=self.tmp))
        with rt.session() as s:
            made = tenants.create(s, name="Bench", owner_email="owner@bench.example", now=rt.now(),
                                  plan_tier=PLAN)
        self.tenant_id = made.tenant.id
        self.keys = [made.key.secret]
        for i in range(1, keys_needed):
            with rt.session(self.tenant_id) as s:
                self.keys.append(auth.issue(s, self.tenant_id, role="admin", permissions=["full"],
                                            now=rt.now(), label=f"bench-{i}").secret)

    def _child_env(self) -> dict[str, str]:
        from cs_daemon.config import Settings

        # No setting of the caller's shell may leak into the servers.
        ours = {name.upper() for name in Settings.model_fields}
        env = {k: v for k, v in os.environ.items() if k.upper() not in ours}
        env.update({
            "DATABASE_URL": self.db_url,
            "REDIS_URL": REDIS,
            "CS_REDIS_PREFIX": self.prefix,
            "CS_SECRET_KEY": self.secret,
            "CS_DATA_DIR": str(self.tmp / "data"),
            "BENCH_PG_CONNINFO": _conninfo(self.dbname),
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def start(self, name: str, app: str, pythonpath: Path) -> Server:
        port = _free_port()
        log = self.tmp / f"{name}.log"
        argv = [sys.executable, "-m", "gunicorn", app, "--workers", str(WORKERS),
                "--bind", f"{HOST}:{port}", "--pythonpath", str(pythonpath),
                "--graceful-timeout", "5", *_no_control_socket()]
        with open(log, "wb") as fh:
            # cwd is the temp dir so a .env file in the checkout cannot change the settings
            proc = subprocess.Popen(argv, cwd=self.tmp, env=self._child_env(), stdout=fh,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        server = Server(name, proc, port, log)
        self.servers.append(server)
        return server

    def wait_ready(self, server: Server, path: str, headers: dict, timeout: float = 30.0) -> requests.Response:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise BenchError(f"{server.name} gunicorn exited with {server.proc.returncode}:\n"
                                 f"{server.log_tail()}")
            try:
                resp = requests.get(server.url(path), headers=headers, timeout=5)
                if resp.status_code == 200:
                    return resp
                last = f"HTTP {resp.status_code}: {resp.text[:300]}"
            except requests.RequestException as exc:
                last = str(exc)
            time.sleep(0.1)
        raise BenchError(f"{server.name} not ready after {timeout:.0f} s ({last}):\n{server.log_tail()}")

    # teardown

    def teardown(self) -> list[str]:
        if self.torn_down:
            return []
        self.torn_down = True
        problems: list[str] = []
        done: list[str] = []
        if self.servers:
            done.append(f"{len(self.servers)} gunicorns stopped")
        for server in self.servers:
            proc = server.proc
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)  # its own session: gunicorn + its workers
                except ProcessLookupError:
                    pass
        for server in self.servers:
            proc = server.proc
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                problems.append(f"{server.name} gunicorn did not stop on SIGTERM; killed")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        self.servers.clear()
        try:
            from cs_daemon.db import dispose_engines

            dispose_engines()
        except Exception as exc:  # pragma: no cover - best effort
            problems.append(f"disposing engines: {exc}")
        if self.db_created:
            try:
                with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
                self.db_created = False
                done.append(f"database {self.dbname} dropped")
            except Exception as exc:
                problems.append(f"dropping database {self.dbname}: {exc}")
        try:
            client = redis.Redis.from_url(REDIS, socket_timeout=5)
            batch = list(client.scan_iter(f"{self.prefix}:*", count=1000))
            if batch:
                client.delete(*batch)
            client.close()
            done.append(f"{len(batch)} Redis keys deleted")
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


# --- load generator -----------------------------------------------------------------


@dataclass
class Target:
    label: str
    url: str
    headers: list[dict]  # rotated request by request (one per API key)
    latencies: list[float]
    wall: float = 0.0
    count: int = 0


def drive(session: requests.Session, target: Target, n: int, record: bool) -> None:
    """n sequential GETs; each latency is request sent -> whole body read."""
    headers = target.headers
    nh = len(headers)
    perf = time.perf_counter
    lat = target.latencies
    start = perf()
    for i in range(n):
        t0 = perf()
        resp = session.get(target.url, headers=headers[(target.count + i) % nh], timeout=10)
        _ = resp.content
        t1 = perf()
        if resp.status_code != 200:
            raise BenchError(f"{target.label}: HTTP {resp.status_code}: {resp.text[:300]}")
        if record:
            lat.append(t1 - t0)
    elapsed = perf() - start
    target.count += n
    if record:
        target.wall += elapsed


def summarize(target: Target) -> dict:
    ms = [x * 1000 for x in target.latencies]
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50": statistics.median(ms), "p95": q[94], "p99": q[98], "mean": statistics.fmean(ms),
            "rps": len(ms) / target.wall if target.wall else float("nan"), "n": len(ms)}


# --- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="measured requests per target (default 3000)")
    ap.add_argument("--warmup", type=int, default=300, help="warm-up requests per target (default 300)")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    ap.add_argument("--budget", type=float, default=100.0,
                    help="seconds for the whole run: rounds that would end later are skipped (default 100)")
    ap.add_argument("--keys", type=int, default=1,
                    help="API keys to rotate at least (more are issued when the request count needs them)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the p50 ratio misses the goal")
    args = ap.parse_args(argv)
    if args.requests < 100 or args.rounds < 1 or args.warmup < 0 or not 1 <= args.keys <= 100:
        ap.error("--requests must be >= 100, --rounds >= 1, --warmup >= 0, --keys 1..100")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    env = Environment()
    t_start = time.monotonic()
    status = 0
    try:
        from cs_daemon.plans import plan

        limit = plan(PLAN).requests_per_minute
        total_ours = args.warmup + args.requests + 1
        # A key never exceeding the limit in total can never exceed it within a minute.
        keys_needed = max(1, args.keys, math.ceil(total_ours / (limit * 0.9)))

        print(f"setting up: database {env.dbname}, Redis prefix {env.prefix}", file=sys.stderr)
        env.create_database()
        env.create_tenant(keys_needed)
        ours_srv = env.start("api", "webapp.wsgi:app", ROOT)
        bare_srv = env.start("bare", "bare_app:app", BENCH)
        auth_headers = [{"Authorization": f"Bearer {k}"} for k in env.keys]
        first = env.wait_ready(ours_srv, "/api/settings", auth_headers[0])
        env.wait_ready(bare_srv, "/bare", {})
        if first.headers.get("X-RateLimit-Limit") != str(limit):
            raise BenchError(f"expected X-RateLimit-Limit {limit} (production mode, plan {PLAN}), got "
                             f"{first.headers.get('X-RateLimit-Limit')!r}")
        n_keys_listed = len(first.json()["api_keys"])
        print(f"servers up after {time.monotonic() - t_start:.1f} s; warming up", file=sys.stderr)

        ours = Target("GET /api/settings", ours_srv.url("/api/settings"), auth_headers, [])
        bare = Target("GET /bare", bare_srv.url("/bare"), [{}], [])
        session = requests.Session()  # keep-alive where the server allows it (sync workers close)
        per_round = math.ceil(args.requests / args.rounds)
        # warm-up, interleaved (both workers of each gunicorn get their connections and imports)
        half = args.warmup // 2
        for n in (half, args.warmup - half):
            drive(session, bare, n, record=False)
            drive(session, ours, n, record=False)
        load_before = os.getloadavg()[0]
        done_rounds = 0
        for r in range(args.rounds):
            n = min(per_round, args.requests - r * per_round)
            if n <= 0:
                break
            t_round = time.monotonic()
            # alternate which goes first so neither always follows the other
            for t in ((bare, ours) if r % 2 == 0 else (ours, bare)):
                drive(session, t, n, record=True)
            done_rounds += 1
            now = time.monotonic()
            if r + 1 < args.rounds and now + (now - t_round) - t_start > args.budget:
                print(f"time budget of {args.budget:.0f} s: stopping after round {r + 1} of {args.rounds}",
                      file=sys.stderr)
                break
        load_after = os.getloadavg()[0]
        session.close()
        for srv in (ours_srv, bare_srv):
            if srv.proc.poll() is not None:
                raise BenchError(f"{srv.name} gunicorn died during the run:\n{srv.log_tail()}")

        s_ours, s_bare = summarize(ours), summarize(bare)
        ratio = s_ours["p50"] / s_bare["p50"]
        print()
        print("API overhead: GET /api/settings vs a bare Flask route doing one raw psycopg query")
        print(f"  gunicorn {WORKERS} sync workers each, 127.0.0.1; one sequential client (requests.Session); "
              f"{s_ours['n']} measured requests per target after {args.warmup} warm-up, "
              f"interleaved in {done_rounds} rounds")
        print(f"  tenant plan {PLAN} ({limit}/min a key), {len(env.keys)} key(s) rotated, "
              f"{n_keys_listed} key(s) listed in the response")
        print()
        print(f"  {'endpoint':<20} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'req/s':>8}")
        for label, s in (("GET /api/settings", s_ours), ("GET /bare", s_bare)):
            print(f"  {label:<20} {s['p50']:>8.2f} {s['p95']:>8.2f} {s['p99']:>8.2f} {s['mean']:>8.2f} "
                  f"{s['rps']:>8.0f}")
        print()
        verdict = "met" if ratio <= GOAL else "NOT met"
        print(f"  p50 ratio (ours / bare): {ratio:.2f}   goal: <= {GOAL:.1f} ({verdict})")
        print(f"  p50 overhead of the API layer: {s_ours['p50'] - s_bare['p50']:.2f} ms a request")
        cpus = os.cpu_count() or 1
        print(f"  total run {time.monotonic() - t_start:.1f} s; load average {load_before:.1f} -> "
              f"{load_after:.1f} on {cpus} CPUs")
        if max(load_before, load_after) > cpus * 0.75:
            print("  NOTE: the machine was busy with other work; latencies are inflated and the ratio is "
                  "less reliable - rerun on a quiet machine")
        if args.strict and ratio > GOAL:
            status = 1
    except (BenchError, requests.RequestException, psycopg.Error, redis.RedisError) as exc:
        print(f"bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the teardown finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        problems = env.teardown()
        for p in problems:
            print(f"teardown: {p}", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return status


if __name__ == "__main__":
    sys.exit(main())
