"""In-app streams: streams one daemon holds past two heartbeats, memory per stream, idle CPU,
and approve -> message latency at given stream counts (one asyncio client, raw sockets)."""

from __future__ import annotations

import asyncio
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone

import harness as h

RATE = 10.0    # approvals a second
OPTIONS = """
--levels '1000,5000,10000'  stream counts to try, ascending
--latency-at '1000,10000'  open stream counts at which latency is measured (levels among --levels)
--samples 200       approvals timed
--heartbeat 15.0    CS_STREAM_HEARTBEAT_SECONDS (seconds of silence before a heartbeat)
--hold 32.0         seconds each level is held (two heartbeats and a little)
"""


def api_processes(daemon: h.Server) -> list[int]:
    table = {p.pid: p for p in h.descendants(daemon.pid)}
    return [p.pid for p in table.values() if "gunicorn" in p.cmdline and table.get(p.ppid) is not None
            and "gunicorn" in table[p.ppid].cmdline]


def api_footprint(daemon: h.Server) -> tuple[float, int]:
    """(RSS MiB, threads) summed over the gunicorn worker processes."""
    status = [s for pid in api_processes(daemon) if (s := h.proc_status(pid))]
    return sum(int(s["VmRSS"].split()[0]) for s in status) / 1024, sum(int(s["Threads"]) for s in status)


@dataclass
class Stream:
    token: str
    user: str
    status: int | None = None
    open: bool = False
    asked: bool = False     # an approval was timed on it
    ended: str | None = None    # why the stream stopped, once it did
    heartbeats: int = 0
    writer: asyncio.StreamWriter | None = None
    task: asyncio.Task | None = None


class Streams:
    def __init__(self, port: int):
        self.port, self.all, self.waiting = port, [], {}
        self.gate = asyncio.Semaphore(100)   # connects in flight

    async def run(self, stream: Stream) -> None:
        try:
            async with self.gate:
                reader, stream.writer = await asyncio.wait_for(asyncio.open_connection(h.HOST, self.port), 30)
                stream.writer.write(f"GET /api/in-app/stream?token={stream.token} HTTP/1.0\r\nHost: {h.HOST}\r\n"
                                    "Accept: text/event-stream\r\n\r\n".encode())
                head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode()
                stream.status = int(head.split(" ", 2)[1])
                if stream.status != 200:
                    stream.ended = f"HTTP {stream.status}"
                    return
                if not (first := await asyncio.wait_for(reader.readline(), 30)).startswith(b"retry:"):
                    raise ValueError(f"unexpected first line {first!r}")
                stream.open = True
            event = None
            while line := await reader.readline():
                if line.startswith(b": heartbeat"):
                    stream.heartbeats += 1
                elif line.startswith(b"event: "):
                    event = line[7:].strip().decode()
                elif line.startswith(b"data: ") and event == "intervention":
                    iv = line.split(b'"interventionId":"', 1)[1].split(b'"', 1)[0].decode()
                    if (waiter := self.waiting.pop(iv, None)) is not None and not waiter.done():
                        waiter.set_result(time.perf_counter())
            stream.ended = "closed by the server"
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as exc:
            stream.ended = f"{type(exc).__name__}: {exc}"
        stream.open = False

    def close_all(self) -> None:
        for s in self.all:
            s.task.cancel()
            if s.writer is not None:
                s.writer.close()


async def hold_level(daemon: h.Server, streams: Streams, tokens: dict[str, str], level: int, hold: float) -> dict:
    new = [Stream(tokens[u], u) for u in list(tokens)[len(streams.all):level]]
    streams.all += new
    for s in new:
        s.task = asyncio.ensure_future(streams.run(s))
    # settled: each stream open or given up; warm: each open one past its first heartbeat
    for ready, timeout in ((lambda s: s.open or s.task.done(), 60), (lambda s: s.heartbeats or not s.open, 120)):
        deadline = time.monotonic() + timeout + level / 50
        while time.monotonic() < deadline and not all(map(ready, streams.all)):
            await asyncio.sleep(0.2)
    opened = sum(s.open for s in streams.all)
    rss, threads = api_footprint(daemon)
    beats = [s.heartbeats for s in streams.all]
    meter = h.CpuMeter(lambda: {"api": api_processes(daemon)})
    await asyncio.sleep(hold)
    idle = meter.stop()["api"] / hold * 100
    return {"level": level, "open": opened, "held": sum(s.open for s in streams.all), "rss_mib": rss,
            "threads": threads, "refused": sum(s.status not in (None, 200) for s in new), "idle_cpu": idle,
            "beats": min([s.heartbeats - b for s, b in zip(streams.all, beats) if s.open], default=0),
            "errors": sorted({s.ended for s in streams.all if not s.open and s.ended})}


