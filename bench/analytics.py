"""Analytics latency on PostgreSQL: GET /api/analytics?range=90d against a raw GROUP BY
scan of the same tenant's events, in the same run.

    .venv/bin/python bench/analytics.py                                   # 10M events, 200k users
    .venv/bin/python bench/analytics.py --events 500000 --users 20000     # a quick run

By itself it
  1. creates a fresh PostgreSQL database (unique name), migrates it with
     cs_daemon.migrate.upgrade and makes one tenant on the "scale" plan (its admin key
     is the one the endpoint is called with);
  2. seeds on the server, with INSERT ... SELECT FROM generate_series (setseed, so the
     corpus is the same every run), after dropping the indexes and constraints of the
     loaded tables (re-created afterwards with their exact migrated definitions):
       --users customers (1% of them test-mode): 7 lifecycle stages, risk levels that
         follow the stage, scores, last activity by stage (some past 90 days);
       --events events of 20 names (skewed mix) for random users over the last 90 days;
       12 playbooks over 5 lifecycle areas and --interventions interventions over the
         last 120 days: channels, statuses, outcomes with their times, some test-mode,
         shadow and escalations (what the endpoint must leave out);
     then VACUUM ANALYZE;
  3. times, interleaved, --runs times each after --warmup untimed rounds:
       endpoint: GET /api/analytics?range=90d with the tenant's key through Flask's test
                 client on the real app (create_app, every layer: auth, rate limit, the
                 tenant-scoped session, the service, validation of the answer, JSON),
                 in this process, with the clock fixed at the corpus' "now";
       raw scan: SELECT event, count(*) FROM events WHERE tenant_id = %s AND timestamp >=
                 now - 90 days AND NOT test GROUP BY event over one raw psycopg connection
                 (what answering from events at request time costs);
     and prints p50 / min / max of both and the ratio of the p50s (goal <= 0.1: analytics
     reads customers and interventions, never events);
  4. checks the answer against the corpus (users, interventions in range);
  5. drops the database, also on error or Ctrl-C (--keep-db keeps it).

Exit status: 0 when the measurement ran (--strict: 1 when the goal is missed or a check
fails), 2 when setup failed. CS_TEST_PG says where PostgreSQL is (as for the tests)."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from preview_count import LoadProbe, drop_indexes_and_constraints  # noqa: E402  (the same load helpers)

PG = os.environ.get("CS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
NOW = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)
GOAL = 0.1
PLAN = "scale"
DB_PREFIX = "cs_bench_analytics_"
RAW_SCAN = ("SELECT event, count(*) FROM events WHERE tenant_id = %(t)s AND timestamp >= %(since)s "
            "AND NOT test GROUP BY event")
EVENT_NAMES = ["page_viewed", "feature_used", "session_started", "login", "api_call", "report_viewed",
               "dashboard_viewed", "search_performed", "created_project", "logout", "comment_added",
               "file_uploaded", "export_created", "invited_teammate", "settings_changed",
               "integration_connected", "billing_viewed", "support_ticket_opened", "upgraded_plan", "seat_added"]
AREAS = ["onboarding", "activation", "engagement", "retention", "expansion"]


class BenchError(Exception):
    pass


def _conninfo(dbname: str) -> str:
    return PG.replace("postgresql+psycopg://", "postgresql://") + f"/{dbname}"


# --- the corpus, made on the server -----------------------------------------------------------

CUSTOMERS = """
INSERT INTO customers (tenant_id, id, name, email, traits, lifecycle_stage, health, activation_score,
                       engagement_score, expansion_score, risk_level, last_activity_at, created_at, updated_at,
                       scored_at, test, state, opted_out)
SELECT %(t)s, 'u' || lpad(g::text, 7, '0'), 'User ' || g, 'user' || g || '@example.com', '{}', stage,
       round((r2 * 100)::numeric, 1), round((r3 * 100)::numeric, 1), round((r2 * 90)::numeric, 1),
       round((r3 * r3 * 100)::numeric, 1),
       CASE WHEN stage = 'at_risk' THEN (CASE WHEN r2 < 0.35 THEN 'critical' ELSE 'high' END)
            WHEN stage IN ('dormant', 'churned') THEN (ARRAY['medium', 'high', 'critical'])[1 + floor(r2 * 3)::int]
            ELSE (CASE WHEN r2 < 0.75 THEN 'low' WHEN r2 < 0.95 THEN 'medium' ELSE 'high' END) END,
       CASE WHEN r3 < 0.03 THEN NULL ELSE %(now)s - make_interval(secs => r3 * 86400 * CASE stage
            WHEN 'new' THEN 2 WHEN 'onboarding' THEN 5 WHEN 'activated' THEN 7 WHEN 'engaged' THEN 3
            WHEN 'at_risk' THEN 25 WHEN 'dormant' THEN 70 ELSE 160 END) END,
       %(now)s - make_interval(secs => (200 + r3 * 500) * 86400), %(now)s, %(now)s,
       g %% 100 = 0, '{}', '[]'
