"""Decision quality of POST /api/decisions/recommend on a simulated population, and its
latency with 10 options on a tenant with 1M logged decisions against a baseline checkout.

Quality: USERS users of four kinds, each answering a different one of five actions best
(hidden rates, RATES); the same rounds are replayed offline for the oracle, the best single
action, uniform random and the previous greedy estimator."""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path

import harness as h

DOC = __doc__
OPTIONS = """
--decisions 1200 recommendations in the quality run
--users 200 simulated users
--seed 7 the population's random seed
--logged 1_000_000 logged decisions seeded for the latency run
--requests 400 timed recommend calls per side
--baseline '/work/main' a checkout of today's service (its recommend is the baseline)
--skip-latency only the quality run
--skip-quality only the latency run
--backends 'embedded,postgres' the backends of the quality run
--strict exit 1 when a goal is missed
"""
ACTIONS = ("feature_tour", "send_coupon", "call_user", "award_points", "invite_webinar")
KINDS = [("smb", "eu"), ("smb", "us"), ("ent", "eu"), ("ent", "us")]
RATES = {kind: {a: (0.6 if i == k else 0.1 + 0.03 * ((i + k) % 4)) for i, a in enumerate(ACTIONS)}
         for k, kind in enumerate(KINDS)}
BEST = {kind: max(r, key=r.get) for kind, r in RATES.items()}
WINDOW = 100


def population(users: int, seed: int) -> list[tuple[str, tuple[str, str]]]:
    world = random.Random(seed)
    return [(f"sim-{i}", world.choice(KINDS)) for i in range(users)]


def rounds(people, decisions: int, seed: int) -> list[tuple[str, tuple[str, str], float]]:
    """Who is decided for in each round, and the uniform draw that settles the outcome."""
    world = random.Random(seed + 1)
    return [(*world.choice(people), world.random()) for _ in range(decisions)]


def greedy_previous(plan):
    """recommend before the learner: (1 + s_stage + s_all/2) / (2 + n_stage + n_all/2); every
    simulated user is in the same stage, so it is a greedy estimate over everyone."""
    s = {a: 0 for a in ACTIONS}
    n = {a: 0 for a in ACTIONS}
    for _, kind, u in plan:
        pick = max(ACTIONS, key=lambda a: ((1 + 1.5 * s[a]) / (2 + 1.5 * n[a]), -ACTIONS.index(a)))
        ok = u < RATES[kind][pick]
        s[pick] += ok
        n[pick] += 1
        yield pick


def expected(plan, picks) -> list[float]:
    return [RATES[kind][pick] for (_, kind, _), pick in zip(plan, picks)]


