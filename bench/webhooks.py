"""Webhook throughput: signed deliveries/s through the jobs against a plain signing script.

    .venv/bin/python bench/webhooks.py                      # 5,000 deliveries, 1 process x 8 threads
    .venv/bin/python bench/webhooks.py --deliveries 1000    # a quick run
    .venv/bin/python bench/webhooks.py --py-spy /tmp/w.txt  # + a py-spy profile of the worker

By itself it
  1. creates a fresh PostgreSQL database (unique name), migrates it with
     cs_daemon.migrate.upgrade, makes a tenant on the "growth" plan and one webhook
     endpoint (all event types) pointing at a loopback receiver;
  2. starts the receiver (bench/webhook_receiver.py: one asyncio process answering
     200 at once, counting POSTs and distinct webhook-ids) on 127.0.0.1;
  3. starts `cs worker --processes P --threads T` (production mode: DATABASE_URL,
     REDIS_URL with a unique CS_REDIS_PREFIX, CS_SECRET_KEY, ALLOW_PRIVATE_WEBHOOK_URLS=1)
     and, once it beats, delivers a warm-up batch;
  4. measures in --rounds interleaved rounds (the order alternating, so drift of a busy
     machine hits both alike), each on its share of the N deliveries:
       baseline (bench/webhooks_baseline.py, a process of its own): P x T threads, one
       shared requests.Session, HMAC-SHA256 signing (both signature headers) and POSTing
       of the very bodies the deliveries carry;
       service: that many outbox events recorded in one transaction (one delivery each,
       fanned out in that transaction, enqueued on Redis at commit); the clock runs from
       the commit until the database counts them all delivered (polled every 50 ms), so
       it includes the enqueueing;
  5. prints both rates, the ratio (service / baseline; goal >= 0.5), what the receiver
     got (duplicates), the sweeps during the measurement, PostgreSQL sessions opened
     and CPU seconds by process family (from /proc);
  6. tears everything down (worker tree, receiver, database, Redis keys of the prefix),
     also on error or Ctrl-C.

--py-spy FILE attaches py-spy to the worker for the service rounds (raw collapsed stacks;
--gil to keep only the samples of the thread holding the GIL). bench/profile_delivery.py
breaks one attempt down in process.

Exit status: 0 when the measurement ran (--strict: 1 when the goal is missed), 2 when
setup or a delivery failed. CS_TEST_PG / CS_TEST_REDIS say where PostgreSQL and Redis are.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.processes import (  # noqa: E402
    CS, Deadline, Service, Tree, descendants, processes, service_env,
)

PG = os.environ.get("CS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("CS_TEST_REDIS", "redis://127.0.0.1:6379/0")
HOST = "127.0.0.1"
GOAL = 0.5
EVENT = "user.risk_changed"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# The sweep's log line as cs formats it (Dramatiq's own handler repeats it in its format).
SWEPT = re.compile(r"^\S+ \S+ INFO cs_daemon\.delivery\.actors: re-enqueued (\d+) due deliveries", re.M)


class BenchError(Exception):
    pass


def _conninfo(dbname: str) -> str:
    return PG.replace("postgresql+psycopg://", "postgresql://") + f"/{dbname}"


def payload(i: int) -> dict:
    return {"user_id": f"user-{i:06d}", "previous_risk": "low", "new_risk": "high",
            "changed_at": "2026-11-02T09:30:00Z", "score": 37 + i % 50,
            "reasons": ["login_drop", "support_tickets"]}


# --- CPU accounting from /proc --------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLK_TCK


def families(worker_root: int | None, receiver_pid: int | None, dbname: str) -> dict[str, list[int]]:
    table = processes()
    fam: dict[str, list[int]] = {"worker": [], "postgres": [], "redis": [], "receiver": [], "bench": [os.getpid()]}
    if worker_root is not None:
        fam["worker"] = [worker_root] + [p.pid for p in descendants(worker_root, table)]
    if receiver_pid is not None:
        fam["receiver"] = [receiver_pid]
    for p in table.values():
        name = p.cmdline.split(" ", 1)[0].rsplit("/", 1)[-1]
        if name.startswith("postgres") and f" {dbname} " in p.cmdline:  # our database's backends only
            fam["postgres"].append(p.pid)
        elif name.startswith("redis-server"):
            fam["redis"].append(p.pid)
    return fam


class CpuMeter:
    """CPU seconds by process family over an interval (processes that exit during the
    interval are not counted: none should)."""

    def __init__(self, worker_root: int | None, receiver_pid: int | None, dbname: str):
        self.dbname = dbname
        self.fam = families(worker_root, receiver_pid, dbname)
        self.start = {k: cpu_seconds(v) for k, v in self.fam.items()}

    def stop(self) -> dict[str, float]:
        # postgres backends may have started during the interval (new pooled connections)
        now = families(None, None, self.dbname)
        self.fam["postgres"] = sorted(set(self.fam["postgres"]) | set(now["postgres"]))
        return {k: cpu_seconds(v) - self.start.get(k, 0.0) for k, v in self.fam.items()}


# --- the environment ------------------------------------------------------------------


class Environment:
    def __init__(self, processes_: int, threads: int):
        self.dbname = f"cs_bench_{uuid.uuid4().hex[:10]}"
        self.prefix = f"csbench-{uuid.uuid4().hex[:8]}"
        self.secret_key = secrets.token_hex(32)
        self.db_url = f"{PG}/{self.dbname}"
        self.tmp = Path(tempfile.mkdtemp(prefix="cs-bench-webhooks-"))
        self.processes = processes_
        self.threads = threads
        self.db_created = False
        self.receiver: subprocess.Popen | None = None
        self.receiver_url = ""
        self.worker: Tree | None = None
        self.profiler: subprocess.Popen | None = None
        self.rt = None
        self.tenant_id = ""
        self.endpoint_secret = ""

    # setup

    def create_database(self) -> None:
        from cs_daemon import migrate
        from cs_daemon.config import Settings

        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.db_created = True
        self.settings = Settings(database_url=self.db_url, redis_url=REDIS, cs_redis_prefix=self.prefix,
                                 cs_secret_key=self.secret_key, cs_data_dir=self.tmp / "data",
                                 allow_private_webhook_urls=True)
        migrate.upgrade(self.settings)

    def start_receiver(self) -> None:
        self.receiver = subprocess.Popen([sys.executable, str(BENCH / "webhook_receiver.py")], cwd=self.tmp,
                                         stdout=subprocess.PIPE, stderr=open(self.tmp / "receiver.err", "wb"),
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        line = self.receiver.stdout.readline().decode()
        m = re.search(r"listening on (\S+)", line)
        if not m:
            raise BenchError(f"receiver did not start: {line!r} {(self.tmp / 'receiver.err').read_text()}")
        self.receiver_url = f"http://{m.group(1)}"

    def receiver_stats(self) -> dict:
        return requests.get(f"{self.receiver_url}/stats", timeout=5).json()

    def create_tenant(self) -> None:
        from cs_daemon.runtime import Runtime
        from cs_daemon.tenants import service as tenants
        from cs_daemon.webhooks import service as webhooks

        self.rt = Runtime(self.settings)
        self.rt.install_broker()  # deliveries are enqueued on Redis at commit
        with self.rt.session() as s:
            self.tenant_id = tenants.create(s, name="Bench", owner_email="owner@bench.example",
                                            now=self.rt.now(), plan_tier="growth").tenant.id
        with self.rt.session(self.tenant_id) as s:
            _, self.endpoint_secret = webhooks.register(
                s, self.tenant_id, url=f"{self.receiver_url}/hook", description="bench", events=None,
                now=self.rt.now(), secret_key=self.secret_key, allow_private=True)

    def start_worker(self) -> Tree:
        env = service_env(DATABASE_URL=self.db_url, REDIS_URL=REDIS, CS_REDIS_PREFIX=self.prefix,
                          CS_SECRET_KEY=self.secret_key, ALLOW_PRIVATE_WEBHOOK_URLS="1",
                          CS_DATA_DIR=str(self.tmp / "data"), CS_LOG_LEVEL="INFO", PYTHONUNBUFFERED="1")
        svc = Service([CS, "worker", "--processes", str(self.processes), "--threads", str(self.threads)],
                      env=env, cwd=self.tmp, log=self.tmp / "worker.err", new_session=True)
        self.worker = Tree(svc)
        from cs_daemon.jobs.heartbeat import last_beat_age

        deadline = Deadline(60)
        while last_beat_age(self.rt.cache) is None:
            if svc.proc.poll() is not None or not deadline:
                raise BenchError(f"cs worker did not start:\n{svc.describe()}")
            time.sleep(0.05)
        self.worker.record()
        return self.worker

    def start_profiler(self, out: Path, gil: bool) -> None:
        exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
        if exe is None:
            raise BenchError("py-spy not found (pip install py-spy into .venv)")
        argv = [exe, "record", "--pid", str(self.worker.root.pid), "--subprocesses", "--rate", "200",
                "--format", "raw", "--output", str(out), "--nonblocking"] + (["--gil"] if gil else [])
        self.profiler = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(self.tmp / "py-spy.err", "wb"),
                                         start_new_session=True)
        time.sleep(1.0)  # attach before the clock starts
        if self.profiler.poll() is not None:
            raise BenchError(f"py-spy failed: {(self.tmp / 'py-spy.err').read_text()}")

    def stop_profiler(self) -> None:
        if self.profiler is not None and self.profiler.poll() is None:
            self.profiler.send_signal(signal.SIGINT)
            try:
                self.profiler.wait(30)
            except subprocess.TimeoutExpired:
                self.profiler.kill()
        self.profiler = None

    def worker_log(self) -> str:
        try:
            return (self.tmp / "worker.err").read_text(errors="replace")
        except OSError:
            return ""

    # teardown

    def teardown(self) -> None:
        done, problems = [], []
        self.stop_profiler()
        if self.worker is not None:
            tree, self.worker = self.worker, None
            tree.record()
            tree.root.signal(signal.SIGTERM)  # graceful first; then whatever is left is killed
            try:
                tree.root.wait(15)
            except subprocess.TimeoutExpired:
                problems.append("cs worker did not stop on SIGTERM; killed")
            tree.kill()
            done.append("worker stopped")
        if self.receiver is not None:
            try:
                os.killpg(self.receiver.pid, signal.SIGTERM)
                self.receiver.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.receiver.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.receiver = None
            done.append("receiver stopped")
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
            keys = list(client.scan_iter(f"{self.prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()
            done.append(f"{len(keys)} Redis keys deleted")
        except Exception as exc:
            problems.append(f"deleting Redis keys {self.prefix}:*: {exc}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        print(f"teardown: {', '.join(done) or 'nothing to undo'}", file=sys.stderr)
        for p in problems:
            print(f"teardown problem: {p}", file=sys.stderr)


# --- the two sides --------------------------------------------------------------------


def run_baseline(env: Environment, bodies: list[str], threads: int, warmup: int) -> dict:
    spec = {"url": f"{env.receiver_url}/hook", "secret": env.endpoint_secret, "threads": threads,
            "warmup": warmup,
            "items": [{"id": str(uuid.uuid4()), "event_id": str(uuid.uuid4()), "body": b} for b in bodies]}
    path = env.tmp / "baseline.json"
    path.write_text(json.dumps(spec))
    before = env.receiver_stats()
    done = subprocess.run([sys.executable, str(BENCH / "webhooks_baseline.py"), str(path)], cwd=env.tmp,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise BenchError(f"baseline failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["errors"]:
        raise BenchError(f"baseline: {result['errors']} POSTs failed")
    after = env.receiver_stats()
    if after["posts"] - before["posts"] != len(bodies) + warmup:
        raise BenchError(f"baseline: the receiver got {after['posts'] - before['posts']} POSTs, "
                         f"expected {len(bodies) + warmup}")
    return result


def record_events(env: Environment, events: list[tuple[str, dict]]) -> tuple[float, float]:
    """Record the events in one transaction; returns (commit started, enqueue done) on
    the perf_counter clock. The deliveries are enqueued by the commit callbacks."""
    from cs_daemon.outbox import service as outbox

    with env.rt.session(env.tenant_id) as s:
        outbox.record_many(s, env.tenant_id, events, now=env.rt.now())
        s.flush()
        t0 = time.perf_counter()
    return t0, time.perf_counter()


def wait_delivered(env: Environment, conn: psycopg.Connection, total: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while True:
        n = conn.execute("SELECT count(*) FROM deliveries WHERE status = 'delivered'").fetchone()[0]
        if n >= total:
            return time.perf_counter()
        if env.worker.root.proc.poll() is not None:
            raise BenchError(f"cs worker exited:\n{env.worker.root.describe()}")
        if time.monotonic() > deadline:
            other = conn.execute("SELECT status, count(*) FROM deliveries GROUP BY status").fetchall()
            raise BenchError(f"only {n}/{total} delivered after {timeout:.0f} s ({other})\n"
                             f"{env.worker_log()[-3000:]}")
        time.sleep(0.05)


def start_service(env: Environment, warmup: int) -> None:
    env.start_worker()
    if warmup:
        with psycopg.connect(_conninfo(env.dbname), autocommit=True) as conn:
            record_events(env, [(EVENT, payload(-1 - i)) for i in range(warmup)])
            wait_delivered(env, conn, warmup, 120)


def run_service(env: Environment, first: int, n: int) -> dict:
    """Deliver events first..first+n-1 (their bodies are the baseline's) and time it."""
    with psycopg.connect(_conninfo(env.dbname), autocommit=True) as conn:
        already = conn.execute("SELECT count(*) FROM deliveries WHERE status = 'delivered'").fetchone()[0]
        events = [(EVENT, payload(i)) for i in range(first, first + n)]
        stats_before = env.receiver_stats()
        sweeps_before = len(SWEPT.findall(env.worker_log()))
        sessions_sql = "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        conn.execute("SELECT pg_stat_clear_snapshot()")
        sessions_before = conn.execute(sessions_sql).fetchone()[0]
        meter = CpuMeter(env.worker.root.pid, env.receiver.pid, env.dbname)
        t0, t_enq = record_events(env, events)
        t1 = wait_delivered(env, conn, already + n, max(120.0, n / 20))
        cpu = meter.stop()
        time.sleep(1.1)  # backends publish their statistics at most once a second
        conn.execute("SELECT pg_stat_clear_snapshot()")
        sessions = conn.execute(sessions_sql).fetchone()[0] - sessions_before
    stats_after = env.receiver_stats()
    sweeps = SWEPT.findall(env.worker_log())[sweeps_before:]
    return {"n": n, "seconds": t1 - t0, "enqueue_seconds": t_enq - t0,
            "posts": stats_after["posts"] - stats_before["posts"],
            "ids": stats_after["ids"] - stats_before["ids"], "sweeps": [int(x) for x in sweeps], "cpu": cpu,
            "pg_sessions": sessions}


def attempt_summary(env: Environment) -> dict:
    with psycopg.connect(_conninfo(env.dbname), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), avg(latency_ms), percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms), "
            "count(*) FILTER (WHERE status_code IS DISTINCT FROM 200) FROM delivery_attempts").fetchone()
        per = conn.execute("SELECT max(attempts), count(*) FILTER (WHERE status <> 'delivered') FROM deliveries"
                           ).fetchone()
    if row[3] or per[1]:
        raise BenchError(f"{row[3]} attempts did not get a 200; {per[1]} deliveries not delivered")
    return {"attempts": row[0], "latency_avg_ms": float(row[1]), "latency_p50_ms": float(row[2]),
            "max_attempts": per[0]}


