"""Analytics latency: GET /api/analytics?range=90d (in process, every layer) against a raw
GROUP BY scan of the same tenant's events, on a corpus seeded in SQL."""

from __future__ import annotations

import statistics
import sys
from datetime import datetime, timedelta, timezone

import psycopg

import harness as h

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)
GOAL = 0.1
PLAN = "scale"
RAW_SCAN = ("SELECT event, count(*) FROM events WHERE tenant_id = %(t)s AND timestamp >= %(since)s "
            "AND NOT test GROUP BY event")
EXPECTED = """
SELECT (SELECT count(*) FROM customers WHERE tenant_id = %(t)s AND NOT test),
       (SELECT count(*) FROM interventions WHERE tenant_id = %(t)s AND NOT test AND planned_at >= %(since)s
        AND status <> 'shadow' AND channel <> 'escalate'),
       (SELECT count(*) FROM events WHERE tenant_id = %(t)s)
"""   # what the answer must show (total_users, total_interventions), and what the raw scan must count
AREAS = ["onboarding", "activation", "engagement", "retention", "expansion"]
TABLES = ("customers", "events", "interventions", "playbooks")

WARMUP = 2
OPTIONS = """
--events 10_000_000    >=1 events over 90 days
--users 200_000        >=100 customers
--interventions 60_000  >=1 interventions over 120 days
--runs 7               >=1 measured runs of each side
--strict               exit 1 when the goal is missed or a check fails
"""

# --- the corpus, made on the server -----------------------------------------------------------

CUSTOMERS = """
INSERT INTO customers (tenant_id, id, name, email, locale, team_size, traits, lifecycle_stage, health,
                       activation_score, engagement_score, expansion_score, risk_level, last_activity_at, created_at,
                       updated_at, scored_at, test, state, opted_out)
SELECT %(t)s, 'u' || lpad(g::text, 7, '0'), 'User ' || g, 'user' || g || '@example.com',
       CASE WHEN r4 < 0.85 THEN (ARRAY['en', 'en', 'de', 'fr', 'es', 'ja'])[1 + floor(r4 / 0.85 * 6)::int] END,
       CASE WHEN r5 < 0.75 THEN least(2000, floor(0.75 / (0.75 - r5)))::int END,
       json_strip_nulls(json_build_object(
           'plan', CASE WHEN r4 < 0.95 THEN (ARRAY['free', 'starter', 'pro', 'enterprise'])[1 + floor(r6 * r6 * 4)::int]
                   END,
           'seats', CASE WHEN r5 < 0.8 THEN to_json(least(5000, floor(1 / (1 - r6))::int))
                         WHEN r5 < 0.85 THEN to_json(floor(1 / (1 - r6))::text) END,    -- a string: never numeric
           'tags', CASE WHEN g %% 50 = 0 THEN to_json('beta tester'::text)             -- a string tag
                        WHEN g %% 10 < 7 THEN to_json(array_remove(ARRAY[CASE WHEN g %% 3 = 0 THEN 'beta' END,
                            CASE WHEN g %% 7 = 0 THEN 'vip' END, CASE WHEN g %% 11 = 0 THEN 'api' END], NULL)) END)),
       stage, round((r2 * 100)::numeric, 1), round((r3 * 100)::numeric, 1), round((r2 * 90)::numeric, 1),
       round((r3 * r3 * 100)::numeric, 1),
       CASE WHEN stage = 'at_risk' THEN (CASE WHEN r2 < 0.35 THEN 'critical' ELSE 'high' END)
            WHEN stage IN ('dormant', 'churned') THEN (ARRAY['medium', 'high', 'critical'])[1 + floor(r2 * 3)::int]
            ELSE (CASE WHEN r2 < 0.75 THEN 'low' WHEN r2 < 0.95 THEN 'medium' ELSE 'high' END) END,
       CASE WHEN r3 < 0.03 THEN NULL ELSE %(now)s - make_interval(secs => r3 * 86400 * CASE stage
            WHEN 'new' THEN 2 WHEN 'onboarding' THEN 10 WHEN 'activated' THEN 14 WHEN 'engaged' THEN 3
            WHEN 'at_risk' THEN 25 WHEN 'dormant' THEN 70 ELSE 160 END) END,
       %(now)s - make_interval(secs => (200 + r3 * 500) * 86400), %(now)s, %(now)s,
       g %% 100 = 0, '{}', '[]'
FROM (SELECT g, r1, r2, r3, r4, r5, r6,
             CASE WHEN r1 < 0.08 THEN 'new' WHEN r1 < 0.28 THEN 'onboarding' WHEN r1 < 0.53 THEN 'activated'
                  WHEN r1 < 0.75 THEN 'engaged' WHEN r1 < 0.87 THEN 'at_risk' WHEN r1 < 0.95 THEN 'dormant'
                  ELSE 'churned' END AS stage
      FROM (SELECT g, random() AS r1, random() AS r2, random() AS r3, random() AS r4, random() AS r5, random() AS r6
            FROM generate_series(1, %(users)s) g) r) s
"""

