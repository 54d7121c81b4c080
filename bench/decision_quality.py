"""Decision quality of POST /api/decisions/recommend on a simulated population, and its latency.

USERS users of four kinds, each answering a different one of five actions best, on the embedded
and the PostgreSQL backend; the latency with 10 options on a tenant with --logged logged decisions."""

from __future__ import annotations

import random
import sys
import time

import harness as h

OPTIONS = """
--decisions 1200     >=2 recommendations in each quality run
--logged 1_000_000   >=1 logged decisions seeded for the latency run
--requests 400       >=1 timed recommend calls
--strict             exit 1 when a goal is missed
"""
USERS = 200
SEED = 7
ACTIONS = ("feature_tour", "send_coupon", "call_user", "award_points", "invite_webinar")
KINDS = [("smb", "eu"), ("smb", "us"), ("ent", "eu"), ("ent", "us")]
RATES = {kind: {a: (0.6 if i == k else 0.1 + 0.03 * ((i + k) % 4)) for i, a in enumerate(ACTIONS)}
         for k, kind in enumerate(KINDS)}     # the hidden success rates
BEST = {kind: max(r, key=r.get) for kind, r in RATES.items()}


def expected(plan, picks) -> list[float]:
    return [RATES[kind][pick] for (_, kind, _), pick in zip(plan, picks)]


def serve_embedded(bench: h.Bench):
    """The app on SQLite (embedded) in this process, served on loopback by werkzeug."""
    import logging

    from cs_daemon import migrate
    from cs_daemon.config import Settings
    from cs_daemon.runtime import Runtime
    from tests.support.sse import AppServer
    from webapp import create_app

    settings = Settings(cs_data_dir=bench.tmp / "embedded", database_url=None, redis_url=None,
                        cs_secret_key=bench.secret, allow_private_webhook_urls=True)
    migrate.upgrade(settings)
    rt = Runtime(settings)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = AppServer(create_app(runtime=rt))
    bench.cleanups.append(server.close)
    return rt, server.url


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


def quality(bench: h.Bench, args, backend: str) -> list[str]:
    """The expected success rate of the second half of the decisions, against the oracle, the best
    single action and uniform random replayed on the same rounds; the goals missed."""
    world = random.Random(SEED)
    people = [(f"sim-{i}", world.choice(KINDS)) for i in range(USERS)]
    world = random.Random(SEED + 1)     # who is decided for in each round, the draw that settles the outcome
    plan = [(*world.choice(people), world.random()) for _ in range(args.decisions)]
    if backend == "postgres":
        db = bench.database("_q")
        tenant = bench.tenant(db)
        api = h.Api(bench.gunicorn(db, ALLOW_PRIVATE_WEBHOOK_URLS="true", CS_LOG_LEVEL="WARNING").url(), tenant.key)
    else:
        rt, url = serve_embedded(bench)
        api = h.Api(url, bench.tenant("", rt=rt).key)
    setup_tenant(api, people)
    started = time.monotonic()
    engine = expected(plan, run_engine(api, plan))
    seconds = time.monotonic() - started
    best = max(ACTIONS, key=lambda a: sum(RATES[k][a] for _, k, _ in plan))
    single, half = f"best single ({best})", slice(args.decisions // 2, None)
    second = {name: sum(rates[half]) / len(rates[half]) for name, rates in (
        ("engine", engine), ("oracle", expected(plan, [BEST[kind] for _, kind, _ in plan])),
        (single, expected(plan, [best] * len(plan))),
        ("uniform", [sum(RATES[kind].values()) / len(ACTIONS) for _, kind, _ in plan]))}
    vs_oracle, vs_single = second["engine"] / second["oracle"], second["engine"] / second[single]
    print(f"\n{backend}: expected success rate of the second half of {args.decisions} decisions through the API "
          f"({seconds:.0f} s)")
    print(h.table([[n, f"{v:.3f}"] for n, v in second.items()], ["side", "success rate"]))
    print(f"  engine / oracle = {vs_oracle:.2f} (goal ≥ 0.9); engine / best single = {vs_single:.2f} (goal ≥ 1.8)")
    missed = [f"{backend}: engine / oracle {vs_oracle:.2f} < 0.9"] * (vs_oracle < 0.9)
    return missed + [f"{backend}: engine / best single {vs_single:.2f} < 1.8"] * (vs_single < 1.8)


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
    with psycopg.connect(h.conninfo(db), autocommit=True) as conn:
        for statement in filter(str.strip, SEED_SQL.split(";")):
            conn.execute(statement, {"t": tenant.id, "n": args.logged})
        conn.execute(COUNTS_SQL, {"t": tenant.id})
        conn.execute("VACUUM ANALYZE")
    api = h.Api(bench.gunicorn(db, CS_LOG_LEVEL="WARNING").url(), tenant.key)
    api.call("POST", "/api/track", {"events": [{"user_id": "lat-1", "event": "x"}]})
    body = {"user_id": "lat-1", "domain": "loyalty", "available_actions": [f"act_{i}" for i in range(10)],
            "context": {"plan": "smb"}}
    times, _ = h.sides({"ours": lambda: api.call("POST", "/api/decisions/recommend", body)}, args.requests, 10)
    print(f"\nrecommend with 10 options, {args.logged:,} logged decisions (PostgreSQL, gunicorn, "
          f"{args.requests} calls): p50 {h.percentile(times['ours'], 50) * 1000:.1f} ms, "
          f"p99 {h.percentile(times['ours'], 99) * 1000:.1f} ms")


def run(bench: h.Bench, args) -> int:
    missed = quality(bench, args, "embedded") + quality(bench, args, "postgres")
    latency(bench, args)
    for line in missed:
        h.say("goal missed: " + line)
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(h.main("decision_quality", __doc__, OPTIONS, run))
