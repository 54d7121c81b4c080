"""How much the API layer costs: GET /api/settings against a bare Flask + psycopg route.

Both under gunicorn (2 sync workers); one sequential client, interleaved rounds."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import psycopg
import requests
from flask import Flask, Response

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

bare = Flask("bare", static_folder=None)   # the baseline: `gunicorn api_overhead:bare`
_conn: list = [None, None]   # one connection a worker process, opened after the fork


@bare.get("/bare")
def bare_route() -> Response:
    if _conn[0] is None or _conn[0].closed or _conn[1] != os.getpid():
        _conn[:] = psycopg.connect(os.environ["BENCH_PG_CONNINFO"], autocommit=True, connect_timeout=3), os.getpid()
    row = _conn[0].execute("SELECT id, name FROM tenants LIMIT 1").fetchone()
    return Response(json.dumps({"id": row[0], "name": row[1]} if row else None), mimetype="application/json")


def drive(session: requests.Session, url: str, headers: list[dict], n: int, done: int, latencies: list | None) -> None:
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
    # a key never over the limit in total is never over it within a minute
    keys_needed = max(1, args.keys, math.ceil((args.warmup + args.requests + 1) / (limit * 0.9)))
    db = bench.database()
    tenant = bench.tenant(db, PLAN, keys=keys_needed)
    auth = [{"Authorization": f"Bearer {k}"} for k in tenant.keys]
    (ours_srv, first), bare_srv = bench.api(db, auth[0], PLAN), bench.gunicorn(db, "api_overhead:bare", "bare", h.BENCH, "/bare")
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
