"""Preview-count latency on PostgreSQL: the compiled condition tree against hand-written SQL
and against fetching users and filtering in Python, on a bulk-loaded seeded corpus."""

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

OPTIONS = """
--users 1_000_000      >=1000 customers
--events 20_000_000    about this many events
--runs 5               >=1 measured runs of each method and tree
--python-sample 20_000  users the python method is timed on, then extrapolated (0 = all)
--python-runs 3        runs of the python method
--seed 20261102        seed of the corpus
--only ''              comma-separated tree keys to run (default all)
--keep-db              keep the database (prints its name)
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


# --- the trees and their hand-written SQL (what a careful engineer would write): %(t)s is the
# tenant, {scope} where the sample's user range goes

@dataclass
class Tree:
    key: str
    title: str
    tree: dict
    sql: str
    params: dict = field(default_factory=dict)


SCOPE = "AND c.id >= %(lo)s AND c.id < %(hi)s"
COUNT = "SELECT count(*) FROM customers c WHERE c.tenant_id = %(t)s {scope} "


def trees() -> list[Tree]:
    d7, d14, d30 = (NOW - timedelta(days=n) for n in (7, 14, 30))
    no_event = ("EXISTS (SELECT 1 FROM events e WHERE e.tenant_id = c.tenant_id AND e.user_id = c.id "
                "AND e.event = '{}' AND e.timestamp >= {})")
    return [
        Tree("field", "field-only: stage in (onboarding, activated), engagement < 40, inactive >= 7 days",
             {"all": [{"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "activated"]},
                      {"field": "engagement_score", "op": "lt", "value": 40},
                      {"field": "days_since_last_activity", "op": "gte", "value": 7}]},
             COUNT + "AND c.lifecycle_stage IN ('onboarding', 'activated') AND c.engagement_score < 40 "
             "AND c.last_activity_at <= %(d7)s", {"d7": d7}),
        Tree("event", "event clause: created_project count >= 3 within 30 days",
             {"event": "created_project", "count": {"op": "gte", "value": 3}, "within_days": 30},
             "SELECT count(*) FROM customers c JOIN (SELECT e.user_id FROM events e WHERE e.tenant_id = %(t)s "
             "AND e.event = 'created_project' AND e.timestamp >= %(d30)s GROUP BY e.user_id HAVING count(*) >= 3) e "
             "ON e.user_id = c.id WHERE c.tenant_id = %(t)s {scope}", {"d30": d30}),
        Tree("nested", "nested any/not: risk high/critical OR (no session_started in 7 days AND NOT plan = free)",
             {"any": [{"field": "risk_level", "op": "in", "value": ["high", "critical"]},
                      {"all": [{"not": {"event": "session_started", "within_days": 7}},
                               {"not": {"field": "traits.plan", "op": "eq", "value": "free"}}]}]},
             COUNT + "AND (c.risk_level IN ('high', 'critical') OR ((c.traits->>'plan') IS DISTINCT FROM 'free' "
             "AND NOT " + no_event.format("session_started", "%(d7)s") + "))", {"d7": d7}),
        Tree("traits", "traits: plan in (pro, enterprise), seats >= 10 (numbers only), tags contains 'beta'",
             {"all": [{"field": "traits.plan", "op": "in", "value": ["pro", "enterprise"]},
                      {"field": "traits.seats", "op": "gte", "value": 10},
                      {"field": "traits.tags", "op": "contains", "value": "beta"}]},
             COUNT + "AND json_typeof(c.traits->'plan') = 'string' AND c.traits->>'plan' IN ('pro', 'enterprise') "
             "AND CASE WHEN json_typeof(c.traits->'seats') = 'number' THEN (c.traits->>'seats')::float8 >= 10 "
             "ELSE false END AND CASE json_typeof(c.traits->'tags') WHEN 'array' THEN (c.traits->'tags')::jsonb @> "
             "'[\"beta\"]' WHEN 'string' THEN strpos(c.traits->>'tags', 'beta') > 0 ELSE false END"),
        Tree("combined", "combined (docs example): onboarding/activated, engagement < 40, no invite in 14 d, "
             "not critical, locale de or team >= 5",
             {"all": [{"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "activated"]},
                      {"field": "engagement_score", "op": "lt", "value": 40},
                      {"event": "invited_teammate", "count": {"op": "eq", "value": 0}, "within_days": 14},
                      {"not": {"field": "risk_level", "op": "eq", "value": "critical"}},
                      {"any": [{"field": "locale", "op": "eq", "value": "de"},
                               {"field": "team_size", "op": "gte", "value": 5}]}]},
             COUNT + "AND c.lifecycle_stage IN ('onboarding', 'activated') AND c.engagement_score < 40 "
             "AND c.risk_level <> 'critical' AND (c.locale = 'de' OR c.team_size >= 5) AND NOT "
             + no_event.format("invited_teammate", "%(d14)s"), {"d14": d14}),
    ]


class Methods:
    def __init__(self, rt, tenant_id: str, raw: psycopg.Connection):
        self.rt, self.tenant_id, self.raw = rt, tenant_id, raw

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

    def hand(self, tree: Tree, scope: tuple[str, str] | None = None) -> int:
        params = {"t": self.tenant_id, "now": NOW, **tree.params, **dict(zip(("lo", "hi"), scope or ()))}
        (n,) = self.raw.execute(tree.sql.replace("{scope}", SCOPE if scope else ""), params).fetchone()
        self.raw.rollback()
        return n

    def python(self, tree: Tree, lo: str, hi: str) -> int:
        """The naive way on the user range [lo, hi): fetch the users and the event counts the tree
        asks for, then evaluate in memory."""
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
                    cols.append("count(*) FILTER (WHERE event = %s" + (")" if within is None else
                                                                        " AND timestamp >= %s)"))
                    params += [name] + ([] if within is None else [NOW - timedelta(days=within)])
                cur.execute(f"SELECT user_id, {', '.join(cols)} FROM events WHERE tenant_id = %s AND user_id >= %s "
                            "AND user_id < %s AND event = ANY(%s) GROUP BY user_id",
                            (*params, self.tenant_id, lo, hi, sorted({n for n, _ in clauses})))
                counts = {row[0]: row[1:] for row in cur}
        self.raw.rollback()
        index, zero, n_fields, matched = {c: k for k, c in enumerate(clauses)}, (0,) * len(clauses), len(fields), 0
        for row in users:
            mine = counts.get(row[0], zero)
            facts = conditions.Facts(
                values=dict(zip(fields, row[1:1 + n_fields])), traits=row[1 + n_fields] or {},
                last_activity_at=row[2 + n_fields], created_at=row[3 + n_fields], now=NOW,
                event_count=lambda name, within, mine=mine: mine[index[(name, within)]])
            matched += conditions.evaluate(tree.tree, facts)
        return matched


# --- main ---------------------------------------------------------------------------------

def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run(bench: h.Bench, args) -> int:
    db = bench.database()
    rt = bench.runtime(db, redis_url=None)
    h.say(f"database {db}: loading {args.users:,} users and ~{args.events:,} events")
    tenant_id = bench.tenant(db, PLAN, now=NOW, rt=rt).id
    probe, loaded = h.LoadProbe(), LoadStats()

    def copy() -> dict[str, float]:
        nonlocal loaded
        loaded = load_corpus(h.conninfo(db), tenant_id, args.users, args.events, args.seed)
        return loaded.seconds

    loaded.seconds, load_line = h.reload(db, ("customers", "events"), copy), probe.line()
    sizes = h.sizes(db, "customers", "events", "ix_events_user")
    h.say(f"loaded {loaded.users:,} users, {loaded.events:,} events "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in loaded.seconds.items())}); "
          f"customers {sizes[0]}, events {sizes[1]} (ix_events_user {sizes[2]})")
    raw = psycopg.connect(h.conninfo(db))
    bench.cleanups.append(raw.close)
    methods = Methods(rt, tenant_id, raw)
    keep = set(args.only.split(",")) if args.only else None
    chosen = [t for t in trees() if not keep or t.key in keep]
    sample = loaded.users if args.python_sample <= 0 else min(args.python_sample, loaded.users)
    lo, hi = user_id(0), user_id(sample)
    counts = {t.key: {"ours": methods.ours(t), "hand": methods.hand(t)} for t in chosen}   # the warm-up
    probe = h.LoadProbe()
    times, _ = h.sides({f"{side} {t.key}": (lambda t=t, side=side: getattr(methods, side)(t))
                        for t in chosen for side in ("ours", "hand")}, args.runs)
    sql_line, probe = probe.line(), h.LoadProbe()
    h.say(f"python method on {sample:,} users")
    py, sample_counts = {}, {}
    for t in chosen:
        methods.python(t, lo, hi)  # warm-up
        py[t.key] = [h.timed(lambda: methods.python(t, lo, hi)) for _ in range(args.python_runs)]
        sample_counts[t.key] = {"python": py[t.key][-1][1], "hand": methods.hand(t, (lo, hi)),
                                "ours": methods.ours_scoped(t, lo, hi)}
    py_line, factor = probe.line(), loaded.users / sample
    print(f"\nPreview count on PostgreSQL: {loaded.users:,} users, {loaded.events:,} events, one tenant; "
          f"median of {args.runs} runs after a warm-up, interleaved")
    print(f"  load: {load_line}\n  SQL timing: {sql_line}\n  python timing: {py_line}")
    print(f"  python: timed on the first {sample:,} users (user-id range), median of {args.python_runs} runs, "
          f"extrapolated x{factor:.1f} to all users\n" if factor > 1 else
          f"  python: timed on all users, median of {args.python_runs} runs\n")
    misses, rows = [], []
    for t in chosen:
        ours, hand = (_median(times[f"{side} {t.key}"]) * 1000 for side in ("ours", "hand"))
        python = _median([dt for dt, _ in py[t.key]]) * 1000 * factor
        agree = len(set(counts[t.key].values())) == 1 and len(set(sample_counts[t.key].values())) == 1
        rows.append([t.key, f"{ours:.1f}", f"{hand:.1f}", f"{ours / hand:.2f}", f"{python:.0f}",
                     f"{python / ours:.1f}", counts[t.key]["ours"], "yes" if agree else "NO"])
        misses += [f"{t.key}: ours/hand {ours / hand:.2f} > {GOAL_HAND}"] * (ours / hand > GOAL_HAND)
        misses += [f"{t.key}: python/ours {python / ours:.1f} < {GOAL_PYTHON}"] * (python / ours < GOAL_PYTHON)
        misses += [f"{t.key}: counts differ: {counts[t.key]}, sample {sample_counts[t.key]}"] * (not agree)
    print(h.table(rows, ["tree", "ours ms", "hand ms", "ours/hand", "python ms", "py/ours", "count", "agree"],
                  "<>>>>>><"))
    print("\n" + "\n".join(f"  [{t.key}] {t.title}\n      tree: {json.dumps(t.tree)}" for t in chosen))
    print(f"\n  goals: ours <= {GOAL_HAND}x hand on each tree; ours >= {GOAL_PYTHON}x faster than python")
    print("  " + ("all met" if not misses else "missed: " + "; ".join(misses)))
    return 1 if args.strict and misses else 0


if __name__ == "__main__":
    sys.exit(h.main("preview", __doc__, OPTIONS, run))
