"""In-app streams: streams one daemon holds past two heartbeats, memory per stream, idle CPU,
and approve -> message latency at given stream counts (one asyncio client, raw sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace

import psycopg
import redis

import harness as h

HOST = h.HOST
CONNECTS_IN_FLIGHT = 100
pct = h.percentile

OPTIONS = """
--levels '1000,5000,10000'  stream counts to try, ascending
--latency-at '1000,10000'  open stream counts at which latency is measured (levels among --levels)
--samples 200       approvals timed
--rate 10.0         approvals a second
--heartbeat 15.0    CS_STREAM_HEARTBEAT_SECONDS (seconds of silence before a heartbeat)
--hold 32.0         seconds each level is held (two heartbeats and a little)
--retries 3         retries of a refused stream
--web-processes 2   CS_WEB_PROCESSES
--stream-slots 10000  CS_STREAM_SLOTS
--worker-threads 4  CS_WORKER_THREADS
"""


def start_daemon(bench: h.Bench, db: str, a) -> h.Server:
    return bench.serve(db, CS_WEB_PROCESSES=str(a.web_processes), CS_STREAM_SLOTS=str(a.stream_slots),
                       CS_STREAM_HEARTBEAT_SECONDS=str(a.heartbeat),
                       # one tenant, one client address: the fairness caps would measure themselves
                       CS_STREAM_TENANT_SHARE="100", CS_ADDRESS_RATE_LIMIT="1000000",
                       CS_WORKER_PROCESSES="1", CS_WORKER_THREADS=str(a.worker_threads), CS_LOG_LEVEL="WARNING")


def api_processes(daemon: h.Server) -> list[int]:
    table = {p.pid: p for p in h.descendants(daemon.pid)}
    return [p.pid for p in table.values() if "gunicorn" in p.cmdline and table.get(p.ppid) is not None
            and "gunicorn" in table[p.ppid].cmdline]


def api_footprint(daemon: h.Server) -> tuple[float, int]:
    """(RSS MiB, threads) summed over the gunicorn worker processes."""
    status = [s for pid in api_processes(daemon) if (s := h.proc_status(pid))]
    return sum(int(s["VmRSS"].split()[0]) for s in status) / 1024, sum(int(s["Threads"]) for s in status)


def families(env) -> dict[str, list[int]]:
    table = h.processes()
    return {"api (gunicorn)": api_processes(env.daemon),
            "worker (dramatiq)": [p.pid for p in h.descendants(env.daemon.pid, table) if "dramatiq" in p.cmdline],
            **h.stores(env.db, table), "bench client": [os.getpid()]}


def seed(api: h.Api, users: list[str], bench: h.Bench, tenant_id: str) -> tuple[dict[str, str], str]:
    """The users, a stream token each (the first through the API, the rest minted here the same
    way), and a playbook."""
    from cs_daemon.channels import in_app_tokens

    for i in range(0, len(users), 100):
        api.call("POST", "/api/track", {"events": [{"user_id": u, "event": "$identify"} for u in users[i:i + 100]]})
    tokens = {users[0]: api.call("POST", "/api/in-app/tokens", {"user_id": users[0]})["token"]}
    now = datetime.now(timezone.utc)
    tokens.update((u, in_app_tokens.mint(bench.secret, tenant_id, u, now)[0]) for u in users[1:])
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
        self.port, self.retries, self.all = port, retries, []
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
                retry = [line.split(":", 1)[1] for line in head.split("\r\n") if line.lower().startswith("retry-after:")]
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
            s.task = asyncio.ensure_future(self.run(s))

    async def settled(self, streams: list[Stream], timeout: float) -> None:
        """Wait until each stream is open, or has given up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(s.open or s.task.done() for s in streams):
            await asyncio.sleep(0.1)

    def close_all(self) -> None:
        for s in self.all:
            if s.task is not None:
                s.task.cancel()
            if s.writer is not None:
                s.writer.close()


# --- the measurements -----------------------------------------------------------------

async def hold_level(env, streams: Streams, tokens: dict[str, str], level: int, hold: float) -> dict:
    new = [Stream(u, tokens[u]) for u in list(tokens)[len(streams.all):level]]
    began = time.perf_counter()
    streams.start(new)
    await streams.settled(streams.all, 60 + level / 50)
    opened_in = time.perf_counter() - began
    upto = streams.all[:level]
    open_now = sum(s.open for s in upto)
    # warm: every stream has made its first read and waited a heartbeat (the connects' reads are over)
    deadline = time.monotonic() + 120 + level / 50
    while time.monotonic() < deadline and not all(s.heartbeats or not s.open for s in upto):
        await asyncio.sleep(0.2)
    warm_in = time.perf_counter() - began
    rss, threads = api_footprint(env.daemon)
    beats = {id(s): s.heartbeats for s in upto}
    meter = h.CpuMeter(lambda: families(env))
    await asyncio.sleep(hold)
    idle_cpu = meter.stop()
    held = sum(s.open for s in upto)
    beat_counts = [s.heartbeats - beats[id(s)] for s in upto if s.open]
    connects = [s.connect_s for s in new if s.connect_s is not None]
    return {"level": level, "open": open_now, "held": held, "refusals": sum(s.refusals for s in new),
            "refused_for_good": sum(1 for s in new if not s.open and s.status == 429),
            "errors": sorted({s.ended for s in upto if not s.open and s.ended}),
            "opened_in": opened_in, "warm_in": warm_in, "connect_p50": pct(connects, 50) if connects else None,
            "connect_p99": pct(connects, 99) if connects else None,
            "heartbeats": sum(s.heartbeats for s in upto), "rss_mib": rss, "api_threads": threads,
            "beats_min": min(beat_counts) if beat_counts else 0,
            "idle_cpu_pct": {k: v / hold * 100 for k, v in idle_cpu.items()}}


