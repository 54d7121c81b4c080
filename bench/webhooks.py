"""Webhook throughput: signed deliveries/s through `cs worker` against a plain signing script.

`webhooks.py receiver` is the loopback receiver (asyncio, 200 at once, counts POSTs and
webhook-ids); `webhooks.py baseline SPEC.json` signs and POSTs the same bodies with N
threads sharing one requests.Session."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from types import SimpleNamespace

import psycopg
import requests

import harness as h

GOAL = 0.5
EVENT = "user.risk_changed"
# The sweep's log line as cs formats it (Dramatiq's own handler repeats it in its format).
SWEPT = re.compile(r"^\S+ \S+ INFO cs_daemon\.delivery\.actors: re-enqueued (\d+) due deliveries", re.M)
DELIVERED = "SELECT count(*) FROM deliveries WHERE status = 'delivered'"

OPTIONS = """
--deliveries 5000   >=100 measured deliveries per side
--rounds 3          interleaved rounds baseline/service, the deliveries split among them
--processes 1       >=1 worker processes
--threads 8         >=1 threads per worker process
--warmup 200        >=0 warm-up deliveries
--strict            exit 1 when the ratio misses the goal
"""


def payload(i: int) -> dict:
    return {"user_id": f"user-{i:06d}", "previous_risk": "low", "new_risk": "high",
            "changed_at": "2026-11-02T09:30:00Z", "score": 37 + i % 50,
            "reasons": ["login_drop", "support_tickets"]}


def setup(bench: h.Bench) -> SimpleNamespace:
    from cs_daemon.webhooks import service as webhooks

    db = bench.database()
    receiver = bench.start(h.Server("receiver", [sys.executable, __file__, "receiver"], h.service_env(), bench.tmp))
    url = "http://" + receiver.wait_until(lambda: re.search(r"listening on (\S+)", receiver.tree.root.stdout()),
                                          10).group(1)
    tenant = bench.tenant(db, "growth", rt=bench.runtime(db, allow_private_webhook_urls=True))
    tenant.rt.install_broker()  # deliveries are enqueued on Redis at commit
    with tenant.rt.session(tenant.id) as s:
        _, secret = webhooks.register(s, tenant.id, url=f"{url}/hook", description="bench", events=None,
                                      now=tenant.rt.now(), secret_key=bench.secret, allow_private=True)
    return SimpleNamespace(db=db, rt=tenant.rt, tenant_id=tenant.id, receiver=receiver, receiver_url=url,
                           endpoint_secret=secret, worker=None)


def receiver_stats(env) -> dict:
    return requests.get(f"{env.receiver_url}/stats", timeout=5).json()


def run_baseline(bench: h.Bench, env, bodies: list[str], threads: int, warmup: int) -> dict:
    spec = {"url": f"{env.receiver_url}/hook", "secret": env.endpoint_secret, "threads": threads, "warmup": warmup,
            "items": [{"id": str(uuid.uuid4()), "event_id": str(uuid.uuid4()), "body": b} for b in bodies]}
    path = bench.tmp / "baseline.json"
    path.write_text(json.dumps(spec))
    before = receiver_stats(env)
    done = subprocess.run([sys.executable, __file__, "baseline", str(path)], cwd=bench.tmp,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise h.BenchError(f"baseline failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["errors"]:
        raise h.BenchError(f"baseline: {result['errors']} POSTs failed")
    got = receiver_stats(env)["posts"] - before["posts"]
    if got != len(bodies) + warmup:
        raise h.BenchError(f"baseline: the receiver got {got} POSTs, expected {len(bodies) + warmup}")
    return result


def record_events(env, events: list[tuple[str, dict]]) -> tuple[float, float]:
    """The events in one transaction (the deliveries enqueued at commit): (commit started, done)."""
    from cs_daemon.outbox import service as outbox

    with env.rt.session(env.tenant_id) as s:
        outbox.record_many(s, env.tenant_id, events, now=env.rt.now())
        s.flush()
        t0 = time.perf_counter()
    return t0, time.perf_counter()


def wait_delivered(env, conn: psycopg.Connection, total: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while (n := conn.execute(DELIVERED).fetchone()[0]) < total:
        env.worker.check()
        if time.monotonic() > deadline:
            other = conn.execute("SELECT status, count(*) FROM deliveries GROUP BY status").fetchall()
            raise h.BenchError(f"only {n}/{total} delivered after {timeout:.0f} s ({other})\n"
                               f"{env.worker.log()[-3000:]}")
        time.sleep(0.05)
    return time.perf_counter()


def run_service(env, first: int, n: int) -> dict:
    with psycopg.connect(h.conninfo(env.db), autocommit=True) as conn:
        already = conn.execute(DELIVERED).fetchone()[0]
        stats_before, sweeps_before = receiver_stats(env), len(SWEPT.findall(env.worker.log()))
        meter = h.CpuMeter(lambda: families(env))
        t0, t_enq = record_events(env, [(EVENT, payload(i)) for i in range(first, first + n)])
        t1 = wait_delivered(env, conn, already + n, max(120.0, n / 20))
        cpu = meter.stop()
    stats_after = receiver_stats(env)
    return {"n": n, "seconds": t1 - t0, "enqueue_seconds": t_enq - t0, "cpu": cpu,
            "posts": stats_after["posts"] - stats_before["posts"], "ids": stats_after["ids"] - stats_before["ids"],
            "sweeps": [int(x) for x in SWEPT.findall(env.worker.log())[sweeps_before:]]}


def families(env) -> dict[str, list[int]]:
    table = h.processes()
    return {"worker": [env.worker.pid] + [p.pid for p in h.descendants(env.worker.pid, table)],
            **h.stores(env.db, table), "receiver": [env.receiver.pid], "bench": [os.getpid()]}


def attempt_summary(env) -> dict:
    with psycopg.connect(h.conninfo(env.db), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), avg(latency_ms), percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms), "
            "count(*) FILTER (WHERE status_code IS DISTINCT FROM 200) FROM delivery_attempts").fetchone()
        per = conn.execute("SELECT max(attempts), count(*) FILTER (WHERE status <> 'delivered') FROM deliveries"
                           ).fetchone()
        stored = {r[0] for r in conn.execute("SELECT body FROM deliveries")}
    if row[3] or per[1]:
        raise h.BenchError(f"{row[3]} attempts did not get a 200; {per[1]} deliveries not delivered")
    return {"attempts": row[0], "avg": float(row[1]), "p50": float(row[2]), "max_attempts": per[0], "bodies": stored}


def run(bench: h.Bench, args) -> int:
    from cs_daemon.delivery.service import encode
    from cs_daemon.jobs.heartbeat import last_beat_age

    load, threads, n = os.getloadavg()[0], args.processes * args.threads, args.deliveries
    env = setup(bench)
    # The bodies the deliveries carry, byte for byte (the outbox adds "event").
    bodies = [encode({"event": EVENT, **payload(i)}) for i in range(n)]
    env.worker = bench.cs(env.db, "worker", "worker", "--processes", str(args.processes), "--threads",
                          str(args.threads), ALLOW_PRIVATE_WEBHOOK_URLS="1", CS_LOG_LEVEL="INFO")
    env.worker.wait_until(lambda: last_beat_age(env.rt.cache) is not None, 60, 0.05)
    if args.warmup:
        with psycopg.connect(h.conninfo(env.db), autocommit=True) as conn:
            record_events(env, [(EVENT, payload(-1 - i)) for i in range(args.warmup)])
            wait_delivered(env, conn, args.warmup, 120)
    runs: dict[str, list[dict]] = {"baseline": [], "service": []}
    bounds = [n * r // args.rounds for r in range(args.rounds + 1)]
    for r, side in h.interleave(args.rounds, list(runs)):
        lo, hi = bounds[r], bounds[r + 1]
        h.say(f"round {r + 1}/{args.rounds}: {side} ({hi - lo} deliveries, {threads} threads) ...")
        runs[side].append(run_baseline(bench, env, bodies[lo:hi], threads, min(args.warmup, 100))
                          if side == "baseline" else run_service(env, lo, hi - lo))
    attempts = attempt_summary(env)
    if not set(bodies) <= attempts["bodies"]:
        raise h.BenchError("the baseline's bodies differ from the deliveries' bodies")

    rate = {k: sum(x["n"] for x in v) / sum(x["seconds"] for x in v) for k, v in runs.items()}
    ratio, svc = rate["service"] / rate["baseline"], runs["service"]
    posts, ids = sum(x["posts"] for x in svc), sum(x["ids"] for x in svc)
    cpu = {k: sum(x["cpu"][k] for x in svc) for k in svc[0]["cpu"]}
    seconds = sum(x["seconds"] for x in svc)
    print("\nWebhook deliveries: `cs worker` (Dramatiq on Redis, PostgreSQL) vs a plain signing script")
    print(f"  {n} deliveries a side of ~{sum(map(len, bodies)) // n} B bodies to a loopback receiver "
          f"(asyncio, 200 at once), in {args.rounds} interleaved rounds; {threads} threads a side; "
          f"{h.CPUS} CPUs, load average before the run {load:.1f}\n")
    labels = {"baseline": "baseline (requests.Session, sign + POST)",
              "service": f"service ({args.processes} x {args.threads}, commit -> all delivered)"}
    print(h.table([[labels[k], f"{sum(x['seconds'] for x in v):.2f}", f"{rate[k]:.0f}",
                    " ".join(f"{x['n'] / x['seconds']:.0f}" for x in v)] for k, v in runs.items()],
                  ["side", "seconds", "deliv/s", "rounds"], "<>><"))
    print(f"\n  ratio (service / baseline): {ratio:.2f}   goal: >= {GOAL} ({'met' if ratio >= GOAL else 'NOT met'})\n")
    print(f"  enqueueing {n} messages at commit took {sum(x['enqueue_seconds'] for x in svc):.2f} s "
          f"(inside the measured time)")
    print(f"  the receiver got {posts} POSTs for {ids} webhook-ids ({posts - ids} sent twice); "
          f"{attempts['attempts']} attempts recorded (with {args.warmup} warm-up), "
          f"at most {attempts['max_attempts']} a delivery")
    print(f"  attempt latency as recorded (resolve + connect + POST + answer): avg {attempts['avg']:.2f} ms, "
          f"p50 {attempts['p50']:.2f} ms")
    print(f"  sweeps during the measurement re-enqueued: {[x for r in svc for x in r['sweeps']] or 'nothing'}")
    busy = ", ".join(f"{k}{' (shared)' if k == 'redis' else ''} {v:.1f} s ({v / n * 1000:.2f} ms a delivery)"
                     for k, v in cpu.items())
    print(f"  CPU during the service rounds ({seconds:.1f} s wall x {h.CPUS} CPUs): {busy}")
    return 1 if args.strict and ratio < GOAL else 0


def check(args) -> str | None:
    if not 1 <= args.rounds <= args.deliveries // 50:
        return "1 <= --rounds <= deliveries / 50"


# --- the baseline: sign (both signature headers) and POST prepared bodies, N threads sharing a Session

def sign(secret: bytes, body: bytes, delivery_id: str, event_id: str) -> dict[str, str]:
    now = datetime.now(timezone.utc)
    ts = int(now.timestamp())
    mac = hmac.new(secret, f"{delivery_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return {"Content-Type": "application/json", "User-Agent": "Service-Webhook/1.0",
            "X-Service-Signature": hmac.new(secret, body, hashlib.sha256).hexdigest(),
            "X-Service-Timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "webhook-id": delivery_id,
            "webhook-timestamp": str(ts), "webhook-signature": "v1," + base64.b64encode(mac).decode(),
            "X-Service-Event-Id": event_id}


def post_all(session: requests.Session, url: str, secret: bytes, items: list, threads: int) -> tuple[float, int]:
    lock, it, errors = threading.Lock(), iter(items), [0]

    def work() -> None:
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                return
            try:
                resp = session.post(url, data=item[2], headers=sign(secret, item[2], *item[:2]), timeout=10)
                ok = 200 <= resp.status_code < 300 and resp.content is not None
            except requests.RequestException:
                ok = False
            if not ok:
                with lock:
                    errors[0] += 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start, errors[0]


def baseline_main(path: str) -> int:
    spec = json.loads(open(path).read())
    secret, items = spec["secret"].encode(), [(i["id"], i["event_id"], i["body"].encode()) for i in spec["items"]]
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=max(10, spec["threads"])))
    post_all(session, spec["url"], secret, [(str(uuid.uuid4()), e, b) for _, e, b in items[:spec["warmup"]]],
             spec["threads"])
    seconds, errors = post_all(session, spec["url"], secret, items, spec["threads"])
    print(json.dumps({"n": len(items), "seconds": seconds, "rate": len(items) / seconds, "errors": errors}))
    return 0


# --- the receiver: HTTP/1.1 keep-alive, every POST read whole and answered 200 at once; GET /stats

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


class Receiver(asyncio.Protocol):
    posts, ids = 0, set()

    def connection_made(self, transport):
        self.transport, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            lines = self.buf[:end].split(b"\r\n")
            head = {k.strip().lower(): v.strip() for k, _, v in (x.partition(b":") for x in lines[1:])}
            length = int(head.get(b"content-length") or 0)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            if lines[0].startswith(b"POST"):
                Receiver.posts += 1
                Receiver.ids.add(head.get(b"webhook-id"))
                self.transport.write(OK)
            else:
                body = json.dumps({"posts": Receiver.posts, "ids": len(Receiver.ids - {None})}).encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                     + str(len(body)).encode() + b"\r\n\r\n" + body)


async def receiver_main() -> None:
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    server = await loop.create_server(Receiver, h.HOST, 0, backlog=1024, reuse_address=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"listening on {h.HOST}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await stop.wait()

if __name__ == "__main__":
    if sys.argv[1:2] == ["receiver"]:
        asyncio.run(receiver_main())
    elif sys.argv[1:2] == ["baseline"]:
        sys.exit(baseline_main(sys.argv[2]))
    else:
        sys.exit(h.main("webhooks", __doc__, OPTIONS, run, check))
