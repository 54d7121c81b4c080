"""Every console page, server-rendered, with 100,000 customers (goal: p50 under 200 ms each),
timed through Flask's test client with a signed-in session, pages interleaved."""

from __future__ import annotations

import re
import sys

import psycopg

import analytics as corpus
import harness as h

NOW = corpus.NOW
GOAL_MS = 200.0
PLAN = "scale"
TABLES = (*corpus.TABLES, "score_snapshots")   # loaded with indexes dropped
WARMUP = 2
SIZES = {"snapshot_users": 1000, "deliveries": 500}   # users with 90 days of daily scores; webhook deliveries
OPTIONS = """
--users 100_000          >=2000 customers
--events 1_000_000       >=1 events over 90 days
--interventions 30_000   >=100 interventions over 120 days
--runs 15                >=1 measured requests of each page
--strict                 exit 1 when a goal is missed or a check fails
"""

SNAPSHOTS = """
INSERT INTO score_snapshots (tenant_id, user_id, day, health, activation_score, engagement_score, expansion_score,
                             lifecycle_stage, risk_level)
SELECT %(t)s, 'u' || lpad(u::text, 7, '0'), (%(now)s::timestamptz)::date - d,
       50 + 40 * sin(u + d / 9.0), 60, 50 + 30 * cos(u + d / 7.0), 20, 'engaged', 'low'
FROM generate_series(1, %(snapshot_users)s) u, generate_series(0, 89) d
"""

ENDPOINT = """
INSERT INTO webhook_endpoints (id, tenant_id, url, description, subscribed_events, secret_enc, active, created_at,
                               updated_at)
VALUES ('00000000-0000-4000-b000-000000000001', %(t)s, 'https://hooks.example.com/cs', 'bench', NULL, '', true,
        %(now)s, %(now)s)
"""

DELIVERIES = """
INSERT INTO deliveries (id, tenant_id, kind, channel, endpoint_id, subject_id, event_type, url, body, headers,
                        secret_enc, status, attempts, max_attempts, test, created_at, updated_at)
SELECT '00000000-0000-4000-c000-' || lpad(to_hex(g), 12, '0'), %(t)s, 'event', 'webhook',
       '00000000-0000-4000-b000-000000000001',
       NULL, 'user.stage_changed', 'https://hooks.example.com/cs', '{}', '{}', '',
       CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'delivered' END, 2, 6, false,
       %(now)s - make_interval(secs => g * 60), %(now)s
FROM generate_series(1, %(deliveries)s) g
"""

ATTEMPTS = """
INSERT INTO delivery_attempts (id, tenant_id, delivery_id, number, at, status_code, latency_ms, error)
SELECT '00000000-0000-4000-d000-' || lpad(to_hex(g * 2 + n), 12, '0'), %(t)s,
       '00000000-0000-4000-c000-' || lpad(to_hex(g), 12, '0'), n, %(now)s, CASE WHEN n = 1 THEN 503 ELSE 200 END,
       42.0, CASE WHEN n = 1 THEN 'HTTP 503' END
FROM generate_series(1, %(deliveries)s) g, generate_series(1, 2) n
"""

BIG = (*corpus.STEPS, ("snapshots", SNAPSHOTS))
SMALL = (("endpoint", ENDPOINT), ("deliveries", DELIVERIES), ("attempts", ATTEMPTS))


