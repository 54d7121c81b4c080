"""Preview-count latency on PostgreSQL: the compiled condition tree against hand-written SQL
and against fetching users and filtering in Python.

    .venv/bin/python bench/preview_count.py                           # 1M users, ~20M events
    .venv/bin/python bench/preview_count.py --users 50000 --events 1000000   # a quick run

  1. on a fresh database (bench/harness.py) with one tenant on the "scale" plan, bulk-loads
     a deterministic (seeded) corpus with COPY (TRUNCATE + COPY ... FREEZE in one
     transaction; indexes and constraints dropped for the load and re-created with their
     exact migrated definitions, then VACUUM ANALYZE): --users customers (7 lifecycle
     stages, risk levels that follow the stage, scores, team sizes, locales, traits JSON
     with plan / seats / tags / timezone, some values missing or of the "wrong" JSON type)
     and about --events events of 20 names over the last 90 days (per-user volume is
     heavy-tailed, the mix depends on a per-user persona, timestamps cluster towards the
     user's last activity);
  2. for five trees (field-only, one event clause, nested any/not, traits, a combined
     realistic tree) times, interleaved, --runs times each after a warm-up:
       ours:  cs_daemon.playbooks.service.preview_count(session, tree, now=NOW) in a
              tenant-scoped session (Runtime(settings).session(tenant_id)), session
              opening included;
       hand:  hand-written SQL of the same tree over raw psycopg (the first variant of each
              tree is what a careful engineer would write; the others are alternatives,
              timed too, so the figures say which form PostgreSQL prefers);
       python: the naive way: fetch the users and the event counts the tree needs, then
              conditions.evaluate() each one; timed on the first --python-sample users
              (a user-id range) and extrapolated linearly to all users;
     and prints medians, the ratios (goal: ours <= 1.5x hand on each tree; ours >= 20x
     faster than python), and checks that every method returns the same count (ours and
     every hand variant on all users; python, hand and the compiled tree on the sample);
  3. prints EXPLAIN (ANALYZE, BUFFERS) of ours and of the hand-written SQL for each tree
     whose ratio is above the goal (--explain always/never to change that). --keep-db
     keeps the database and prints its name; --reuse-db NAME measures an existing
     database of this script instead of loading.

Machine load (load average and the whole machine's busy CPU share) is printed with the
figures: on a busy 2-CPU machine absolute times move, ratios much less. --strict: exit 1
when a goal is missed or a count differs."""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from array import array
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import psycopg

import harness as h

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)
GOAL_HAND = 1.5
GOAL_PYTHON = 20.0
PLAN = "scale"
DB_PREFIX = "cs_bench_preview_"

OPTIONS = """
--users 1_000_000      >=1000 customers
--events 20_000_000    about this many events
--runs 5               >=1 measured runs of each method and tree
--python-sample 20_000  users the python method is timed on, then extrapolated (0 = all)
--python-runs 3        runs of the python method
--seed 20261102        seed of the corpus
--explain auto|always|never  EXPLAIN ANALYZE when the ratio misses the goal (auto), always or never
--only ''              comma-separated tree keys to run (default all)
--keep-db              keep the database (prints its name)
--reuse-db ''          measure an existing cs_bench_preview_* database, no load
--strict               exit 1 when a goal is missed or counts differ
"""

# --- the corpus -----------------------------------------------------------------------

STAGES, LOCALES, PLANS_T = h.STAGES, h.LOCALES, h.PLAN_TRAITS
ROLES, TAGS, TIMEZONES, EVENT_NAMES = h.ROLES, h.TAGS, h.TIMEZONES, h.EVENT_NAMES
# per-persona weights of EVENT_NAMES: casual users browse, power users build, admins manage
PERSONAS = [
    (60, [30, 12, 12, 9, 1, 6, 6, 5, 2, 4, 2, 1.5, 1, 0.5, 1, 0.2, 0.8, 0.8, 0.1, 0.1]),
    (30, [20, 20, 9, 6, 12, 6, 6, 5, 6, 2, 4, 3, 3, 1.0, 1, 0.8, 0.5, 0.6, 0.3, 0.3]),
    (10, [18, 10, 8, 6, 3, 8, 8, 4, 3, 2, 3, 2, 4, 6.0, 5, 3.0, 3.0, 1.0, 1.0, 2.0]),
]
# per stage: (days since last activity: base + exponential mean), event-volume multiplier
ACTIVITY = {"new": (0, 2, 0.5), "onboarding": (0, 3, 0.8), "activated": (0, 3, 1.0), "engaged": (0, 1.5, 1.8),
            "at_risk": (5, 15, 0.6), "dormant": (20, 30, 0.3), "churned": (40, 60, 0.2)}