async def measure_latency(env, api: h.Api, streams: Streams, pid: str, samples: int, rate: float) -> dict:
    loop = asyncio.get_running_loop()
    targets = [s for s in streams.all if s.open and not s.arrivals][:samples]     # users not asked before
    if len(targets) < samples:
        raise h.BenchError(f"only {len(targets)} open streams for {samples} samples")
    # approvals from 8 threads, each with a connection busy enough that the server's 2 s
    # keep-alive does not close it under a request (a reset PUT is not retried)
    answered: list[float] = []
    with ThreadPoolExecutor(16) as pool, ThreadPoolExecutor(8) as approvers:
        planned = await asyncio.gather(*[loop.run_in_executor(pool, lambda u=s.user: api.call(
            "POST", "/api/interventions", {"user_id": u, "playbook_id": pid, "channel": "in_app",
                                           "message_body": "Your weekly report is ready"})["id"]) for s in targets])

        async def one(iv: str, at: float) -> float:
            await asyncio.sleep(max(0.0, at - loop.time()))
            arrived = loop.create_future()
            streams.waiting[iv] = arrived
            sent = time.perf_counter()
            await loop.run_in_executor(approvers, api.call, "PUT", f"/api/interventions/{iv}/approve")
            answered.append(time.perf_counter() - sent)
            return await asyncio.wait_for(arrived, 60) - sent

        backlog = queued_jobs(env)
        meter = h.CpuMeter(lambda: families(env))
        start = loop.time() + 0.5
        began = time.perf_counter()
        latencies = await asyncio.gather(*[one(iv, start + i / rate) for i, iv in enumerate(planned)])
        cpu, wall = meter.stop(), time.perf_counter() - began
    statuses = await loop.run_in_executor(None, settled_statuses, env, planned)
    return {"ms": h.summary(latencies), "delivered": statuses.count("delivered"), "statuses": sorted(set(statuses)),
            "stages": {"PUT approve answered": [x * 1000 for x in answered], **stages(env, planned)},
            "backlog": backlog, "cpu": cpu, "wall": wall}


def queued_jobs(env) -> int:
    with contextlib.closing(redis.Redis.from_url(h.REDIS)) as client:
        return int(client.hlen(f"{env.prefix}:dramatiq:default.msgs"))


def settled_statuses(env, planned: list[str], timeout: float = 60.0) -> list[str]:
    """The interventions' statuses once all are delivered (or the time is up)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(h.conninfo(env.db), autocommit=True) as conn:
        while True:
            statuses = [r[0] for r in conn.execute("SELECT status FROM interventions WHERE id = ANY(%s)",
                                                   (planned,))]
            if statuses.count("delivered") == len(planned) or time.monotonic() > deadline:
                return statuses
            time.sleep(0.2)


def stages(env, planned: list[str]) -> dict[str, list[float]]:
    """From the rows' timestamps: approved -> queued by the delivery job -> written to the stream."""
    with psycopg.connect(h.conninfo(env.db)) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM m.created_at - i.approved_at) * 1000, "
            "extract(epoch FROM m.delivered_at - m.created_at) * 1000 "
            "FROM interventions i JOIN in_app_messages m ON m.intervention_id = i.id WHERE i.id = ANY(%s)",
            (planned,)).fetchall()
    return {"approved -> queued by the job": [float(r[0]) for r in rows],
            "queued -> written to the stream": [float(r[1]) for r in rows if r[1] is not None]}


async def measure(env, api: h.Api, tokens: dict[str, str], pid: str) -> tuple[list[dict], dict]:
    a = env.args
    streams = Streams(env.daemon.port, a.retries)
    rss, _ = api_footprint(env.daemon)
    results, latency = [{"level": 0, "open": 0, "rss_mib": rss}], {}
    try:
        for level in a.levels:
            h.say(f"level {level}: opening {level - len(streams.all)} more streams ...")
            result = await hold_level(env, streams, tokens, level, a.hold)
            results.append(result)
            h.say(f"  open {result['open']} in {result['opened_in']:.0f} s, each read and past a heartbeat in "
                  f"{result['warm_in']:.0f} s; held {result['held']} after {a.hold:.0f} s more "
                  f"(each at least {result['beats_min']} heartbeats), refusals {result['refusals']}, "
                  f"API RSS {result['rss_mib']:.0f} MiB, idle CPU of the API processes "
                  f"{result['idle_cpu_pct']['api (gunicorn)']:.1f}% of a core")
            if level in a.latency_at:
                if result["held"] < level:
                    h.say(f"  latency not measured: only {result['held']} of {level} streams held")
                else:
                    h.say(f"  latency: {a.samples} approvals at {a.rate}/s ...")
                    # a fresh client: connections idle since the seeding may have been closed by the server
                    latency[level] = await measure_latency(env, h.Api(api.url, api.key), streams, pid, a.samples,
                                                           a.rate)
            if result["held"] < level:
                break                  # the bounded search ends at the first level not held
    finally:
        streams.close_all()
    return results, latency