def pages(conninfo: str, tenant_id: str) -> list[tuple[str, str]]:
    """The pages to time, with real ids of the corpus."""
    with psycopg.connect(conninfo) as conn:
        iv = conn.execute("SELECT id FROM interventions WHERE tenant_id = %s AND channel <> 'escalate' "
                          "AND status = 'delivered' ORDER BY planned_at DESC LIMIT 1", (tenant_id,)).fetchone()[0]
        playbook = conn.execute("SELECT id FROM playbooks WHERE tenant_id = %s ORDER BY id LIMIT 1",
                                (tenant_id,)).fetchone()[0]
    return [
        ("review queue", "/console/review"),
        ("interventions", "/console/interventions"),
        ("interventions, filtered", "/console/interventions?status=delivered&channel=email"),
        ("escalations", "/console/interventions?kind=escalations"),
        ("intervention detail", f"/console/interventions/{iv}"),
        ("customers", "/console/customers"),
        ("customers, stage + risk", "/console/customers?stage=at_risk&risk=critical"),
        ("customers, trait", "/console/customers?trait=plan&value=pro"),
        ("customers, search", "/console/customers?q=user+4242"),
        ("customer detail (90 d chart)", "/console/customers/u0000001"),
        ("playbooks", "/console/playbooks"),
        ("playbook editor (+ count)", f"/console/playbooks/{playbook}"),
        ("analytics 7d", "/console/analytics?range=7d"),
        ("analytics 30d", "/console/analytics?range=30d"),
        ("analytics 90d", "/console/analytics?range=90d"),
        ("webhooks", "/console/webhooks"),
        ("settings", "/console/settings"),
    ]


def sign_in(client, key: str) -> None:
    form = client.get("/console/sign-in").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    resp = client.post("/console/sign-in/key", data={"csrf_token": token, "api_key": key})
    if resp.status_code != 303:
        raise h.BenchError(f"sign-in answered {resp.status_code}")


ROWS = re.compile(r"<tr>\s*<td>")


def run(bench: h.Bench, args) -> int:
    from cs_daemon.clock import FakeClock
    from webapp import create_app

    db = bench.database()
    h.say(f"database {db}: seeding {args.users:,} users, {args.events:,} events, {args.interventions:,} interventions")
    rt = bench.runtime(db, FakeClock(NOW), redis_url=None, cs_log_level="WARNING")
    tenant = bench.tenant(db, PLAN, now=NOW, rt=rt)
    params = {**corpus.params(tenant.id, args), **SIZES}
    h.reload(db, TABLES, lambda: h.seed_sql(db, tenant.id, BIG, params, args.users))
    h.seed_sql(db, tenant.id, SMALL, params, args.users)
    client = create_app(runtime=rt).test_client()
    sign_in(client, tenant.key)
    targets = pages(h.conninfo(db), tenant.id)
    checks: list[str] = []

    def get(path: str) -> str:
        resp = client.get(path)
        if resp.status_code != 200:
            raise h.BenchError(f"{path} answered {resp.status_code}: {resp.get_data(as_text=True)[:300]}")
        return resp.get_data(as_text=True)

    probe = h.LoadProbe()
    times, bodies = h.sides({name: lambda path=path: get(path) for name, path in targets}, args.runs, WARMUP)
    line = probe.line()
    for name, limit in (("customers", 50), ("interventions", 25), ("review queue", 25)):
        shown = bodies[name].count('href="/console/customers/') if name == "customers" else \
            bodies[name].count('data-card') if name == "review queue" else len(ROWS.findall(bodies[name]))
        if shown > limit or "Older</a>" not in bodies[name]:
            checks.append(f"{name}: {shown} rows shown, next page link "
                          f"{'present' if 'Older' in bodies[name] else 'missing'}")

    print(f"\nConsole pages on PostgreSQL: {args.users:,} customers, {args.events:,} events, "
          f"{args.interventions:,} interventions; {args.runs} requests a page after {WARMUP} warm-up rounds, "
          f"interleaved; Flask test client, in process; {line}")
    rows, missed = [], []
    for name, _ in targets:
        s = h.summary(times[name])
        ok = s["p50"] <= GOAL_MS
        missed += [] if ok else [name]
        rows.append((name, f"{s['p50']:.1f}", f"{s['p95']:.1f}", f"{s['max']:.1f}", "met" if ok else "MISSED"))
    print(h.table(rows, head=("page", "p50 ms", "p95 ms", "max ms", f"goal p50 <= {GOAL_MS:.0f} ms"), align="<>>><"))
    print(f"  checks: {'pages answer 200 and lists paginate' if not checks else '; '.join(checks)}")
    return 1 if args.strict and (missed or checks) else 0


if __name__ == "__main__":
    sys.exit(h.main("console", __doc__, OPTIONS, run))
