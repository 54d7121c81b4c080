"""In-app streams: concurrent open streams one daemon holds on this machine, and delivery
latency p50/p99 from approve to the message on a stream with 1,000 open streams.

    .venv/bin/python bench/sse.py                                   # levels 250,500,1000,2000
    .venv/bin/python bench/sse.py --levels 100,200 --latency-at 200 --samples 50    # a quick run

By itself it
  1. creates a fresh PostgreSQL database (unique name), migrates it, makes a tenant on the
     "scale" plan, USERS users (POST /api/track, $identify) and one stream token each
     (POST /api/in-app/tokens);
  2. starts `cs serve` in production mode (REDIS_URL with a unique CS_REDIS_PREFIX): the
     supervisor runs gunicorn (CS_WEB_PROCESSES gthread processes, 8 + CS_STREAM_SLOTS
     threads each) and the Dramatiq worker (CS_WORKER_PROCESSES x CS_WORKER_THREADS);
  3. capacity: opens streams in steps up to each level (the streams of the previous level
     stay open), one per user, at most 100 connects in flight; a stream counts as open once
     its first chunk came (200 and `retry:`). A refused stream (429 when a process's slots
     are taken) is retried after its Retry-After, as the SDK does, at most --retries times.
     Each level is then held for --hold seconds (past a 15 s heartbeat) and the streams
     still open are counted, with the RSS and thread count of the API processes;
  4. latency, once --latency-at streams are open: approves --samples in_app interventions
     (planned beforehand, each for another user with an open stream) at --rate a second,
     each timed from sending PUT /api/interventions/{id}/approve until its message line is
     read on that user's stream; then waits until all of them are `delivered`;
  5. prints the figures and tears everything down (daemon tree, database, Redis keys),
     also on an error or Ctrl-C.

The client is one asyncio process with raw sockets (HTTP/1.0, so the stream comes without
chunking) and approvals through a small thread pool; it is light next to the daemon.
Exit status: 0 when the measurement ran, 2 when setup failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.processes import (  # noqa: E402
    CS, Deadline, Service, Tree, descendants, free_port, processes, service_env,
)

PG = os.environ.get("CS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("CS_TEST_REDIS", "redis://127.0.0.1:6379/0")
HOST = "127.0.0.1"
CONNECTS_IN_FLIGHT = 100


class BenchError(Exception):
    pass


def _conninfo(dbname: str) -> str:
    return PG.replace("postgresql+psycopg://", "postgresql://") + f"/{dbname}"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


# --- the daemon -----------------------------------------------------------------------


class Environment:
    def __init__(self, args):
        self.args = args
        self.dbname = f"cs_bench_{uuid.uuid4().hex[:10]}"
        self.prefix = f"csbench-{uuid.uuid4().hex[:8]}"
        self.secret_key = secrets.token_hex(32)
        self.db_url = f"{PG}/{self.dbname}"
        self.tmp = Path(tempfile.mkdtemp(prefix="cs-bench-sse-"))
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.db_created = False
        self.daemon: Tree | None = None
        self.key = ""

    def create_database(self) -> None:
        from cs_daemon import migrate
        from cs_daemon.config import Settings

        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.db_created = True
        self.settings = Settings(database_url=self.db_url, redis_url=REDIS, cs_redis_prefix=self.prefix,
                                 cs_secret_key=self.secret_key, cs_data_dir=self.tmp / "data")
        migrate.upgrade(self.settings)

    def create_tenant(self) -> None:
        from cs_daemon.runtime import Runtime
        from cs_daemon.tenants import service as tenants

        rt = Runtime(self.settings)
        with rt.session() as s:
            self.key = tenants.create(s, name="Bench", owner_email="owner@bench.example", now=rt.now(),
                                      plan_tier="scale").key.secret

    def start_daemon(self) -> None:
        a = self.args
        env = service_env(DATABASE_URL=self.db_url, REDIS_URL=REDIS, CS_REDIS_PREFIX=self.prefix,
                          CS_SECRET_KEY=self.secret_key, CS_DATA_DIR=str(self.tmp / "data"),
                          CS_WEB_PROCESSES=str(a.web_processes), CS_STREAM_SLOTS=str(a.stream_slots),
                          # one tenant, one client address: the fairness caps would measure themselves
                          CS_STREAM_TENANT_SHARE="100", CS_ADDRESS_RATE_LIMIT="1000000",
                          CS_WORKER_PROCESSES="1", CS_WORKER_THREADS=str(a.worker_threads),
                          CS_LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1")
        self.daemon = Tree(Service([CS, "serve", "--host", HOST, "--port", str(self.port)], env=env, cwd=self.tmp,
                                   log=self.tmp / "daemon.err", new_session=True))
        deadline = Deadline(60)
        while True:
            try:
                if requests.get(f"{self.url}/api/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if self.daemon.root.proc.poll() is not None or not deadline:
                raise BenchError(f"cs serve did not become healthy:\n{self.daemon.root.describe()}")
            time.sleep(0.2)
        self.daemon.record()

    def api_processes(self) -> list[int]:
        table = {p.pid: p for p in descendants(self.daemon.root.pid)}
        return [p.pid for p in table.values() if "gunicorn" in p.cmdline and table.get(p.ppid) is not None
                and "gunicorn" in table[p.ppid].cmdline]

    def api_footprint(self) -> tuple[float, int]:
        """(RSS MiB, threads) summed over the gunicorn worker processes."""
        rss, threads = 0, 0
        for pid in self.api_processes():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            rss += int(fields["VmRSS"].split()[0])
            threads += int(fields["Threads"])
        return rss / 1024, threads

    def teardown(self) -> None:
        done, problems = [], []
        if self.daemon is not None:
            tree, self.daemon = self.daemon, None
            tree.record()
            tree.root.signal(signal.SIGTERM)
            try:
                tree.root.wait(40)
                done.append("daemon stopped")
            except subprocess.TimeoutExpired:
                problems.append("cs serve did not stop on SIGTERM; killed")
            tree.kill()
        try:
            from cs_daemon.db import dispose_engines

            dispose_engines()
        except Exception as exc:  # pragma: no cover - best effort
            problems.append(f"disposing engines: {exc}")
        if self.db_created:
            try:
                with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
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


CLK_TCK = os.sysconf("SC_CLK_TCK")


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


class CpuMeter:
    """CPU seconds by process family over an interval."""

    def __init__(self, env: Environment):
        self.env = env
        self.start = {k: cpu_seconds(v) for k, v in self.families().items()}

    def families(self) -> dict[str, list[int]]:
        table = processes()
        tree = [p for p in descendants(self.env.daemon.root.pid, table)]
        ours = f" {self.env.dbname} "
        fam = {"api (gunicorn)": self.env.api_processes(),
               "worker (dramatiq)": [p.pid for p in tree if "dramatiq" in p.cmdline],
               "postgres (this database)": [p.pid for p in table.values()
                                            if p.cmdline.startswith("postgres") and ours in p.cmdline],
               "redis": [p.pid for p in table.values() if p.cmdline.split(" ", 1)[0].endswith("redis-server")],
               "bench client": [os.getpid()]}
        return fam

    def stop(self) -> dict[str, float]:
        return {k: cpu_seconds(v) - self.start.get(k, 0.0) for k, v in self.families().items()}


class Api:
    """Blocking calls with the tenant's key; one requests.Session per thread."""

    def __init__(self, env: Environment):
        self.env = env
        self.url, self.headers = env.url, {"Authorization": f"Bearer {env.key}"}
        self._local = threading.local()

    def call(self, method: str, path: str, body=None) -> dict:
        session = getattr(self._local, "session", None) or requests.Session()
        self._local.session = session
        resp = session.request(method, self.url + path, headers=self.headers, json=body, timeout=30)
        if resp.status_code >= 300:
            raise BenchError(f"{method} {path}: {resp.status_code} {resp.text[:300]}")
        return resp.json()