def report(a, results: list[dict], latencies: dict, load: float, began: float) -> None:
    base, results = results[0], results[1:]
    print("\nIn-app streams (SSE): one daemon in production mode (`cs serve`: gunicorn API processes whose "
          "event loop holds the streams, Dramatiq, PostgreSQL, Redis)")
    print(f"  {a.web_processes} API processes (at most {a.stream_slots} streams each), worker 1 x "
          f"{a.worker_threads} threads, heartbeat every {a.heartbeat:g} s of silence; {h.CPUS} CPUs, "
          f"load average before {load:.1f}; API RSS with no stream {base['rss_mib']:.0f} MiB\n")
    print(h.table([[r["level"], r["open"], r["held"], r["beats_min"], r["refusals"],
                    f"{r['connect_p50'] * 1000:.0f}/{r['connect_p99'] * 1000:.0f}" if r["connect_p50"] is not None
                    else "-", f"{r['rss_mib']:.0f}", r["api_threads"],
                    " / ".join(f"{v:.1f}" for v in r["idle_cpu_pct"].values()), ", ".join(r["errors"]) or "-"]
                   for r in results],
                  ["level", "open", "held", "beats", "refusals", "connect p50/p99 ms", "API RSS MiB", "API threads",
                   "idle CPU % of a core: " + " / ".join(results[0]["idle_cpu_pct"]) if results else "", "errors"],
                  ">>>>>>>>><"))
    held = [r["level"] for r in results if r["held"] == r["level"]]
    print(f"\n  held without loss: {max(held) if held else 0} concurrent streams "
          f"(levels tried {', '.join(map(str, a.levels[:len(results)]))}; held = still open after {a.hold:.0f} s; "
          f"beats = the fewest heartbeats a held stream read meanwhile)")
    if results and results[-1]["open"]:
        last = results[-1]
        per = (last["rss_mib"] - base["rss_mib"]) * 1024 / last["open"]
        print(f"  memory of the API processes per open stream: ~{per:.1f} KiB (RSS at {last['open']} streams "
              f"less RSS with none, over {last['open']})")
    for level, latency in latencies.items():
        lat = latency["ms"]
        print(f"\n  approve -> message on the stream, {lat['n']} approvals at {a.rate}/s with "
              f"{level} streams open:")
        print("    " + "   ".join(f"{k} {lat[k]:.1f} ms" for k in ("p50", "p95", "p99", "max", "mean")))
        print(f"    Dramatiq messages waiting when the approvals began: {latency['backlog']}")
        for stage, values in latency["stages"].items():
            if values:
                print(f"    {stage + ':':<34} p50 {pct(values, 50):6.1f} ms   p99 {pct(values, 99):6.1f} ms")
        print(f"    interventions delivered afterwards: {latency['delivered']}/{lat['n']} "
              f"({', '.join(latency['statuses'])})")
        busy = ", ".join(f"{k} {v:.1f} s" for k, v in latency["cpu"].items())
        print(f"    CPU during the {latency['wall']:.1f} s of approvals ({h.CPUS} CPUs): {busy}")
    print(f"  total run {time.monotonic() - began:.1f} s")


def run(bench: h.Bench, args) -> int:
    began, load = time.monotonic(), os.getloadavg()[0]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))     # a socket per stream, here and in the daemon
    if hard < max(args.levels) + 1000:
        raise h.BenchError(f"the file limit ({hard}) is too low for {max(args.levels)} streams")
    db = bench.database()
    tenant = bench.tenant(db, "scale")
    env = SimpleNamespace(db=db, prefix=bench.prefix, args=args, daemon=start_daemon(bench, db, args))
    api = h.Api(env.daemon.url(), tenant.key)
    tokens, pid = seed(api, [f"user-{i:05d}" for i in range(max(args.levels))], bench, tenant.id)
    results, latency = asyncio.run(measure(env, api, tokens, pid))
    report(args, results, latency, load, began)
    return 0


def check(args) -> str | None:
    try:
        args.levels, args.latency_at = (sorted({int(x) for x in v.split(",")}) for v in (args.levels, args.latency_at))
    except ValueError:
        return "--levels and --latency-at take stream counts separated by commas"
    if not set(args.latency_at) <= set(args.levels) or args.samples > min(args.latency_at):
        return "--latency-at must name levels of --levels, and --samples be at most the smallest"


if __name__ == "__main__":
    sys.exit(h.main("sse", __doc__, OPTIONS, run, check))
