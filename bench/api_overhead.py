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
WARMUP = 300

OPTIONS = """
--requests 3000  >=100 measured requests per target
--rounds 10      >=1 interleaved rounds
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


def drive(session: requests.Session, url: str, headers: list[dict], n: int, done: int, latencies: list) -> int:
    """n requests, rotating the keys; the requests done so far."""
    for i in range(done, done + n):
        t0 = time.perf_counter()
        resp = session.get(url, headers=headers[i % len(headers)], timeout=10)
        _ = resp.content
        latencies.append(time.perf_counter() - t0)
        if resp.status_code != 200:
            raise h.BenchError(f"{url}: HTTP {resp.status_code}: {resp.text[:300]}")
    return done + n


def run(bench: h.Bench, args) -> int:
    from cs_daemon.plans import plan

    # a key never over the limit in total is never over it within a minute
    keys = max(1, math.ceil((WARMUP + args.requests + 1) / (plan(PLAN).requests_per_minute * 0.9)))
    db = bench.database()
    auth = [{"Authorization": f"Bearer {k}"} for k in bench.tenant(db, PLAN, keys=keys).keys]
    ours, bare_srv = bench.api(db, auth[0], PLAN)[0], bench.gunicorn(db, "api_overhead:bare", "bare", h.BENCH, "/bare")
    targets = {"GET /bare": (bare_srv.url("/bare"), [{}]), "GET /api/settings": (ours.url("/api/settings"), auth)}
    lat: dict[str, list[float]] = {t: [] for t in targets}
    done = dict.fromkeys(targets, 0)
    session = requests.Session()  # keep-alive where the server allows it (sync workers close)
    for n in (WARMUP // 2, WARMUP - WARMUP // 2):  # both workers of each get warm
        for t in targets:
            done[t] = drive(session, *targets[t], n, done[t], [])
    probe = h.LoadProbe()
    for r, t in h.interleave(args.rounds, list(targets)):
        n = args.requests * (r + 1) // args.rounds - args.requests * r // args.rounds
        done[t] = drive(session, *targets[t], n, done[t], lat[t])
    for srv in (ours, bare_srv):
        srv.check()
    p50 = {t: h.percentile(lat[t], 50) * 1000 for t in targets}
    ratio = p50["GET /api/settings"] / p50["GET /bare"]
    print(f"\nAPI overhead: GET /api/settings vs a bare Flask route doing one raw psycopg query (gunicorn 2 sync "
          f"workers each, one sequential client, {args.requests} requests a target in {args.rounds} rounds after "
          f"{WARMUP} warm-up, plan {PLAN}, {keys} key(s))")
    print(f"  p50: ours {p50['GET /api/settings']:.2f} ms, bare {p50['GET /bare']:.2f} ms; ratio {ratio:.2f} "
          f"(goal <= {GOAL:.1f}: {'met' if ratio <= GOAL else 'NOT met'}); overhead of the API layer "
          f"{p50['GET /api/settings'] - p50['GET /bare']:.2f} ms a request")
    print(f"  {probe.line()}")
    return 1 if args.strict and ratio > GOAL else 0


if __name__ == "__main__":
    sys.exit(h.main("api", __doc__, OPTIONS, run))