EVENTS = """
INSERT INTO events (id, tenant_id, user_id, event, properties, timestamp, received_at, source, test)
SELECT '00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'), %(t)s,
       'u' || lpad((1 + floor(random() * %(users)s))::int::text, 7, '0'),
       (%(names)s::text[])[1 + floor(power(random(), 1.6) * %(n_names)s)::int], '{}', ts, ts, 'api', false
FROM (SELECT g, %(now)s - make_interval(secs => random() * 90 * 86400) AS ts
      FROM generate_series(1, %(events)s) g) e
"""

PLAYBOOKS = """
INSERT INTO playbooks (id, tenant_id, name, status, lifecycle_area, entry_conditions, exit_conditions,
                       constraints, strategy_hints, test, created_at, updated_at)
SELECT '00000000-0000-4000-a000-' || lpad(to_hex(g), 12, '0'), %(t)s, 'playbook ' || g, 'active',
       (%(areas)s::text[])[1 + (g - 1) %% %(n_areas)s], '{}', '{}', '{}', '{}', false, %(now)s, %(now)s
FROM generate_series(1, 12) g
"""

INTERVENTIONS = """
INSERT INTO interventions (id, tenant_id, user_id, playbook_id, status, channel, source, flagged, outcome,
                           outcome_at, test, planned_at, delivered_at, updated_at)
SELECT '00000000-0000-4000-9000-' || lpad(to_hex(g), 12, '0'), %(t)s,
       'u' || lpad((1 + floor(r1 * %(users)s))::int::text, 7, '0'),
       '00000000-0000-4000-a000-' || lpad(to_hex(1 + floor(r2 * 12)::int), 12, '0'),
       status, channel, 'engine', false,
       CASE WHEN status = 'delivered' THEN (CASE WHEN r3 < 0.4 THEN 'positive' WHEN r3 < 0.6 THEN 'negative'
                                                WHEN r3 < 0.8 THEN 'neutral' WHEN r3 < 0.9 THEN 'pending' END) END,
       CASE WHEN status = 'delivered' AND r3 < 0.8 THEN planned + make_interval(secs => 3600 + r3 * 10 * 86400) END,
       g %% 50 = 0, planned, CASE WHEN status = 'delivered' THEN planned + interval '1 hour' END, planned
FROM (SELECT g, r1, r2, r3, %(now)s - make_interval(secs => r4 * 120 * 86400) AS planned,
             CASE WHEN r2 < 0.05 THEN 'escalate' WHEN r2 < 0.55 THEN 'email' WHEN r2 < 0.85 THEN 'in_app'
                  ELSE 'webhook' END AS channel,
             CASE WHEN r5 < 0.60 THEN 'delivered' WHEN r5 < 0.68 THEN 'failed' WHEN r5 < 0.75 THEN 'sent'
                  WHEN r5 < 0.80 THEN 'planned' WHEN r5 < 0.85 THEN 'approved' WHEN r5 < 0.90 THEN 'rejected'
                  WHEN r5 < 0.95 THEN 'shadow' ELSE 'rolled_back' END AS status
      FROM (SELECT g, random() AS r1, random() AS r2, random() AS r3, random() AS r4, random() AS r5
            FROM generate_series(1, %(interventions)s) g) r) s
"""

