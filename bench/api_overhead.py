"""How much the API layer costs: GET /api/settings against a bare Flask + psycopg route.

    .venv/bin/python bench/api_overhead.py            # or: just bench

On a fresh database (bench/harness.py) with a tenant on the "scale" plan (30,000 requests a
minute a key; more admin keys, rotated, when the request count needs them), it starts two
gunicorns, 2 sync workers each: the real app (webapp.wsgi:app, production mode) and
bench/bare_app.py (one raw psycopg query a request). One sequential client
(requests.Session) drives both: warm-up first, then the measured requests interleaved in
rounds so that drift hits both alike. It prints p50/p95/p99/mean latency, throughput and
the p50 ratio (ours / bare; goal <= 2.0). --strict: exit 1 when the goal is missed."""

from __future__ import annotations

import math
import os
import sys
import time

import requests

import harness as h

GOAL = 2.0
PLAN = "scale"

OPTIONS = """
--requests 3000  >=100 measured requests per target
--warmup 300     >=0 warm-up requests per target
--rounds 10      >=1 interleaved rounds
--budget 100.0   seconds for the whole run: rounds that would end later are skipped
--keys 1         API keys to rotate at least (more are issued when the request count needs them)
--strict         exit 1 when the p50 ratio misses the goal
"""


def drive(session: requests.Session, url: str, headers: list[dict], n: int, done: int, latencies: list | None) -> None:
    """n sequential GETs, the headers rotated; each latency is request sent -> whole body read."""
    perf = time.perf_counter
    for i in range(n):
        t0 = perf()
        resp = session.get(url, headers=headers[(done + i) % len(headers)], timeout=10)
        _ = resp.content
        t1 = perf()
        if resp.status_code != 200:
            raise h.BenchError(f"{url}: HTTP {resp.status_code}: {resp.text[:300]}")
        if latencies is not None:
            latencies.append(t1 - t0)


def run(bench: h.Bench, args) -> int:
    from cs_daemon.plans import plan

    t_start = time.monotonic()
    limit = plan(PLAN).requests_per_minute
    # A key never exceeding the limit in total can never exceed it within a minute.
    keys_needed = max(1, args.keys, math.ceil((args.warmup + args.requests + 1) / (limit * 0.9)))
    db = bench.database()
    h.say(f"setting up: database {db}, Redis prefix {bench.prefix}")
    tenant = bench.tenant(db, PLAN, keys=keys_needed)
    auth = [{"Authorization": f"Bearer {k}"} for k in tenant.keys]
    (ours_srv, first), bare_srv = bench.api(db, auth[0], PLAN), bench.gunicorn(db, "bare_app:app", "bare", h.BENCH)
    bare_srv.wait_http("/bare")
    h.say(f"servers up after {time.monotonic() - t_start:.1f} s; warming up")
    targets = {"GET /api/settings": (ours_srv.url("/api/settings"), auth), "GET /bare": (bare_srv.url("/bare"), [{}])}
    lat: dict[str, list[float]] = {t: [] for t in targets}
    done = dict.fromkeys(targets, 0)
    wall = dict.fromkeys(targets, 0.0)
    session = requests.Session()  # keep-alive where the server allows it (sync workers close)
    per_round = math.ceil(args.requests / args.rounds)
    for n in (args.warmup // 2, args.warmup - args.warmup // 2):  # both workers of each get warm
        for t in ("GET /bare", "GET /api/settings"):
            drive(session, *targets[t], n, done[t], None)
            done[t] += n
    probe = h.LoadProbe()
    rounds = 0
    for r, t in h.interleave(args.rounds, ["GET /bare", "GET /api/settings"], args.budget, t_start):
        n = min(per_round, args.requests - r * per_round)
        if n <= 0:
            break
        dt, _ = h.timed(lambda: drive(session, *targets[t], n, done[t], lat[t]))
        done[t], wall[t], rounds = done[t] + n, wall[t] + dt, r + 1
    session.close()
    for srv in (ours_srv, bare_srv):
        srv.check()

    s = {t: h.summary(lat[t]) for t in targets}
    ratio = s["GET /api/settings"]["p50"] / s["GET /bare"]["p50"]
    print("\nAPI overhead: GET /api/settings vs a bare Flask route doing one raw psycopg query")
    print(f"  gunicorn 2 sync workers each, 127.0.0.1; one sequential client (requests.Session); "
          f"{s['GET /bare']['n']} measured requests per target after {args.warmup} warm-up, "
          f"interleaved in {rounds} rounds")
    print(f"  tenant plan {PLAN} ({limit}/min a key), {len(tenant.keys)} key(s) rotated, "
          f"{len(first.json()['api_keys'])} key(s) listed in the response\n")
    print(h.table([[t, *(x[k] for k in ("p50", "p95", "p99", "mean")), f"{x['n'] / wall[t]:.0f}"]
                   for t, x in s.items()], ["endpoint", "p50 ms", "p95 ms", "p99 ms", "mean ms", "req/s"]))
    print(f"\n  p50 ratio (ours / bare): {ratio:.2f}   goal: <= {GOAL:.1f} ({'met' if ratio <= GOAL else 'NOT met'})")
    print(f"  p50 overhead of the API layer: {s['GET /api/settings']['p50'] - s['GET /bare']['p50']:.2f} ms a request")
    print(f"  {probe.line()}")
    if max(probe.load0, os.getloadavg()[0]) > h.CPUS * 0.75:
        print("  NOTE: the machine was busy with other work; latencies are inflated and the ratio is "
              "less reliable - rerun on a quiet machine")
    return 1 if args.strict and ratio > GOAL else 0


def check(args) -> str | None:
    if not 1 <= args.keys <= 100:
        return "--keys takes 1 to 100"


if __name__ == "__main__":
    sys.exit(h.main("api", __doc__, OPTIONS, run, check))