def total(results: list[dict]) -> dict:
    n = sum(r["n"] for r in results)
    seconds = sum(r["seconds"] for r in results)
    return {"n": n, "seconds": seconds, "rate": n / seconds, "rounds": [r["n"] / r["seconds"] for r in results]}


# --- main -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deliveries", type=int, default=5000, help="measured deliveries per side (default 5000)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds baseline/service, the deliveries split among them (default 3)")
    ap.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--threads", type=int, default=8, help="threads per worker process (default 8)")
    ap.add_argument("--warmup", type=int, default=200, help="warm-up deliveries (default 200)")
    ap.add_argument("--py-spy", dest="py_spy", type=Path, help="write a py-spy raw profile of the worker here")
    ap.add_argument("--gil", action="store_true", help="with --py-spy: sample only threads holding the GIL")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the ratio misses the goal")
    args = ap.parse_args(argv)
    if (args.deliveries < 100 or args.processes < 1 or args.threads < 1 or args.warmup < 0
            or not 1 <= args.rounds <= args.deliveries // 50):
        ap.error("--deliveries must be >= 100, --processes and --threads >= 1, --warmup >= 0, "
                 "1 <= --rounds <= deliveries / 50")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    env = Environment(args.processes, args.threads)
    threads = args.processes * args.threads
    status = 0
    t_start = time.monotonic()
    load = os.getloadavg()[0]
    try:
        from cs_daemon.delivery.service import encode

        print(f"setting up: database {env.dbname}, Redis prefix {env.prefix}", file=sys.stderr)
        env.create_database()
        env.start_receiver()
        env.create_tenant()
        n = args.deliveries
        # The bodies the deliveries carry, byte for byte (the outbox adds "event").
        bodies = [encode({"event": EVENT, **payload(i)}) for i in range(n)]
        start_service(env, args.warmup)
        if args.py_spy:
            env.start_profiler(args.py_spy, args.gil)

        base_runs, svc_runs = [], []
        bounds = [n * r // args.rounds for r in range(args.rounds + 1)]
        for r in range(args.rounds):
            lo, hi = bounds[r], bounds[r + 1]
            # alternate which side goes first so neither always follows the other
            for side in (("baseline", "service") if r % 2 == 0 else ("service", "baseline")):
                print(f"round {r + 1}/{args.rounds}: {side} ({hi - lo} deliveries, {threads} threads) ...",
                      file=sys.stderr)
                if side == "baseline":
                    base_runs.append(run_baseline(env, bodies[lo:hi], threads, min(args.warmup, 100)))
                else:
                    svc_runs.append(run_service(env, lo, hi - lo))
        env.stop_profiler()
        attempts = attempt_summary(env)
        with psycopg.connect(_conninfo(env.dbname)) as conn:
            stored = {row[0] for row in conn.execute("SELECT body FROM deliveries")}
        if not set(bodies) <= stored:
            raise BenchError("the baseline's bodies differ from the deliveries' bodies")

        base, svc = total(base_runs), total(svc_runs)
        ratio = svc["rate"] / base["rate"]
        posts = sum(r["posts"] for r in svc_runs)
        ids = sum(r["ids"] for r in svc_runs)
        sweeps = [x for r in svc_runs for x in r["sweeps"]]
        enqueue = sum(r["enqueue_seconds"] for r in svc_runs)
        cpu: dict[str, float] = {}
        for r in svc_runs:
            for k, v in r["cpu"].items():
                cpu[k] = cpu.get(k, 0.0) + v
        print()
        print("Webhook deliveries: `cs worker` (Dramatiq on Redis, PostgreSQL) vs a plain signing script")
        print(f"  {n} deliveries a side of ~{sum(map(len, bodies)) // n} B bodies to a loopback receiver "
              f"(asyncio, 200 at once), in {args.rounds} interleaved rounds; {threads} threads a side; "
              f"{os.cpu_count()} CPUs, load average before the run {load:.1f}")
        print()
        print(f"  {'side':<50} {'seconds':>8} {'deliv/s':>8}   rounds")
        print(f"  {'baseline (requests.Session, sign + POST)':<50} {base['seconds']:>8.2f} {base['rate']:>8.0f}   "
              + " ".join(f"{x:.0f}" for x in base["rounds"]))
        label = f"service ({args.processes} x {args.threads}, commit -> all delivered)"
        print(f"  {label:<50} {svc['seconds']:>8.2f} {svc['rate']:>8.0f}   "
              + " ".join(f"{x:.0f}" for x in svc["rounds"]))
        print()
        verdict = "met" if ratio >= GOAL else "NOT met"
        print(f"  ratio (service / baseline): {ratio:.2f}   goal: >= {GOAL} ({verdict})")
        print()
        print(f"  enqueueing {n} messages at commit took {enqueue:.2f} s (inside the measured time)")
        print(f"  the receiver got {posts} POSTs for {ids} webhook-ids ({posts - ids} sent twice); "
              f"{attempts['attempts']} attempts recorded (with {args.warmup} warm-up), "
              f"at most {attempts['max_attempts']} a delivery")
        print(f"  attempt latency as recorded (resolve + connect + POST + answer): avg "
              f"{attempts['latency_avg_ms']:.2f} ms, p50 {attempts['latency_p50_ms']:.2f} ms")
        print(f"  sweeps during the measurement re-enqueued: {sweeps or 'nothing'}")
        print(f"  PostgreSQL sessions opened during the service rounds: "
              f"{sum(r['pg_sessions'] for r in svc_runs)} (the worker's pool keeps 5, overflow above that is "
              f"closed on return)")
        busy = ", ".join(f"{k}{' (shared)' if k == 'redis' else ''} {v:.1f} s ({v / n * 1000:.2f} ms a delivery)"
                         for k, v in cpu.items())
        print(f"  CPU during the service rounds ({svc['seconds']:.1f} s wall x {os.cpu_count()} CPUs): {busy}")
        print("  (postgres: backends of this database alive at the end of a round; those that exited in it,"
              " e.g. the pool's overflow, are not counted)")
        if args.py_spy:
            print(f"  py-spy profile of the worker (all rounds; idle samples excluded): {args.py_spy}")
        print(f"  total run {time.monotonic() - t_start:.1f} s")
        if args.strict and ratio < GOAL:
            status = 1
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        status = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        env.teardown()
    return status


if __name__ == "__main__":
    sys.exit(main())