def seed(api: Api, users: list[str]) -> tuple[dict[str, str], str]:
    """The users, a stream token each, and a playbook."""
    for i in range(0, len(users), 100):
        api.call("POST", "/api/track", {"events": [{"user_id": u, "event": "$identify"} for u in users[i:i + 100]]})
    with ThreadPoolExecutor(8) as pool:
        tokens = dict(zip(users, pool.map(
            lambda u: api.call("POST", "/api/in-app/tokens", {"user_id": u})["token"], users)))
    pid = api.call("POST", "/api/playbooks", {"name": "Bench nudge"})["id"]
    return tokens, pid


# --- the streams ----------------------------------------------------------------------


@dataclass
class Stream:
    user: str
    token: str
    status: int | None = None
    open: bool = False
    ended: str | None = None          # why the stream stopped, once it did
    refusals: int = 0
    connect_s: float | None = None
    heartbeats: int = 0
    arrivals: dict[str, float] = field(default_factory=dict)
    writer: asyncio.StreamWriter | None = None
    task: asyncio.Task | None = None


class Streams:
    def __init__(self, port: int, retries: int):
        self.port = port
        self.retries = retries
        self.all: list[Stream] = []
        self.by_user: dict[str, Stream] = {}
        self.waiting: dict[str, asyncio.Future] = {}
        self.gate = asyncio.Semaphore(CONNECTS_IN_FLIGHT)

    async def run(self, stream: Stream) -> None:
        while True:
            try:
                retry_after = await self._connect(stream)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as exc:
                stream.open, stream.ended = False, f"{type(exc).__name__}: {exc}"
                return
            if retry_after is None or stream.refusals > self.retries:
                return
            await asyncio.sleep(retry_after)

    async def _connect(self, stream: Stream) -> float | None:
        started = time.perf_counter()
        async with self.gate:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 30)
            stream.writer = writer
            writer.write(f"GET /api/in-app/stream?token={stream.token} HTTP/1.0\r\nHost: {HOST}\r\n"
                         f"Accept: text/event-stream\r\n\r\n".encode())
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode()
            stream.status = int(head.split(" ", 2)[1])
            if stream.status != 200:
                stream.refusals += 1
                retry = [line.split(":", 1)[1] for line in head.split("\r\n")
                         if line.lower().startswith("retry-after:")]
                writer.close()
                stream.ended = f"HTTP {stream.status}"
                return float(retry[0]) if retry else 5.0
            first = await asyncio.wait_for(reader.readline(), 30)
            if not first.startswith(b"retry:"):
                raise ValueError(f"unexpected first line {first!r}")
            stream.open, stream.ended, stream.connect_s = True, None, time.perf_counter() - started
        await self._read(stream, reader)
        return None

    async def _read(self, stream: Stream, reader: asyncio.StreamReader) -> None:
        event = None
        while True:
            line = await reader.readline()
            if not line:
                stream.open, stream.ended = False, "closed by the server"
                return
            if line.startswith(b": heartbeat"):
                stream.heartbeats += 1
            elif line.startswith(b"event: "):
                event = line[7:].strip().decode()
            elif line.startswith(b"data: ") and event == "intervention":
                iv = line.split(b'"interventionId":"', 1)[1].split(b'"', 1)[0].decode()
                stream.arrivals[iv] = time.perf_counter()
                waiter = self.waiting.pop(iv, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(stream.arrivals[iv])

    def start(self, streams: list[Stream]) -> None:
        for s in streams:
            self.all.append(s)
            self.by_user[s.user] = s
            s.task = asyncio.ensure_future(self.run(s))

    async def settled(self, streams: list[Stream], timeout: float) -> None:
        """Wait until each stream is open, or has given up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.open or s.task.done() for s in streams):
                return
            await asyncio.sleep(0.1)

    def close_all(self) -> None:
        for s in self.all:
            if s.task is not None:
                s.task.cancel()
            if s.writer is not None:
                s.writer.close()


# --- the measurements -----------------------------------------------------------------


async def hold_level(env: Environment, streams: Streams, tokens: dict[str, str], level: int, hold: float) -> dict:
    new = [Stream(u, tokens[u]) for u in list(tokens)[len(streams.all):level]]
    began = time.perf_counter()
    streams.start(new)
    await streams.settled(streams.all, 60 + level / 50)
    opened_in = time.perf_counter() - began
    upto = streams.all[:level]
    open_now = sum(s.open for s in upto)
    rss, threads = env.api_footprint()
    await asyncio.sleep(hold)
    held = sum(s.open for s in upto)
    connects = [s.connect_s for s in new if s.connect_s is not None]
    return {"level": level, "open": open_now, "held": held, "refusals": sum(s.refusals for s in new),
            "refused_for_good": sum(1 for s in new if not s.open and s.status == 429),
            "errors": sorted({s.ended for s in upto if not s.open and s.ended}),
            "opened_in": opened_in, "connect_p50": pct(connects, 50) if connects else None,
            "connect_p99": pct(connects, 99) if connects else None,
            "heartbeats": sum(s.heartbeats for s in upto), "rss_mib": rss, "api_threads": threads}


async def measure_latency(api: Api, streams: Streams, pid: str, samples: int, rate: float) -> dict:
    loop = asyncio.get_running_loop()
    targets = [s for s in streams.all if s.open][:samples]
    if len(targets) < samples:
        raise BenchError(f"only {len(targets)} open streams for {samples} samples")
    with ThreadPoolExecutor(16) as pool:
        planned = await asyncio.gather(*[loop.run_in_executor(pool, lambda u=s.user: api.call(
            "POST", "/api/interventions", {"user_id": u, "playbook_id": pid, "channel": "in_app",
                                           "message_body": "Your weekly report is ready"})["id"]) for s in targets])

        async def one(iv: str, at: float) -> float:
            await asyncio.sleep(max(0.0, at - loop.time()))
            arrived = loop.create_future()
            streams.waiting[iv] = arrived
            sent = time.perf_counter()
            await loop.run_in_executor(pool, api.call, "PUT", f"/api/interventions/{iv}/approve")
            return await asyncio.wait_for(arrived, 60) - sent

        backlog = queued_jobs(api.env)
        meter = CpuMeter(api.env)
        start = loop.time() + 0.5
        began = time.perf_counter()
        latencies = await asyncio.gather(*[one(iv, start + i / rate) for i, iv in enumerate(planned)])
        cpu, wall = meter.stop(), time.perf_counter() - began
    statuses = await loop.run_in_executor(None, settled_statuses, api.env, planned)
    ms = [x * 1000 for x in latencies]
    return {"samples": len(ms), "p50": pct(ms, 50), "p95": pct(ms, 95), "p99": pct(ms, 99), "max": max(ms),
            "mean": statistics.fmean(ms), "delivered": statuses.count("delivered"),
            "statuses": sorted(set(statuses)), "stages": stages(api.env, planned), "backlog": backlog,
            "cpu": cpu, "wall": wall}


def queued_jobs(env: "Environment") -> int:
    client = redis.Redis.from_url(REDIS)
    try:
        return int(client.hlen(f"{env.prefix}:dramatiq:default.msgs"))
    finally:
        client.close()


def settled_statuses(env: "Environment", planned: list[str], timeout: float = 60.0) -> list[str]:
    """The interventions' statuses once all are delivered (or the time is up)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(_conninfo(env.dbname), autocommit=True) as conn:
        while True:
            statuses = [r[0] for r in conn.execute("SELECT status FROM interventions WHERE id = ANY(%s)",
                                                   (planned,))]
            if statuses.count("delivered") == len(planned) or time.monotonic() > deadline:
                return statuses
            time.sleep(0.2)


def stages(env: "Environment", planned: list[str]) -> dict[str, list[float]]:
    """Where the time went, from the rows' own timestamps (one clock: this machine's):
    approved -> message queued by the worker's delivery job -> written to the stream."""
    with psycopg.connect(_conninfo(env.dbname)) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM m.created_at - i.approved_at) * 1000, "
            "extract(epoch FROM m.delivered_at - m.created_at) * 1000 "
            "FROM interventions i JOIN in_app_messages m ON m.intervention_id = i.id WHERE i.id = ANY(%s)",
            (planned,)).fetchall()
    return {"approved -> queued by the job": [float(r[0]) for r in rows],
            "queued -> written to the stream": [float(r[1]) for r in rows if r[1] is not None]}