ENGAGEMENT = {"new": (0, 30), "onboarding": (5, 60), "activated": (20, 80), "engaged": (50, 100),
              "at_risk": (0, 40), "dormant": (0, 20), "churned": (0, 10)}
EVENT_DAYS = 90


def _cum(pairs):
    total, out = 0.0, []
    for _, w in pairs:
        total += w
        out.append(total)
    return [p[0] for p in pairs], out


def _ts(dt: datetime) -> str:
    return dt.isoformat(sep=" ")


def user_id(i: int) -> str:
    return f"u{i:07d}"


@dataclass
class LoadStats:
    users: int = 0
    events: int = 0
    seconds: dict = field(default_factory=dict)


def load_corpus(conninfo: str, tenant_id: str, n_users: int, n_events: int, seed: int) -> LoadStats:
    """COPY the customers, then the events, in one transaction after TRUNCATE (so FREEZE
    applies and VACUUM has little left to do). Indexes/constraints are handled by the caller."""
    stats = LoadStats()
    rng = random.Random(seed)
    stage_names, stage_cum = _cum(STAGES)
    locale_names, locale_cum = _cum(LOCALES)
    plan_names, plan_cum = _cum(PLANS_T)
    persona_cum = _cum([(i, p[0]) for i, p in enumerate(PERSONAS)])[1]
    name_cums = [_cum(list(zip(EVENT_NAMES, p[1])))[1] for p in PERSONAS]
    now_s = int(NOW.timestamp())
    day = 86400
    # per user: seconds-ago of the last activity, of the start of the event window, volume weight, persona
    hi_arr, lo_arr, w_arr, persona_arr = array("l"), array("l"), array("d"), array("b")
    t0 = time.perf_counter()
    with psycopg.connect(conninfo) as conn:
        with conn.cursor() as cur:
            cur.execute("TRUNCATE customers, events")
            cols = ("tenant_id, id, name, email, company, role, team_size, locale, traits, lifecycle_stage, "
                    "health, activation_score, engagement_score, expansion_score, risk_level, last_activity_at, "
                    "created_at, updated_at, scored_at, test, state, opted_out")
            with cur.copy(f"COPY customers ({cols}) FROM STDIN WITH (FREEZE)") as copy:
                buf: list[str] = []
                rnd, choices, expo = rng.random, rng.choices, rng.expovariate
                now_txt = _ts(NOW)
                for i in range(n_users):
                    uid = user_id(i)
                    stage = choices(stage_names, cum_weights=stage_cum)[0]
                    if stage == "at_risk":
                        risk = "critical" if rnd() < 0.35 else "high"
                    elif stage in ("dormant", "churned"):
                        risk = ("medium", "high", "critical")[int(rnd() * 3)]
                    else:
                        r = rnd()
                        risk = "low" if r < 0.75 else "medium" if r < 0.95 else "high"
                    lo_e, hi_e = ENGAGEMENT[stage]
                    engagement = round(lo_e + (hi_e - lo_e) * rnd(), 1)
                    activation = round(min(100.0, engagement * 0.6 + 40 * rnd()), 1)
                    expansion = round(100 * rnd() ** 3, 1)
                    health = round(0.5 * engagement + 0.3 * activation + 20 * rnd(), 1)
                    created_days = min(1000.0, 1.0 + expo(1 / 200))
                    base, mean, volume = ACTIVITY[stage]
                    if rnd() < 0.04:
                        last_days = None
                    else:
                        last_days = min(created_days, base + expo(1 / mean))
                    email = f"user{i}@example{i % 997}.com" if rnd() < 0.92 else "\\N"
                    company = f"Company {i % 20011}" if rnd() < 0.7 else "\\N"
                    role = ROLES[int(rnd() * len(ROLES))] if rnd() < 0.8 else "\\N"
                    team = str(min(2000, int(rng.paretovariate(1.1)))) if rnd() < 0.75 else "\\N"
                    locale = choices(locale_names, cum_weights=locale_cum)[0] if rnd() < 0.85 else "\\N"
                    traits = {}
                    if rnd() < 0.95:
                        traits["plan"] = choices(plan_names, cum_weights=plan_cum)[0]
                    r = rnd()
                    if r < 0.80:
                        traits["seats"] = min(5000, int(rng.paretovariate(0.9)))
                    elif r < 0.85:
                        traits["seats"] = str(int(rng.paretovariate(0.9)))    # a string: never numeric
                    if rnd() < 0.7:
                        traits["tags"] = rng.sample(TAGS, int(rnd() * 4))
                    if rnd() < 0.3:
                        traits["timezone"] = TIMEZONES[int(rnd() * len(TIMEZONES))]
                    if rnd() < 0.02:
                        traits["tags"] = "beta tester"                              # a string tag
                    opted = '["email"]' if rnd() < 0.03 else "[]"
                    created = NOW - timedelta(days=created_days)
                    last_txt = "\\N" if last_days is None else _ts(NOW - timedelta(days=last_days))
                    buf.append(
                        f"{tenant_id}\t{uid}\tUser {i}\t{email}\t{company}\t{role}\t{team}\t{locale}\t"
                        f"{json.dumps(traits, separators=(',', ':'))}\t{stage}\t{health}\t{activation}\t"
                        f"{engagement}\t{expansion}\t{risk}\t{last_txt}\t{_ts(created)}\t{now_txt}\t{now_txt}\t"
                        f"f\t{{}}\t{opted}\n")
                    if len(buf) >= 20000:
                        copy.write("".join(buf))
                        buf.clear()
                    # the event window: from max(90 days ago, sign-up) to the last activity
                    if last_days is None or last_days >= EVENT_DAYS:
                        hi_arr.append(0), lo_arr.append(0), w_arr.append(0.0), persona_arr.append(0)
                        continue
                    hi_s = int(last_days * day)
                    lo_s = max(hi_s, int(min(EVENT_DAYS, created_days) * day) - 1)
                    hi_arr.append(hi_s), lo_arr.append(lo_s)
                    w_arr.append(volume * rng.lognormvariate(0.0, 1.1))
                    persona_arr.append(rng.choices((0, 1, 2), cum_weights=persona_cum)[0])
                if buf:
                    copy.write("".join(buf))
            stats.users = n_users
            t1 = time.perf_counter()
            stats.seconds["customers COPY"] = t1 - t0

            # events: per-user volume is heavy-tailed (lognormal), scaled to about n_events
            total_w = sum(w_arr) or 1.0
            scale = n_events / total_w
            # minute-resolution timestamp prefixes over the event window
            base_dt = NOW - timedelta(days=EVENT_DAYS + 1)
            base_s = int(base_dt.timestamp())
            n_min = (EVENT_DAYS + 1) * 1440 + 2
            prefixes = [(base_dt + timedelta(minutes=m)).strftime("%Y-%m-%d %H:%M:") for m in range(n_min)]
            secs = [f"{s:02d}+00" for s in range(60)]
            seq = 0
            with cur.copy("COPY events (id, tenant_id, user_id, event, properties, timestamp, received_at, "
                          "source, test, idempotency_key) FROM STDIN WITH (FREEZE)") as copy:
                buf = []
                rnd, choices = rng.random, rng.choices
                tail = "\t{}\t"
                for i in range(n_users):
                    w = w_arr[i]
                    if w <= 0.0:
                        continue
                    x = w * scale
                    n = int(x)
                    if rnd() < x - n:
                        n += 1
                    if n == 0:
                        continue
                    hi_s, span = hi_arr[i], lo_arr[i] - hi_arr[i]
                    head = f"\t{tenant_id}\t{user_id(i)}\t"
                    names = choices(EVENT_NAMES, cum_weights=name_cums[persona_arr[i]], k=n)
                    # the first event is the last activity; the others cluster towards it
                    first = now_s - hi_s - base_s
                    ts = [first] + [first - int(span * rnd() ** 1.5) for _ in range(n - 1)]
                    ts = [prefixes[t // 60] + secs[t % 60] for t in ts]
                    buf += [f"00000000-0000-4000-8000-{seq + j:012x}{head}{names[j]}{tail}{ts[j]}\t{ts[j]}"
                            "\tapi\tf\t\\N\n"
                            for j in range(n)]
                    seq += n
                    if len(buf) >= 50000:
                        copy.write("".join(buf))
                        buf.clear()
                if buf:
                    copy.write("".join(buf))
            stats.events = seq
            stats.seconds["events COPY"] = time.perf_counter() - t1
            cur.execute("UPDATE tenants SET tracked_users = %s WHERE id = %s", (n_users, tenant_id))
        conn.commit()
    return stats



# --- the trees and their hand-written SQL ---------------------------------------------------
#
# Hand-written SQL takes %(t)s (tenant), %(now)s and cut-offs as parameters, and a {scope}
# placeholder where the sample restriction goes (empty on all users).


@dataclass
class Variant:
    label: str
    sql: str


@dataclass
class Tree:
    key: str
    title: str
    tree: dict
    variants: list[Variant]
    params: dict


SCOPE = "AND c.id >= %(lo)s AND c.id < %(hi)s"


def trees() -> list[Tree]:
    d7, d14, d30 = (NOW - timedelta(days=n) for n in (7, 14, 30))
    out = [
        Tree("field", "field-only: stage in (onboarding, activated), engagement < 40, inactive >= 7 days",
             {"all": [{"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "activated"]},
                      {"field": "engagement_score", "op": "lt", "value": 40},
                      {"field": "days_since_last_activity", "op": "gte", "value": 7}]},
             [Variant("plain WHERE (sargable last_activity_at <= now - 7 d)",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} "
                      "AND c.lifecycle_stage IN ('onboarding', 'activated') AND c.engagement_score < 40 "
                      "AND c.last_activity_at <= %(d7)s")],
             {"d7": d7}),
        Tree("event", "event clause: created_project count >= 3 within 30 days",
             {"event": "created_project", "count": {"op": "gte", "value": 3}, "within_days": 30},
             [Variant("JOIN (events GROUP BY user_id HAVING count >= 3)",
                      "SELECT count(*) FROM customers c JOIN (SELECT e.user_id FROM events e "
                      "WHERE e.tenant_id = %(t)s AND e.event = 'created_project' AND e.timestamp >= %(d30)s "
                      "GROUP BY e.user_id HAVING count(*) >= 3) e ON e.user_id = c.id "
                      "WHERE c.tenant_id = %(t)s {scope}"),
              Variant("correlated count per user",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} AND (SELECT count(*) "
                      "FROM events e WHERE e.tenant_id = c.tenant_id AND e.user_id = c.id "
                      "AND e.event = 'created_project' AND e.timestamp >= %(d30)s) >= 3"),
              Variant("LATERAL (... LIMIT 3) count = 3 (stops at the 3rd event)",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} AND (SELECT count(*) "
                      "FROM (SELECT 1 FROM events e WHERE e.tenant_id = c.tenant_id AND e.user_id = c.id "
                      "AND e.event = 'created_project' AND e.timestamp >= %(d30)s LIMIT 3) x) >= 3")],
             {"d30": d30}),
        Tree("nested", "nested any/not: risk high/critical OR (no session_started in 7 days AND NOT plan = free)",
             {"any": [{"field": "risk_level", "op": "in", "value": ["high", "critical"]},
                      {"all": [{"not": {"event": "session_started", "within_days": 7}},
                               {"not": {"field": "traits.plan", "op": "eq", "value": "free"}}]}]},
             [Variant("OR with NOT EXISTS",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} AND ("
                      "c.risk_level IN ('high', 'critical') OR ((c.traits->>'plan') IS DISTINCT FROM 'free' "
                      "AND NOT EXISTS (SELECT 1 FROM events e WHERE e.tenant_id = c.tenant_id AND e.user_id = c.id "
                      "AND e.event = 'session_started' AND e.timestamp >= %(d7)s)))"),
              Variant("OR with correlated count = 0",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} AND ("
                      "c.risk_level IN ('high', 'critical') OR ((c.traits->>'plan') IS DISTINCT FROM 'free' "
                      "AND (SELECT count(*) FROM events e WHERE e.tenant_id = c.tenant_id AND e.user_id = c.id "
                      "AND e.event = 'session_started' AND e.timestamp >= %(d7)s) = 0))")],
             {"d7": d7}),
        Tree("traits", "traits: plan in (pro, enterprise), seats >= 10 (numbers only), tags contains 'beta'",
             {"all": [{"field": "traits.plan", "op": "in", "value": ["pro", "enterprise"]},
                      {"field": "traits.seats", "op": "gte", "value": 10},
                      {"field": "traits.tags", "op": "contains", "value": "beta"}]},
             [Variant("->> / json_typeof / jsonb @> on the array",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} "
                      "AND json_typeof(c.traits->'plan') = 'string' AND c.traits->>'plan' IN ('pro', 'enterprise') "
                      "AND CASE WHEN json_typeof(c.traits->'seats') = 'number' "
                      "THEN (c.traits->>'seats')::float8 >= 10 ELSE false END "
                      "AND CASE json_typeof(c.traits->'tags') "
                      "WHEN 'array' THEN (c.traits->'tags')::jsonb @> '[\"beta\"]' "
                      "WHEN 'string' THEN strpos(c.traits->>'tags', 'beta') > 0 ELSE false END"),
              Variant("one jsonb cast, then jsonb_typeof / @>",
                      "SELECT count(*) FROM customers c CROSS JOIN LATERAL (SELECT c.traits::jsonb AS j) t "
                      "WHERE c.tenant_id = %(t)s {scope} "
                      "AND t.j->>'plan' IN ('pro', 'enterprise') AND jsonb_typeof(t.j->'plan') = 'string' "
                      "AND CASE WHEN jsonb_typeof(t.j->'seats') = 'number' "
                      "THEN (t.j->'seats')::float8 >= 10 ELSE false END "
                      "AND CASE jsonb_typeof(t.j->'tags') WHEN 'array' THEN t.j->'tags' @> '[\"beta\"]' "
                      "WHEN 'string' THEN strpos(t.j->>'tags', 'beta') > 0 ELSE false END")],
             {}),
        Tree("combined", "combined (docs example): onboarding/activated, engagement < 40, no invite in 14 d, "
                         "not critical, locale de or team >= 5",
             {"all": [{"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "activated"]},
                      {"field": "engagement_score", "op": "lt", "value": 40},
                      {"event": "invited_teammate", "count": {"op": "eq", "value": 0}, "within_days": 14},
                      {"not": {"field": "risk_level", "op": "eq", "value": "critical"}},
                      {"any": [{"field": "locale", "op": "eq", "value": "de"},
                               {"field": "team_size", "op": "gte", "value": 5}]}]},
             [Variant("WHERE + NOT EXISTS",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} "
                      "AND c.lifecycle_stage IN ('onboarding', 'activated') AND c.engagement_score < 40 "
                      "AND c.risk_level <> 'critical' AND (c.locale = 'de' OR c.team_size >= 5) "
                      "AND NOT EXISTS (SELECT 1 FROM events e WHERE e.tenant_id = c.tenant_id AND e.user_id = c.id "
                      "AND e.event = 'invited_teammate' AND e.timestamp >= %(d14)s)"),
              Variant("WHERE + correlated count = 0",
                      "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} "
                      "AND c.lifecycle_stage IN ('onboarding', 'activated') AND c.engagement_score < 40 "
                      "AND c.risk_level <> 'critical' AND (c.locale = 'de' OR c.team_size >= 5) "
                      "AND (SELECT count(*) FROM events e WHERE e.tenant_id = c.tenant_id AND e.user_id = c.id "
                      "AND e.event = 'invited_teammate' AND e.timestamp >= %(d14)s) = 0")],
             {"d14": d14}),
    ]
    return out




class Methods:
    def __init__(self, rt, tenant_id: str, raw: psycopg.Connection):
        self.rt = rt
        self.tenant_id = tenant_id
        self.raw = raw

    def ours(self, tree: Tree) -> int:
        from cs_daemon.playbooks import service

        with self.rt.session(self.tenant_id, commit=False) as s:
            return service.preview_count(s, tree.tree, now=NOW)

    def ours_scoped(self, tree: Tree, lo: str, hi: str) -> int:
        """The compiled tree on the sample range (for the agreement check)."""
        from sqlalchemy import func, select

        from cs_daemon.customers.models import Customer
        from cs_daemon.engine import conditions

        with self.rt.session(self.tenant_id, commit=False) as s:
            expr = conditions.to_sql(tree.tree, now=NOW, dialect="postgresql")
            return s.scalar(select(func.count()).select_from(Customer)
                            .where(expr, Customer.id >= lo, Customer.id < hi)) or 0

    def hand(self, tree: Tree, variant: Variant, scope: tuple[str, str] | None = None) -> int:
        params = {"t": self.tenant_id, "now": NOW, **tree.params}
        sql = variant.sql.replace("{scope}", SCOPE if scope else "")
        if scope:
            params.update(lo=scope[0], hi=scope[1])
        with self.raw.cursor() as cur:
            cur.execute(sql, params)
            (n,) = cur.fetchone()
        self.raw.rollback()
        return n

    def python(self, tree: Tree, lo: str, hi: str) -> int:
        """The naive way on the user range [lo, hi): fetch users and the event counts the
        tree asks for, then evaluate in memory."""
        from cs_daemon.engine import conditions

        clauses = sorted(conditions.event_clauses(tree.tree), key=lambda c: (c[0], c[1] or 0))
        fields = list(conditions.COLUMN_FIELDS)
        with self.raw.cursor() as cur:
            cur.execute(f"SELECT id, {', '.join(fields)}, traits, last_activity_at, created_at FROM customers "
                        "WHERE tenant_id = %s AND id >= %s AND id < %s", (self.tenant_id, lo, hi))
            users = cur.fetchall()
            counts: dict[str, tuple] = {}
            if clauses:
                cols, params = [], []
                for name, within in clauses:
                    if within is None:
                        cols.append("count(*) FILTER (WHERE event = %s)")
                        params.append(name)
                    else:
                        cols.append("count(*) FILTER (WHERE event = %s AND timestamp >= %s)")
                        params += [name, NOW - timedelta(days=within)]
                names = sorted({n for n, _ in clauses})
                cur.execute(f"SELECT user_id, {', '.join(cols)} FROM events WHERE tenant_id = %s AND user_id >= %s "
                            "AND user_id < %s AND event = ANY(%s) GROUP BY user_id",
                            (*params, self.tenant_id, lo, hi, names))
                counts = {row[0]: row[1:] for row in cur}
        self.raw.rollback()
        index = {c: k for k, c in enumerate(clauses)}
        zero = (0,) * len(clauses)
        n_fields = len(fields)
        matched = 0
        for row in users:
            mine = counts.get(row[0], zero)
            facts = conditions.Facts(
                values=dict(zip(fields, row[1:1 + n_fields])), traits=row[1 + n_fields] or {},
                last_activity_at=row[2 + n_fields], created_at=row[3 + n_fields], now=NOW,
                event_count=lambda name, within, mine=mine: mine[index[(name, within)]])
            matched += conditions.evaluate(tree.tree, facts)
        return matched


# --- EXPLAIN ------------------------------------------------------------------------------


def capture_ours_sql(rt, tenant_id: str, tree: Tree) -> tuple[str, dict]:
    """The statement and parameters preview_count sends for this tree."""
    from sqlalchemy import event

    from cs_daemon.db import get_engine
    from cs_daemon.playbooks import service

    seen: list[tuple[str, dict]] = []

    def grab(conn, cursor, statement, parameters, context, executemany):
        if "count(" in statement and "FROM customers" in statement:
            seen.append((statement, dict(parameters or {})))

    engine = get_engine(rt.settings)
    event.listen(engine, "before_cursor_execute", grab)
    try:
        with rt.session(tenant_id, commit=False) as s:
            service.preview_count(s, tree.tree, now=NOW)
    finally:
        event.remove(engine, "before_cursor_execute", grab)
    if not seen:
        raise h.BenchError("could not capture the preview_count statement")
    return seen[-1]


def explain(raw: psycopg.Connection, sql: str, params: dict) -> str:
    with raw.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        text = "\n".join(r[0] for r in cur.fetchall())
    raw.rollback()
    return text




# --- main ---------------------------------------------------------------------------------


@dataclass
class Result:
    tree: Tree
    ours: list[float] = field(default_factory=list)
    hand: dict[str, list[float]] = field(default_factory=dict)
    python_sample_s: list[float] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    sample_counts: dict[str, int] = field(default_factory=dict)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def load(bench: h.Bench, args, db: str, rt) -> tuple[str, LoadStats, str]:
    """The tenant and the corpus (or those of --reuse-db); the load phase's machine load."""
    if args.reuse_db:
        with psycopg.connect(h.conninfo(args.reuse_db)) as conn:
            tenant_id = conn.execute("SELECT id FROM tenants WHERE name = 'Bench'").fetchone()[0]
            loaded = LoadStats(*(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                                 for t in ("customers", "events")))
        return tenant_id, loaded, "(reused database, no load)"
    h.say(f"database {db}: loading {args.users:,} users and ~{args.events:,} events")
    tenant_id = bench.tenant(db, PLAN, now=NOW, rt=rt).id
    probe = h.LoadProbe()
    loaded = LoadStats()

    def copy() -> dict[str, float]:
        nonlocal loaded
        loaded = load_corpus(h.conninfo(db), tenant_id, args.users, args.events, args.seed)
        return loaded.seconds

    loaded.seconds = h.reload(db, ("customers", "events"), copy)
    return tenant_id, loaded, probe.line()


def run(bench: h.Bench, args) -> int:
    db = bench.database(reuse=args.reuse_db)
    rt = bench.runtime(db, redis_url=None)
    tenant_id, loaded, load_line = load(bench, args, db, rt)
    sizes = h.sizes(db, "customers", "events", "ix_events_user")
    h.say(f"loaded {loaded.users:,} users, {loaded.events:,} events "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in loaded.seconds.items())}); "
          f"customers {sizes[0]}, events {sizes[1]} (ix_events_user {sizes[2]})")
    raw = psycopg.connect(h.conninfo(db))
    bench.cleanups.append(raw.close)
    methods = Methods(rt, tenant_id, raw)
    keep = set(args.only.split(",")) if args.only else None
    results = [Result(t, hand={v.label: [] for v in t.variants}) for t in trees() if not keep or t.key in keep]
    sample = loaded.users if args.python_sample <= 0 else min(args.python_sample, loaded.users)
    lo, hi = user_id(0), user_id(sample)

    h.say("warming up")   # every query once (caches, plans, the engine's pool), counts recorded
    for res in results:
        res.counts["ours"] = methods.ours(res.tree)
        for v in res.tree.variants:
            res.counts[v.label] = methods.hand(res.tree, v)
    # fixed cost of a call: a tree the planner answers without reading a row
    empty = Tree("empty", "", {"any": []}, [Variant("WHERE false", "SELECT count(*) FROM customers c "
                                                    "WHERE c.tenant_id = %(t)s {scope} AND false")], {})
    fixed = {"ours": [], "hand": []}
    for k in range(40):
        for side, fn in (("ours", lambda: methods.ours(empty)),
                         ("hand", lambda: methods.hand(empty, empty.variants[0]))):
            dt, _ = h.timed(fn)
            if k >= 10:
                fixed[side].append(dt)
    probe, t_measure = h.LoadProbe(), time.monotonic()
    for r, (res, v) in h.interleave(args.runs, [(res, v) for res in results for v in [None, *res.tree.variants]]):
        if v is None:
            dt, res.counts["ours"] = h.timed(lambda: methods.ours(res.tree))
            res.ours.append(dt)
        else:
            res.hand[v.label].append(h.timed(lambda: methods.hand(res.tree, v))[0])
        if len(results[0].ours) == r + 1 == len(results[-1].ours):
            h.say(f"  run {r + 1}/{args.runs} done ({time.monotonic() - t_measure:.0f} s)")
    sql_line = probe.line()

    probe = h.LoadProbe()
    h.say(f"python method on {sample:,} users")
    for res in results:
        methods.python(res.tree, lo, hi)  # warm-up
        for _ in range(args.python_runs):
            dt, n = h.timed(lambda: methods.python(res.tree, lo, hi))
            res.python_sample_s.append(dt)
        res.sample_counts["python"] = n
        res.sample_counts["hand"] = methods.hand(res.tree, res.tree.variants[0], (lo, hi))
        res.sample_counts["ours"] = methods.ours_scoped(res.tree, lo, hi)
    py_line = probe.line()

    factor = loaded.users / sample
    print(f"\nPreview count on PostgreSQL: {loaded.users:,} users, {loaded.events:,} events, one tenant; "
          f"median of {args.runs} runs after a warm-up, interleaved")
    print(f"  load: {load_line}\n  SQL timing: {sql_line}\n  python timing: {py_line}")
    print(f"  python: timed on the first {sample:,} users (user-id range), median of {args.python_runs} runs, "
          f"extrapolated x{factor:.1f} to all users" if factor > 1 else
          f"  python: timed on all users, median of {args.python_runs} runs")
    print(f"  fixed cost of a call (tree {{\"any\": []}}, no row read), median of 30: ours "
          f"{_median(fixed['ours']) * 1000:.2f} ms (session, pool pre-ping, tenant scope, compile), "
          f"raw psycopg {_median(fixed['hand']) * 1000:.2f} ms\n")
    misses: list[str] = []
    summary, rows = [], []
    for res in results:
        ours = _median(res.ours) * 1000
        hand = _median(res.hand[res.tree.variants[0].label]) * 1000
        best_label = min(res.hand, key=lambda k: _median(res.hand[k]))
        best = _median(res.hand[best_label]) * 1000
        py = _median(res.python_sample_s) * 1000 * factor
        agree = len(set(res.counts.values())) == 1 and len(set(res.sample_counts.values())) == 1
        rows.append([res.tree.key, f"{ours:.1f}", f"{hand:.1f}", f"{ours / hand:.2f}", f"{best:.1f}",
                     f"{ours / best:.2f}", f"{py:.0f}", f"{py / ours:.1f}", f"{res.counts['ours']:,}",
                     "yes" if agree else "NO"])
        summary.append((res, ours, hand, best, best_label))
        if ours / hand > GOAL_HAND:
            misses.append(f"{res.tree.key}: ours/hand {ours / hand:.2f} > {GOAL_HAND}")
        if py / ours < GOAL_PYTHON:
            misses.append(f"{res.tree.key}: python/ours {py / ours:.1f} < {GOAL_PYTHON}")
        if not agree:
            misses.append(f"{res.tree.key}: counts differ: all users {res.counts}, sample {res.sample_counts}")
    print(h.table(rows, ["tree", "ours ms", "hand ms", "ours/hand", "best hand", "ours/best", "python ms",
                         "py/ours", "count", "agree"], "<>>>>>>>><"))
    print("\n  trees and hand-written variants (median ms; count on all users):")
    for res, ours, *_ in summary:
        print(f"  [{res.tree.key}] {res.tree.title}\n      tree: {json.dumps(res.tree.tree)}")
        print(f"      {'ours (preview_count)':<66} {ours:>9.1f} ms  count {res.counts['ours']:,}")
        for k, v in enumerate(res.tree.variants):
            ms = _median(res.hand[v.label]) * 1000
            print(f"      {'hand*' if k == 0 else 'alt  '} {v.label:<60.60} {ms:>9.1f} ms"
                  f"  count {res.counts[v.label]:,}")
        sc = res.sample_counts
        print(f"      sample of {sample:,} users: python {sc['python']:,}, hand {sc['hand']:,}, compiled tree "
              f"{sc['ours']:,}; python {_median(res.python_sample_s) * 1000:.0f} ms on the sample")
    print("  (hand* = what a careful engineer would write first; alt = alternatives timed in the same run)\n")
    print(f"  goals: ours <= {GOAL_HAND}x hand on each tree; ours >= {GOAL_PYTHON}x faster than python")
    print("  " + ("all met" if not misses else "missed: " + "; ".join(misses)))
    for res, ours, hand, best, best_label in summary:
        if args.explain == "never" or (args.explain == "auto" and ours / best <= GOAL_HAND):
            continue
        sql, params = capture_ours_sql(rt, tenant_id, res.tree)
        print(f"\n=== EXPLAIN ANALYZE [{res.tree.key}] ours (ours/hand {ours / hand:.2f}, "
              f"ours/best {ours / best:.2f}) ===")
        print(sql)
        print(explain(raw, sql, params))
        for label in dict.fromkeys([res.tree.variants[0].label, best_label]):
            v = next(x for x in res.tree.variants if x.label == label)
            print(f"--- EXPLAIN ANALYZE [{res.tree.key}] hand: {label} ---")
            print(explain(raw, v.sql.replace("{scope}", ""), {"t": tenant_id, "now": NOW, **res.tree.params}))
    return 1 if args.strict and misses else 0


def check(args) -> str | None:
    if args.reuse_db and not args.reuse_db.startswith(DB_PREFIX):
        return f"--reuse-db takes a database made by this script ({DB_PREFIX}...)"


if __name__ == "__main__":
    sys.exit(h.main("preview", __doc__, OPTIONS, run, check))