STEPS = (("customers", CUSTOMERS), ("events", EVENTS), ("playbooks", PLAYBOOKS), ("interventions", INTERVENTIONS))


def params(tenant_id: str, args) -> dict:
    """The SQL's parameters: the options' sizes and the vocabulary."""
    return {"t": tenant_id, "now": NOW, "names": h.EVENT_NAMES, "n_names": len(h.EVENT_NAMES), "areas": AREAS,
            "n_areas": len(AREAS), **vars(args)}


def _ms(values: list[float]) -> str:
    s = h.summary(values)
    return f"p50 {s['p50']:8.1f} ms   min {s['min']:8.1f} ms   max {s['max']:8.1f} ms"


def run(bench: h.Bench, args) -> int:
    from cs_daemon.clock import FakeClock
    from webapp import create_app

    db = bench.database()
    h.say(f"database {db}: seeding {args.users:,} users, {args.events:,} events, {args.interventions:,} interventions")
    rt = bench.runtime(db, FakeClock(NOW), redis_url=None, cs_log_level="WARNING")
    tenant = bench.tenant(db, PLAN, now=NOW, rt=rt)
    h.reload(db, TABLES, lambda: h.seed_sql(db, tenant.id, STEPS, params(tenant.id, args), args.users))
    raw = psycopg.connect(h.conninfo(db))
    bench.cleanups.append(raw.close)
    window = {"t": tenant.id, "since": NOW - timedelta(days=90)}
    want = dict(zip(("total_users", "total_interventions", "events"), raw.execute(EXPECTED, window).fetchone()))
    client, headers = create_app(runtime=rt).test_client(), {"Authorization": f"Bearer {tenant.key}"}

    def endpoint():
        resp = client.get("/api/analytics?range=90d", headers=headers)
        if resp.status_code != 200:
            raise h.BenchError(f"GET /api/analytics answered {resp.status_code}: {resp.get_data(as_text=True)[:200]}")
        return resp.get_json()

    def scan():
        rows = raw.execute(RAW_SCAN, window).fetchall()
        raw.rollback()
        return rows

    probe = h.LoadProbe()
    times, last = h.sides({"endpoint": endpoint, "scan": scan}, args.runs, WARMUP)
    ours, theirs, answer, rows = times["endpoint"], times["scan"], last["endpoint"], last["scan"]
    kpis, checks = answer["kpis"], []
    for k in ("total_users", "total_interventions"):
        if kpis[k] != want[k]:
            checks.append(f"{k} {kpis[k]} != {want[k]}")
    if sum(n for _, n in rows) != want["events"]:
        checks.append(f"the raw scan counted {sum(n for _, n in rows):,} events of {want['events']:,}")
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"\nAnalytics on PostgreSQL: {want['events']:,} events over 90 days, {args.users:,} customers, "
          f"{args.interventions:,} interventions; one tenant; {args.runs} runs each after {WARMUP} warm-up rounds, "
          f"interleaved; {probe.line()}")
    print(f"  GET /api/analytics?range=90d (Flask test client, real app, in process)  {_ms(ours)}")
    print(f"  raw scan: SELECT event, count(*) ... GROUP BY event (psycopg)          {_ms(theirs)}")
    print(f"  ratio endpoint / raw scan (p50): {ratio:.4f}   goal <= {GOAL}: {'met' if ratio <= GOAL else 'MISSED'}")
    print(f"  answer: total_users {kpis['total_users']:,}, total_interventions {kpis['total_interventions']:,}; "
          f"checks against the tables: {'all agree' if not checks else '; '.join(checks)}")
    return 1 if args.strict and (checks or ratio > GOAL) else 0


if __name__ == "__main__":
    sys.exit(h.main("analytics", __doc__, OPTIONS, run))