async def run(env: Environment, api: Api, tokens: dict[str, str], pid: str) -> tuple[list[dict], dict | None]:
    a = env.args
    streams = Streams(env.port, a.retries)
    results, latency = [], None
    try:
        for level in a.levels:
            print(f"level {level}: opening {level - len(streams.all)} more streams ...", file=sys.stderr)
            result = await hold_level(env, streams, tokens, level, a.hold)
            results.append(result)
            print(f"  open {result['open']}, held {result['held']} after {a.hold:.0f} s, "
                  f"refusals {result['refusals']}", file=sys.stderr)
            if level == a.latency_at:
                if result["held"] < level:
                    print(f"  latency not measured: only {result['held']} of {level} streams held", file=sys.stderr)
                else:
                    print(f"  latency: {a.samples} approvals at {a.rate}/s ...", file=sys.stderr)
                    latency = await measure_latency(api, streams, pid, a.samples, a.rate)
            if result["held"] < level:
                break                  # the bounded search ends at the first level not held
    finally:
        streams.close_all()
    return results, latency


def report(env: Environment, results: list[dict], latency: dict | None, load: float, began: float) -> None:
    a = env.args
    print()
    print("In-app streams (SSE): one daemon in production mode (`cs serve`: gunicorn gthread + Dramatiq, "
          "PostgreSQL, Redis)")
    print(f"  {a.web_processes} API processes x (8 + {a.stream_slots} threads; at most {a.stream_slots} streams "
          f"each), worker 1 x {a.worker_threads} threads; {os.cpu_count()} CPUs, load average before {load:.1f}")
    print()
    print(f"  {'level':>6} {'open':>6} {'held':>6} {'refusals':>9} {'connect p50/p99 ms':>19} "
          f"{'API RSS MiB':>12} {'API threads':>12}  errors")
    for r in results:
        connect = (f"{r['connect_p50'] * 1000:.0f}/{r['connect_p99'] * 1000:.0f}"
                   if r["connect_p50"] is not None else "-")
        print(f"  {r['level']:>6} {r['open']:>6} {r['held']:>6} {r['refusals']:>9} {connect:>19} "
              f"{r['rss_mib']:>12.0f} {r['api_threads']:>12}  {', '.join(r['errors']) or '-'}")
    held = [r["level"] for r in results if r["held"] == r["level"]]
    print()
    print(f"  held without loss: {max(held) if held else 0} concurrent streams "
          f"(levels tried {', '.join(map(str, a.levels[:len(results)]))}; held = still open after {a.hold:.0f} s)")
    if len(results) >= 2 and results[-1]["open"] > results[0]["open"]:
        first, last = results[0], results[-1]
        per = (last["rss_mib"] - first["rss_mib"]) * 1024 / (last["open"] - first["open"])
        print(f"  memory of the API processes per open stream: ~{per:.0f} KiB")
    if latency is not None:
        print()
        print(f"  approve -> message on the stream, {latency['samples']} approvals at {a.rate}/s with "
              f"{a.latency_at} streams open:")
        print(f"    p50 {latency['p50']:.1f} ms   p95 {latency['p95']:.1f} ms   p99 {latency['p99']:.1f} ms   "
              f"max {latency['max']:.1f} ms   mean {latency['mean']:.1f} ms")
        print(f"    Dramatiq messages waiting when the approvals began: {latency['backlog']}")
        for stage, values in latency["stages"].items():
            if values:
                print(f"    {stage + ':':<34} p50 {pct(values, 50):6.1f} ms   p99 {pct(values, 99):6.1f} ms")
        print(f"    interventions delivered afterwards: {latency['delivered']}/{latency['samples']} "
              f"({', '.join(latency['statuses'])})")
        busy = ", ".join(f"{k} {v:.1f} s" for k, v in latency["cpu"].items())
        print(f"    CPU during the {latency['wall']:.1f} s of approvals ({os.cpu_count()} CPUs): {busy}")
    print(f"  total run {time.monotonic() - began:.1f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="250,500,1000,2000",
                    type=lambda v: sorted({int(x) for x in v.split(",")}), help="stream counts to try, ascending")
    ap.add_argument("--latency-at", type=int, default=1000, help="open streams while latency is measured")
    ap.add_argument("--samples", type=int, default=300, help="approvals timed (default 300)")
    ap.add_argument("--rate", type=float, default=10.0, help="approvals a second (default 10)")
    ap.add_argument("--hold", type=float, default=20.0, help="seconds each level is held (default 20)")
    ap.add_argument("--retries", type=int, default=3, help="retries of a refused stream (default 3)")
    ap.add_argument("--web-processes", type=int, default=2, help="CS_WEB_PROCESSES (default 2)")
    ap.add_argument("--stream-slots", type=int, default=1000, help="CS_STREAM_SLOTS (default 1000)")
    ap.add_argument("--worker-threads", type=int, default=4, help="CS_WORKER_THREADS (default 4)")
    args = ap.parse_args(argv)
    if args.latency_at not in args.levels or args.samples > args.latency_at:
        ap.error("--latency-at must be one of --levels, and --samples at most that")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    env = Environment(args)
    began, load = time.monotonic(), os.getloadavg()[0]
    status = 0
    try:
        print(f"setting up: database {env.dbname}, Redis prefix {env.prefix}", file=sys.stderr)
        env.create_database()
        env.create_tenant()
        env.start_daemon()
        api = Api(env)
        users = [f"user-{i:05d}" for i in range(max(args.levels))]
        tokens, pid = seed(api, users)
        results, latency = asyncio.run(run(env, api, tokens, pid))
        report(env, results, latency, load, began)
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