async def measure_latency(api: h.Api, streams: Streams, pid: str, samples: int) -> dict:
    loop = asyncio.get_running_loop()
    targets = [s for s in streams.all if s.open and not s.asked][:samples]     # users not asked before
    if len(targets) < samples:
        raise h.BenchError(f"only {len(targets)} open streams for {samples} samples")
    answered: list[float] = []
    # approvals from 8 threads, each with a connection busy enough that the server's 2 s
    # keep-alive does not close it under a request (a reset PUT is not retried)
    with ThreadPoolExecutor(16) as pool, ThreadPoolExecutor(8) as approvers:
        planned = await asyncio.gather(*[loop.run_in_executor(pool, lambda u=s.user: api.call(
            "POST", "/api/interventions", {"user_id": u, "playbook_id": pid, "channel": "in_app",
                                           "message_body": "Your weekly report is ready"})["id"]) for s in targets])

        async def one(iv: str, at: float) -> float:
            await asyncio.sleep(max(0.0, at - loop.time()))
            arrived = streams.waiting[iv] = loop.create_future()
            sent = time.perf_counter()
            await loop.run_in_executor(approvers, api.call, "PUT", f"/api/interventions/{iv}/approve")
            answered.append(time.perf_counter() - sent)
            return await asyncio.wait_for(arrived, 60) - sent

        for s in targets:
            s.asked = True
        start = loop.time() + 0.5
        latencies = await asyncio.gather(*[one(iv, start + i / RATE) for i, iv in enumerate(planned)])
    return {"p50": h.percentile(latencies, 50) * 1000, "p99": h.percentile(latencies, 99) * 1000,
            "approve": h.percentile(answered, 50) * 1000}


async def measure(args, daemon: h.Server, api: h.Api, tokens: dict[str, str], pid: str) -> tuple[list[dict], dict]:
    streams = Streams(daemon.port)
    results, latency = [], {}
    try:
        for level in args.levels:
            h.say(f"level {level}: opening {level - len(streams.all)} more streams ...")
            results.append(result := await hold_level(daemon, streams, tokens, level, args.hold))
            h.say(f"  held {result['held']} of {result['open']} open after {args.hold:.0f} s")
            if level in args.latency_at and result["held"] == level:
                h.say(f"  latency: {args.samples} approvals at {RATE}/s ...")
                # a fresh client: connections idle since the seeding may have been closed by the server
                latency[level] = await measure_latency(h.Api(api.url, api.key), streams, pid, args.samples)
            if result["held"] < level:
                break                  # the bounded search ends at the first level not held
    finally:
        streams.close_all()
    return results, latency


def run(bench: h.Bench, args) -> int:
    from cs_daemon.channels import in_app_tokens

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))     # a socket per stream, here and in the daemon
    if hard < max(args.levels) + 1000:
        raise h.BenchError(f"the file limit ({hard}) is too low for {max(args.levels)} streams")
    db = bench.database()
    tenant = bench.tenant(db, "scale")
    # one tenant, one client address: the fairness caps would measure themselves
    daemon = bench.serve(db, CS_STREAM_HEARTBEAT_SECONDS=str(args.heartbeat), CS_STREAM_TENANT_SHARE="100",
                         CS_ADDRESS_RATE_LIMIT="1000000", CS_LOG_LEVEL="WARNING")
    api, users = h.Api(daemon.url(), tenant.key), [f"user-{i:05d}" for i in range(max(args.levels))]
    for i in range(0, len(users), 100):
        api.call("POST", "/api/track", {"events": [{"user_id": u, "event": "$identify"} for u in users[i:i + 100]]})
    # a stream token each: the first through the API, the rest minted here the same way
    tokens = {users[0]: api.call("POST", "/api/in-app/tokens", {"user_id": users[0]})["token"]}
    now = datetime.now(timezone.utc)
    tokens.update((u, in_app_tokens.mint(bench.secret, tenant.id, u, now)[0]) for u in users[1:])
    pid = api.call("POST", "/api/playbooks", {"name": "Bench nudge"})["id"]
    rss, _ = api_footprint(daemon)
    results, latencies = asyncio.run(measure(args, daemon, api, tokens, pid))

    print(f"\nIn-app streams (SSE): `cs serve` in production mode, {len(api_processes(daemon))} API processes; "
          f"heartbeat every {args.heartbeat:g} s of silence; API RSS with no stream {rss:.0f} MiB; {h.CPUS} CPUs\n")
    print(h.table([[r["level"], r["open"], r["held"], r["beats"], r["refused"], f"{r['rss_mib']:.0f}", r["threads"],
                    f"{r['idle_cpu']:.1f}", ", ".join(r["errors"]) or "-"] for r in results],
                  ["level", "open", "held", "beats", "refused", "API RSS MiB", "API threads", "idle API CPU %",
                   "errors"], ">>>>>>>><"))
    held = [r["level"] for r in results if r["held"] == r["level"]]
    print(f"\n  held past two heartbeats: {max(held, default=0)} streams (held = still open after {args.hold:g} s; "
          f"beats = the fewest heartbeats a held stream read meanwhile; idle CPU in % of a core)")
    if (last := results[-1])["open"]:
        print(f"  memory of the API processes a stream: ~{(last['rss_mib'] - rss) * 1024 / last['open']:.1f} KiB "
              f"(RSS at {last['open']} streams less RSS with none)")
    for level, lat in latencies.items():
        print(f"  approve -> message on the stream with {level} streams open, {args.samples} approvals at {RATE:g}/s: "
              f"p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms (the approve request alone: p50 "
              f"{lat['approve']:.1f} ms)")
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