FROM (SELECT g, r2, r3,
             CASE WHEN r1 < 0.08 THEN 'new' WHEN r1 < 0.28 THEN 'onboarding' WHEN r1 < 0.53 THEN 'activated'
                  WHEN r1 < 0.75 THEN 'engaged' WHEN r1 < 0.87 THEN 'at_risk' WHEN r1 < 0.95 THEN 'dormant'
                  ELSE 'churned' END AS stage
      FROM (SELECT g, random() AS r1, random() AS r2, random() AS r3
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


def seed(conninfo: str, tenant_id: str, args) -> dict[str, float]:
    params = {"t": tenant_id, "now": NOW, "users": args.users, "events": args.events,
              "interventions": args.interventions, "names": EVENT_NAMES, "n_names": len(EVENT_NAMES),
              "areas": AREAS, "n_areas": len(AREAS)}
    seconds = {}
    with psycopg.connect(conninfo) as conn:
        conn.execute("SELECT setseed(0.20261102)")
        for label, sql in (("customers", CUSTOMERS), ("events", EVENTS), ("playbooks", PLAYBOOKS),
                           ("interventions", INTERVENTIONS)):
            t0 = time.perf_counter()
            conn.execute(sql, params)
            seconds[f"{label} INSERT"] = time.perf_counter() - t0
            print(f"  {label}: {seconds[f'{label} INSERT']:.1f} s", file=sys.stderr)
        conn.execute("UPDATE tenants SET tracked_users = %s WHERE id = %s", (args.users, tenant_id))
    return seconds


def expected(conninfo: str, tenant_id: str) -> dict:
    """The figures the answer must show, computed here from the tables."""
    since = NOW - timedelta(days=90)
    with psycopg.connect(conninfo) as conn:
        users = conn.execute("SELECT count(*) FROM customers WHERE tenant_id = %s AND NOT test",
                             (tenant_id,)).fetchone()[0]
        interventions = conn.execute(
            "SELECT count(*) FROM interventions WHERE tenant_id = %s AND NOT test AND planned_at >= %s "
            "AND status <> 'shadow' AND channel <> 'escalate'", (tenant_id, since)).fetchone()[0]
        events = conn.execute("SELECT count(*) FROM events WHERE tenant_id = %s", (tenant_id,)).fetchone()[0]
    return {"total_users": users, "total_interventions": interventions, "events": events}


# --- timing ---------------------------------------------------------------------------------


def timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def _ms(values: list[float]) -> str:
    return (f"p50 {statistics.median(values) * 1000:8.1f} ms   min {min(values) * 1000:8.1f} ms   "
            f"max {max(values) * 1000:8.1f} ms")


def measure(client, key: str, raw: psycopg.Connection, tenant_id: str, runs: int, warmup: int):
    headers = {"Authorization": f"Bearer {key}"}
    params = {"t": tenant_id, "since": NOW - timedelta(days=90)}

    def endpoint():
        resp = client.get("/api/analytics?range=90d", headers=headers)
        if resp.status_code != 200:
            raise BenchError(f"GET /api/analytics answered {resp.status_code}: {resp.get_data(as_text=True)[:200]}")
        return resp.get_json()

    def scan():
        rows = raw.execute(RAW_SCAN, params).fetchall()
        raw.rollback()
        return rows

    for _ in range(warmup):
        endpoint(), scan()
    ours, theirs, answer, rows = [], [], None, []
    for r in range(runs):
        order = [("endpoint", endpoint), ("scan", scan)]
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            dt, value = timed(fn)
            if name == "endpoint":
                ours.append(dt)
                answer = value
            else:
                theirs.append(dt)
                rows = value
        print(f"  run {r + 1}/{runs}: endpoint {ours[-1] * 1000:.1f} ms, raw scan {theirs[-1] * 1000:.1f} ms",
              file=sys.stderr)
    return ours, theirs, answer, rows


# --- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000, help="events over 90 days (default 10,000,000)")
    ap.add_argument("--users", type=int, default=200_000, help="customers (default 200,000)")
    ap.add_argument("--interventions", type=int, default=60_000, help="interventions over 120 days (default 60,000)")
    ap.add_argument("--runs", type=int, default=7, help="measured runs of each side (default 7)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    ap.add_argument("--keep-db", action="store_true", help="keep the database (prints its name)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the goal is missed or a check fails")
    args = ap.parse_args(argv)
    if args.users < 100 or args.events < 1 or args.interventions < 1 or args.runs < 1:
        ap.error("--users >= 100, --events >= 1, --interventions >= 1, --runs >= 1")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    from cs_daemon import migrate
    from cs_daemon.clock import FakeClock
    from cs_daemon.config import Settings
    from cs_daemon.db import dispose_engines
    from cs_daemon.runtime import Runtime
    from cs_daemon.tenants import service as tenants
    from webapp import create_app

    dbname = f"{DB_PREFIX}{uuid.uuid4().hex[:10]}"
    tmp = Path(tempfile.mkdtemp(prefix="cs-bench-analytics-"))
    created, status, raw = False, 0, None
    t_start = time.monotonic()
    try:
        settings = Settings(database_url=f"{PG}/{dbname}", redis_url=None, cs_secret_key=secrets.token_hex(16),
                            cs_data_dir=tmp, cs_log_level="WARNING")
        rt = Runtime(settings, FakeClock(NOW))
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", file=sys.stderr)
        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        created = True
        print(f"database {dbname}: migrating, seeding {args.users:,} users, {args.events:,} events, "
              f"{args.interventions:,} interventions", file=sys.stderr)
        migrate.upgrade(settings)
        with rt.session() as s:
            made = tenants.create(s, name="Bench", owner_email="owner@bench.example", now=NOW, plan_tier=PLAN)
        tenant_id, key = made.tenant.id, made.key.secret
        dispose_engines()

        probe = LoadProbe()
        tables = ("customers", "events", "interventions", "playbooks")
        with psycopg.connect(_conninfo(dbname), autocommit=True) as conn:
            ddl = drop_indexes_and_constraints(conn, tables)
        seconds = seed(_conninfo(dbname), tenant_id, args)
        t0 = time.perf_counter()
        with psycopg.connect(_conninfo(dbname), autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '512MB'")
            for stmt in ddl:
                conn.execute(stmt)
            seconds["indexes + constraints"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            for table in tables:
                conn.execute(f"VACUUM ANALYZE {table}")
            seconds["VACUUM ANALYZE"] = time.perf_counter() - t1
            sizes = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('events')), "
                                 "pg_size_pretty(pg_total_relation_size('customers')), "
                                 "pg_size_pretty(pg_total_relation_size('interventions'))").fetchone()
        load_line = probe.line()
        want = expected(_conninfo(dbname), tenant_id)
        print(f"seeded in {sum(seconds.values()):.0f} s ({', '.join(f'{k} {v:.1f} s' for k, v in seconds.items())})",
              file=sys.stderr)

        client = create_app(runtime=rt).test_client()
        raw = psycopg.connect(_conninfo(dbname))
        probe = LoadProbe()
        ours, theirs, answer, rows = measure(client, key, raw, tenant_id, args.runs, args.warmup)
        measure_line = probe.line()

        checks = []
        if answer["kpis"]["total_users"] != want["total_users"]:
            checks.append(f"total_users {answer['kpis']['total_users']} != {want['total_users']}")
        if answer["kpis"]["total_interventions"] != want["total_interventions"]:
            checks.append(f"total_interventions {answer['kpis']['total_interventions']} != "
                          f"{want['total_interventions']}")
        if sum(n for _, n in rows) != want["events"]:
            checks.append(f"the raw scan counted {sum(n for _, n in rows):,} events of {want['events']:,}")

        ratio = statistics.median(ours) / statistics.median(theirs)
        print()
        print(f"Analytics on PostgreSQL: {want['events']:,} events over 90 days ({sizes[0]}), "
              f"{args.users:,} customers ({sizes[1]}), {args.interventions:,} interventions ({sizes[2]}); "
              f"one tenant; {args.runs} runs each after {args.warmup} warm-up rounds, interleaved")
        print(f"  seeding: {load_line}")
        print(f"  timing:  {measure_line}")
        print(f"  GET /api/analytics?range=90d (Flask test client, real app, in process)  {_ms(ours)}")
        print(f"  raw scan: SELECT event, count(*) ... GROUP BY event (psycopg)          {_ms(theirs)}")
        verdict = "met" if ratio <= GOAL else "MISSED"
        print(f"  ratio endpoint / raw scan (p50): {ratio:.4f}   goal <= {GOAL}: {verdict}")
        print(f"  answer: total_users {answer['kpis']['total_users']:,}, total_interventions "
              f"{answer['kpis']['total_interventions']:,}, lifecycle stages {len(answer['lifecycle_distribution'])}, "
              f"top playbooks {len(answer['top_playbooks'])}; checks against the tables: "
              f"{'all agree' if not checks else '; '.join(checks)}")
        print(f"  total run {time.monotonic() - t_start:.0f} s")
        if args.strict and (checks or ratio > GOAL):
            status = 1
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        status = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if raw is not None:
            raw.close()
        dispose_engines()
        if created and not args.keep_db:
            try:
                with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
                print(f"teardown: database {dbname} dropped", file=sys.stderr)
            except Exception as exc:
                print(f"teardown: dropping {dbname}: {exc}", file=sys.stderr)
        elif created:
            print(f"teardown: database {dbname} kept", file=sys.stderr)
        for f in sorted(tmp.rglob("*"), reverse=True):
            try:
                f.unlink() if f.is_file() else f.rmdir()
            except OSError:
                pass
        try:
            tmp.rmdir()
        except OSError:
            pass
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return status


if __name__ == "__main__":
    sys.exit(main())