def serve_embedded(bench: h.Bench):
    """The app on SQLite (embedded) in this process, served on loopback by werkzeug."""
    import logging

    from werkzeug.serving import make_server

    from cs_daemon import migrate
    from cs_daemon.config import Settings
    from cs_daemon.runtime import Runtime
    from webapp import create_app

    data = bench.tmp / "embedded"
    data.mkdir()
    settings = Settings(cs_data_dir=data, database_url=None, redis_url=None, cs_secret_key=bench.secret,
                        allow_private_webhook_urls=True)
    migrate.upgrade(settings)
    rt = Runtime(settings)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server(h.HOST, h.free_port(), create_app(runtime=rt), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bench.cleanups.append(server.shutdown)
    return rt, f"http://{h.HOST}:{server.server_port}"


def setup_tenant(api: h.Api, people) -> None:
    for action in ACTIONS:
        api.call("POST", "/api/external/action-types", {
            "name": action, "description": action, "provider": "sim", "parameters_schema": {},
            "delivery_webhook": "http://127.0.0.1:9/hook"}, status=201)
    for i in range(0, len(people), 100):
        api.call("POST", "/api/track", {"events": [
            {"user_id": uid, "event": "$identify", "properties": {"plan": kind[0], "region": kind[1]}}
            for uid, kind in people[i:i + 100]]})


def run_engine(api: h.Api, plan) -> list[str]:
    picks = []
    for uid, kind, u in plan:
        body = api.call("POST", "/api/decisions/recommend", {
            "user_id": uid, "domain": "sim", "available_actions": list(ACTIONS),
            "context": {"plan": kind[0], "region": kind[1]}})
        pick = body["recommendation"]["action"]
        action = api.call("POST", "/api/external/actions", {"action_type": pick, "user_id": uid,
                                                             "decision_id": body["decision_id"]}, status=201)
        api.call("POST", f"/api/external/actions/{action['action']['id']}/outcome",
                 {"status": "completed" if u < RATES[kind][pick] else "ignored"})
        picks.append(pick)
    return picks


def quality(bench: h.Bench, args, backend: str) -> dict:
    people = population(args.users, args.seed)
    plan = rounds(people, args.decisions, args.seed)
    if backend == "postgres":
        db = bench.database("_q")
        tenant = bench.tenant(db)
        srv = bench.gunicorn(db, ALLOW_PRIVATE_WEBHOOK_URLS="true", CS_LOG_LEVEL="WARNING")
        api = h.Api(srv.url(), tenant.key)
    else:
        rt, url = serve_embedded(bench)
        from cs_daemon.tenants import service as tenants

        with rt.session() as s:
            made = tenants.create(s, name="Bench", owner_email="owner@bench.example", now=rt.now(), plan_tier="scale")
        api = h.Api(url, made.key.secret)
    setup_tenant(api, people)
    started = time.monotonic()
    engine = expected(plan, run_engine(api, plan))
    seconds = time.monotonic() - started
    oracle = expected(plan, [BEST[kind] for _, kind, _ in plan])
    best_single = max(ACTIONS, key=lambda a: sum(RATES[k][a] for _, k, _ in plan))
    single = expected(plan, [best_single] * len(plan))
    uniform = [sum(RATES[kind].values()) / len(ACTIONS) for _, kind, _ in plan]
    greedy = expected(plan, list(greedy_previous(plan)))
    return {"engine": engine, "oracle": oracle, f"best single ({best_single})": single, "uniform": uniform,
            "previous greedy": greedy, "seconds": seconds}


def report(backend: str, res: dict, decisions: int) -> list[str]:
    names = [k for k in res if k != "seconds"]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    rows = []
    regret = 0.0
    for start in range(0, decisions, WINDOW):
        sl = slice(start, start + WINDOW)
        regret += sum(o - e for o, e in zip(res["oracle"][sl], res["engine"][sl]))
        rows.append([f"{start + 1}-{min(start + WINDOW, decisions)}", *(f"{mean(res[n][sl]):.3f}" for n in names),
                     f"{regret:.1f}"])
    print(f"\n{backend}: expected success rate per window of {WINDOW} decisions "
          f"({decisions} decisions through the API in {res['seconds']:.0f} s)")
    print(h.table(rows, ["decisions", *names, "engine regret (cum.)"]))
    half = slice(decisions // 2, None)
    second = {n: mean(res[n][half]) for n in names}
    single = next(n for n in names if n.startswith("best single"))
    print(h.table([[n, f"{v:.3f}"] for n, v in second.items()], ["second half", "success rate"]))
    vs_oracle, vs_single = second["engine"] / second["oracle"], second["engine"] / second[single]
    print(f"  engine / oracle = {vs_oracle:.2f} (goal ≥ 0.9); engine / best single = {vs_single:.2f} (goal ≥ 1.8); "
          f"engine / previous greedy = {second['engine'] / second['previous greedy']:.2f}")
    missed = []
    if vs_oracle < 0.9:
        missed.append(f"{backend}: engine / oracle {vs_oracle:.2f} < 0.9")
    if vs_single < 1.8:
        missed.append(f"{backend}: engine / best single {vs_single:.2f} < 1.8")
    return missed


# -- latency ------------------------------------------------------------------------------

SEED_SQL = """
INSERT INTO external_actions (tenant_id, id, action_type, user_id, status, parameters, confidence, lifecycle_stage,
                              outcome_status, attempts, test, created_at)
SELECT %(t)s, md5('a' || g), 'act_' || (g %% 10), 'lat-' || (1 + g %% 1000), 'completed', '{}'::json, 0.5,
       (ARRAY['new','activated','engaged'])[1 + (g / 10) %% 3],
       CASE WHEN g %% 7 < 2 + (g %% 10) / 4 THEN 'completed' ELSE 'ignored' END, 1, false,
       now() - (g || ' seconds')::interval
FROM generate_series(1, %(n)s) g;
INSERT INTO decision_log (tenant_id, id, kind, scope, user_id, domain, features, options, choice, propensity,
                          decided_by, external_action_id, test, created_at, success, outcome_at)
SELECT %(t)s, md5('d' || g), 'recommend', 'action', 'lat-' || (1 + g %% 1000), 'loyalty',
       json_build_object('lifecycle_stage', (ARRAY['new','activated','engaged'])[1 + (g / 10) %% 3],
                         'risk_level', 'low', 'plan', (ARRAY['smb','ent'])[1 + (g / 30) %% 2]),
       '[]'::json, 'act_' || (g %% 10), 0.1, 'learner', md5('a' || g), false, now() - (g || ' seconds')::interval,
       g %% 7 < 2 + (g %% 10) / 4, now()
FROM generate_series(1, %(n)s) g;
"""
COUNTS_SQL = """
INSERT INTO decision_counts (tenant_id, scope, option, key, successes, trials)
SELECT %(t)s::varchar, 'action', choice, k, sum(success::int), count(*)
FROM decision_log, LATERAL (VALUES ('*'),
     ('lifecycle_stage=' || (features->>'lifecycle_stage')),
     ('plan=' || (features->>'plan')),
     ('risk_level=' || (features->>'risk_level')),
     ('lifecycle_stage=' || (features->>'lifecycle_stage') || '&plan=' || (features->>'plan')
      || '&risk_level=' || (features->>'risk_level'))) AS keys(k)
WHERE tenant_id = %(t)s::varchar GROUP BY choice, k;
"""


def latency(bench: h.Bench, args) -> None:
    import psycopg

    db = bench.database("_lat")
    tenant = bench.tenant(db)
    h.say(f"seeding {args.logged:,} logged decisions and external actions")
    started = time.monotonic()
    with psycopg.connect(h.conninfo(db), autocommit=True) as conn:
        for statement in filter(str.strip, SEED_SQL.split(";")):
            conn.execute(statement, {"t": tenant.id, "n": args.logged})
        conn.execute(COUNTS_SQL, {"t": tenant.id})
        conn.execute("VACUUM ANALYZE")
    h.say(f"seeded in {time.monotonic() - started:.0f} s")
    ours = bench.gunicorn(db, CS_LOG_LEVEL="WARNING")
    base = bench.gunicorn(db, name="baseline", path=Path(args.baseline), CS_LOG_LEVEL="WARNING")
    h.Api(ours.url(), tenant.key).call("POST", "/api/track", {"events": [{"user_id": "lat-1", "event": "x"}]})
    body = {"user_id": "lat-1", "domain": "loyalty", "available_actions": [f"act_{i}" for i in range(10)],
            "context": {"plan": "smb"}}
    times, _ = h.sides({name: lambda api=h.Api(srv.url(), tenant.key): api.call("POST", "/api/decisions/recommend", body)
                        for name, srv in (("ours", ours), ("today", base))}, args.requests, 10)
    print(f"\nrecommend with 10 options, {args.logged:,} logged decisions (PostgreSQL, gunicorn, "
          f"{args.requests} calls a side, interleaved)")
    rows = [[n, f"{h.percentile(ts, 50) * 1000:.1f}", f"{h.percentile(ts, 99) * 1000:.1f}"] for n, ts in times.items()]
    print(h.table(rows, ["side", "p50 ms", "p99 ms"]))
    print(f"  p50 ours / today = {h.percentile(times['ours'], 50) / h.percentile(times['today'], 50):.2f} (goal ≤ 1.0)")


def run(bench: h.Bench, args) -> int:
    missed = []
    for backend in args.backends.split(",") if not args.skip_quality else ():
        missed += report(backend, quality(bench, args, backend), args.decisions)
    if not args.skip_latency:
        latency(bench, args)
    for line in missed:
        h.say("goal missed: " + line)
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(h.main("decision_quality", DOC, OPTIONS, run))
