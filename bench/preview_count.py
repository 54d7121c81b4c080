"""Preview-count latency on PostgreSQL: the compiled condition tree against hand-written SQL
and against fetching users and filtering in Python, on analytics.py's customers and events."""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg

import analytics as corpus
import harness as h

NOW = corpus.NOW
GOAL_HAND = 1.5
GOAL_PYTHON = 20.0
PYTHON_SAMPLE = 20_000   # users the python method is timed on, then extrapolated to all
PYTHON_RUNS = 3

OPTIONS = """
--users 1_000_000      >=1000 customers
--events 20_000_000    >=1 events over 90 days
--runs 5               >=1 measured runs of each method and tree
--strict               exit 1 when a goal is missed or counts differ
"""


# --- the trees and their hand-written SQL (what a careful engineer would write): %(t)s is the
# tenant, {scope} where the sample's user range goes

@dataclass
class Tree:
    key: str
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
        Tree("field", {"all": [{"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "activated"]},
                               {"field": "engagement_score", "op": "lt", "value": 40},
                               {"field": "days_since_last_activity", "op": "gte", "value": 7}]},
             COUNT + "AND c.lifecycle_stage IN ('onboarding', 'activated') AND c.engagement_score < 40 "
             "AND c.last_activity_at <= %(d7)s", {"d7": d7}),
        Tree("event", {"event": "created_project", "count": {"op": "gte", "value": 3}, "within_days": 30},
             "SELECT count(*) FROM customers c JOIN (SELECT e.user_id FROM events e WHERE e.tenant_id = %(t)s "
             "AND e.event = 'created_project' AND e.timestamp >= %(d30)s GROUP BY e.user_id HAVING count(*) >= 3) e "
             "ON e.user_id = c.id WHERE c.tenant_id = %(t)s {scope}", {"d30": d30}),
        Tree("nested", {"any": [{"field": "risk_level", "op": "in", "value": ["high", "critical"]},
                                {"all": [{"not": {"event": "session_started", "within_days": 7}},
                                         {"not": {"field": "traits.plan", "op": "eq", "value": "free"}}]}]},
             COUNT + "AND (c.risk_level IN ('high', 'critical') OR ((c.traits->>'plan') IS DISTINCT FROM 'free' "
             "AND NOT " + no_event.format("session_started", "%(d7)s") + "))", {"d7": d7}),
        Tree("traits", {"all": [{"field": "traits.plan", "op": "in", "value": ["pro", "enterprise"]},
                                {"field": "traits.seats", "op": "gte", "value": 10},
                                {"field": "traits.tags", "op": "contains", "value": "beta"}]},
             COUNT + "AND json_typeof(c.traits->'plan') = 'string' AND c.traits->>'plan' IN ('pro', 'enterprise') "
             "AND CASE WHEN json_typeof(c.traits->'seats') = 'number' THEN (c.traits->>'seats')::float8 >= 10 "
             "ELSE false END AND CASE json_typeof(c.traits->'tags') WHEN 'array' THEN (c.traits->'tags')::jsonb @> "
             "'[\"beta\"]' WHEN 'string' THEN strpos(c.traits->>'tags', 'beta') > 0 ELSE false END"),
        Tree("combined", {"all": [{"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "activated"]},
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

    def hand(self, tree: Tree, scope: tuple[str, str] | None = None) -> int:
        params = {"t": self.tenant_id, **tree.params, **dict(zip(("lo", "hi"), scope or ()))}
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


def run(bench: h.Bench, args) -> int:
    db = bench.database()
    rt = bench.runtime(db, redis_url=None)
    h.say(f"database {db}: seeding {args.users:,} users and {args.events:,} events")
    tenant_id = bench.tenant(db, "scale", now=NOW, rt=rt).id
    h.reload(db, ("customers", "events"),
             lambda: h.seed_sql(db, tenant_id, corpus.STEPS[:2], corpus.params(tenant_id, args), args.users))
    raw = psycopg.connect(h.conninfo(db))
    bench.cleanups.append(raw.close)
    methods, chosen = Methods(rt, tenant_id, raw), trees()
    sample = min(PYTHON_SAMPLE, args.users)
    lo, hi = "u", f"u{sample + 1:07d}"       # ids u0000001 to u{users}
    counts = {t.key: {"ours": methods.ours(t), "hand": methods.hand(t)} for t in chosen}   # the warm-up
    probe = h.LoadProbe()
    times, _ = h.sides({f"{side} {t.key}": (lambda t=t, side=side: getattr(methods, side)(t))
                        for t in chosen for side in ("ours", "hand")}, args.runs)
    py, sample_counts = {}, {}
    for t in chosen:
        methods.python(t, lo, hi)  # warm-up
        py[t.key] = [h.timed(lambda: methods.python(t, lo, hi)) for _ in range(PYTHON_RUNS)]
        sample_counts[t.key] = {"python": py[t.key][-1][1], "hand": methods.hand(t, (lo, hi))}
    factor = args.users / sample
    print(f"\nPreview count on PostgreSQL: {args.users:,} users, {args.events:,} events, one tenant; median of "
          f"{args.runs} runs after a warm-up, interleaved; python: median of {PYTHON_RUNS} runs on the first "
          f"{sample:,} users, times {factor:.1f}; {probe.line()}")
    misses, rows = [], []
    for t in chosen:
        ours, hand = (statistics.median(times[f"{side} {t.key}"]) * 1000 for side in ("ours", "hand"))
        python = statistics.median([dt for dt, _ in py[t.key]]) * 1000 * factor
        agree = len(set(counts[t.key].values())) == 1 and len(set(sample_counts[t.key].values())) == 1
        rows.append([t.key, f"{ours:.1f}", f"{hand:.1f}", f"{ours / hand:.2f}", f"{python:.0f}",
                     f"{python / ours:.1f}", counts[t.key]["ours"], sample_counts[t.key]["python"],
                     "yes" if agree else "NO"])
        misses += [f"{t.key}: ours/hand {ours / hand:.2f} > {GOAL_HAND}"] * (ours / hand > GOAL_HAND)
        misses += [f"{t.key}: python/ours {python / ours:.1f} < {GOAL_PYTHON}"] * (python / ours < GOAL_PYTHON)
        misses += [f"{t.key}: counts differ: {counts[t.key]}, sample {sample_counts[t.key]}"] * (not agree)
    print(h.table(rows, ["tree", "ours ms", "hand ms", "ours/hand", "python ms", "py/ours", "count", "in sample",
                         "agree"], "<>>>>>>>><"))
    print(f"  goals: ours <= {GOAL_HAND}x hand on each tree; ours >= {GOAL_PYTHON}x faster than python")
    print("  " + ("all met" if not misses else "missed: " + "; ".join(misses)))
    return 1 if args.strict and misses else 0


if __name__ == "__main__":
    sys.exit(h.main("preview", __doc__, OPTIONS, run))
