"""Per-user decide() with 50 playbooks against generated if-statements, in process."""

from __future__ import annotations

import random
import statistics
import sys
from datetime import datetime, time as dtime, timedelta, timezone
from zoneinfo import ZoneInfo

import harness as h
from cs_daemon.engine import conditions
from cs_daemon.engine.decisions import (
    CHANNELS, History, PlaybookSet, PlaybookSpec, UserContext, confidence_of, decide, max_per_user, score_of,
)

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)
GOAL = 3.0
SEED = 20261102
N_PLAYBOOKS = 50
STAGES, LOCALES, PLANS_T = h.names(h.STAGES), h.names(h.LOCALES), h.names(h.PLAN_TRAITS)
ROLES, TAGS, TIMEZONES, EVENT_NAMES = h.ROLES, h.TAGS, h.TIMEZONES, h.EVENT_NAMES
EVENT_WEIGHTS = [30, 14, 11, 8, 5, 6, 6, 5, 3, 3, 3, 2, 2, 1.2, 1.2, 0.6, 0.8, 0.7, 0.2, 0.3]

OPTIONS = """
--contexts 5000   >=10 user contexts
--passes 7        >=1 passes over the contexts
--strict          exit 1 when the goal is missed or decisions differ
"""


def make_playbooks(seed: int) -> list[dict]:
    """50 playbooks in the API's shape, from five families with varied parameters."""
    rng = random.Random(seed)
    pick = rng.choice
    out = []
    for i in range(N_PLAYBOOKS):
        family = i % 5
        if family == 0:      # onboarding nudge (the docs' example)
            entry = {"all": [
                {"field": "lifecycle_stage", "op": "in", "value": rng.sample(["new", "onboarding", "activated"], 2)},
                {"field": "engagement_score", "op": "lt", "value": rng.randrange(20, 60)},
                {"event": "invited_teammate", "count": {"op": "eq", "value": 0}, "within_days": pick([7, 14, 30])},
                {"not": {"field": "risk_level", "op": "eq", "value": "critical"}},
                {"any": [{"field": "locale", "op": "eq", "value": pick(LOCALES)},
                         {"field": "team_size", "op": "gte", "value": rng.randrange(2, 20)}]}]}
            exit_ = {"field": "lifecycle_stage", "op": "eq", "value": "engaged"}
            area = "onboarding"
        elif family == 1:    # at-risk rescue
            entry = {"all": [
                {"field": "risk_level", "op": "in", "value": ["high", "critical"]},
                {"field": "days_since_last_activity", "op": "gte", "value": rng.randrange(3, 21)},
                {"any": [{"field": "traits.plan", "op": "in", "value": rng.sample(["starter", "pro", "enterprise"], 2)},
                         {"field": "traits.seats", "op": "gte", "value": rng.randrange(5, 50)}]},
                {"not": {"event": "session_started", "within_days": pick([3, 7])}},
                {"field": "health", "op": "lt", "value": rng.randrange(30, 60)}]}
            exit_ = {"event": "session_started", "within_days": 1}
            area = "retention"
        elif family == 2:    # expansion
            entry = {"all": [
                {"field": "expansion_score", "op": "gte", "value": rng.randrange(20, 70)},
                {"field": "traits.seats", "op": "gte", "value": rng.randrange(3, 30)},
                {"event": "seat_added", "count": {"op": "gte", "value": 1}, "within_days": 30},
                {"field": "traits.plan", "op": "neq", "value": "enterprise"},
                {"not": {"field": "traits.tags", "op": "contains", "value": pick(["edu", "partner"])}}]}
            exit_ = {"field": "traits.plan", "op": "eq", "value": "enterprise"}
            area = "expansion"
        elif family == 3:    # reactivation
            entry = {"all": [
                {"field": "lifecycle_stage", "op": "in", "value": ["dormant", "churned", "at_risk"]},
                {"field": "days_since_signup", "op": "gte", "value": rng.randrange(14, 120)},
                {"event": "login", "count": {"op": "eq", "value": 0}, "within_days": pick([14, 30])},
                {"any": [{"field": "email", "op": "exists", "value": True},
                         {"field": "traits.tags", "op": "contains", "value": "vip"}]},
                {"field": "company", "op": "exists", "value": True}]}
            exit_ = {"event": "login", "count": {"op": "gte", "value": 1}, "within_days": 1}
            area = "winback"
        else:                # power users
            entry = {"all": [
                {"field": "lifecycle_stage", "op": "eq", "value": pick(["engaged", "activated"])},
                {"field": "activation_score", "op": "gte", "value": rng.randrange(30, 70)},
                {"event": "created_project", "count": {"op": "gte", "value": rng.randrange(1, 5)},
                 "within_days": pick([14, 30])},
                {"not": {"field": "locale", "op": "in", "value": rng.sample(LOCALES, 2)}},
                {"field": "traits.timezone", "op": "exists", "value": True}]}
            exit_ = {}
            area = "advocacy"
        if rng.random() < 0.2:
            entry = {"trigger": {"event": pick(["session_started", "login", "created_project"])}, **entry}
        constraints: dict = {}
        if rng.random() < 0.6:
            constraints["channels"] = rng.sample(list(CHANNELS), rng.randrange(1, 4))
        r = rng.random()
        if r < 0.4:
            constraints["max_per_user"] = rng.randrange(1, 4)
        if r > 0.3:
            constraints["cooldown_hours"] = pick([24, 72, 168])
        if rng.random() < 0.5:
            constraints["max_per_day"] = pick([50, 200, 1000])
        if rng.random() < 0.3:
            constraints["quiet_hours"] = {"start": "22:00", "end": "07:00", "timezone": pick(TIMEZONES)}
        if rng.random() < 0.25:
            constraints["min_confidence"] = pick([0.5, 0.6, 0.7])
        hints: dict = {"priority": rng.randrange(0, 10), "goal": f"goal of playbook {i}"}
        if rng.random() < 0.5:
            hints["preferred_channel"] = pick(list(CHANNELS))
        if family == 1 and rng.random() < 0.4:
            hints["escalate"] = {"severity": pick(["High", "Critical", "Medium"])}
        elif rng.random() < 0.1:
            hints["action_type"] = "create_crm_task"
        out.append({"name": f"pb-{i:02d}-{area}", "lifecycle_area": area, "entry_conditions": entry,
                    "exit_conditions": exit_, "constraints": constraints, "strategy_hints": hints})
    return out


def make_users(n: int, seed: int, clauses, playbook_ids: list[str]) -> list[tuple[UserContext, dict, History]]:
    """Users with their event counts a clause and their history; the tenant's count of the day."""
    rng = random.Random(seed + 1)
    day = {pid: rng.choice([0, 10, 60, 300]) for pid in playbook_ids}
    rng = random.Random(seed)
    rnd = rng.random
    out = []
    for i in range(n):
        stage = rng.choices(STAGES, weights=h.weights(h.STAGES))[0]
        risk = (rng.choice(["high", "critical"]) if stage == "at_risk" else
                rng.choice(["medium", "high", "critical"]) if stage in ("dormant", "churned") else
                rng.choices(["low", "medium", "high"], weights=[75, 20, 5])[0])
        engagement = round(100 * rnd(), 1)
        values = {
            "name": f"User {i}", "email": f"user{i}@example.com" if rnd() < 0.9 else None,
            "company": f"Company {i % 997}" if rnd() < 0.7 else None,
            "role": rng.choice(ROLES) if rnd() < 0.8 else None,
            "locale": rng.choice(LOCALES) if rnd() < 0.85 else None, "lifecycle_stage": stage,
            "risk_level": risk, "team_size": min(2000, int(rng.paretovariate(1.1))) if rnd() < 0.75 else None,
            "health": round(100 * rnd(), 1), "activation_score": round(100 * rnd(), 1),
            "engagement_score": engagement, "expansion_score": round(100 * rnd() ** 2, 1),
        }
        traits: dict = {}
        if rnd() < 0.95:
            traits["plan"] = rng.choices(PLANS_T, weights=h.weights(h.PLAN_TRAITS))[0]
        r = rnd()
        if r < 0.8:
            traits["seats"] = min(5000, int(rng.paretovariate(0.9)))
        elif r < 0.85:
            traits["seats"] = str(int(rng.paretovariate(0.9)))
        if rnd() < 0.7:
            traits["tags"] = rng.sample(TAGS, int(rnd() * 4))
        if rnd() < 0.4:
            traits["timezone"] = rng.choice(TIMEZONES)
        created = NOW - timedelta(days=1 + rng.expovariate(1 / 200))
        last = None if rnd() < 0.04 else max(created, NOW - timedelta(days=rng.expovariate(1 / 6)))
        # counts per clause: a 90-day volume per name, thinned to the window
        volume = rng.lognormvariate(0, 1.1) * 20
        counts = {}
        for name, within in clauses:
            total = volume * EVENT_WEIGHTS[EVENT_NAMES.index(name)] / 100 if name in EVENT_NAMES else 0
            share = 1.0 if within is None else min(1.0, within / 90)
            x = total * share * 2 * rnd()
            counts[(name, within)] = int(x) + (rnd() < x - int(x))
        facts = conditions.Facts(values=values, traits=traits, last_activity_at=last, created_at=created, now=NOW,
                                 event_count=lambda name, within, c=counts: c.get((name, within), 0))
        tz = traits.get("timezone")
        opted = frozenset(rng.sample(["email", "in_app", "all"], 1)) if rnd() < 0.05 else frozenset()
        user = UserContext(f"u{i:06d}", facts, email=values["email"], timezone=tz if isinstance(tz, str) else None,
                           opted_out=opted)
        for_user, last_for_user = {}, {}
        for pid in rng.sample(playbook_ids, rng.randrange(0, 4)):
            for_user[pid] = rng.randrange(1, 3)
            last_for_user[pid] = NOW - timedelta(hours=rng.expovariate(1 / 48))
        out.append((user, counts, History(for_user, last_for_user, day)))
    return out


# --- the hand-written evaluator (generated) ---------------------------------------------------

class _Gen:
    """Python source for one condition tree, with the engine's semantics written out."""

    def __init__(self):
        self.locals: dict[str, str] = {}   # variable -> expression computed once per user
        self.names: dict[str, str] = {}    # expression -> variable
        self.consts: dict[str, object] = {}

    def const(self, value) -> str:
        name = f"K{len(self.consts)}"
        self.consts[name] = value
        return name

    def var(self, prefix: str, expr: str) -> str:
        name = self.names.get(expr)
        if name is None:
            name = self.names[expr] = f"{prefix}{len(self.names)}"
            self.locals[name] = expr
        return name

    def node(self, node: dict) -> str:
        node = conditions.fields_of(node)
        if not node:
            return "True"
        if "all" in node:
            return "(" + " and ".join(self.node(c) for c in node["all"]) + ")" if node["all"] else "True"
        if "any" in node:
            return "(" + " or ".join(self.node(c) for c in node["any"]) + ")" if node["any"] else "False"
        if "not" in node:
            return f"(not {self.node(node['not'])})"
        if "event" in node:
            count = node.get("count", {"op": "gte", "value": 1})
            v = self.var("ev", f"C.get({(node['event'], node.get('within_days'))!r}, 0)")
            return f"({v} {_PYOP[count['op']]} {count['value']!r})"
        return self.leaf(node["field"], node["op"], node["value"])

    def leaf(self, field: str, op: str, value) -> str:
        """The ops these playbooks use, with the engine's semantics: null and a value of another
        type never match; a trait's number is an int or a float, its tags a list or a string."""
        if field.startswith("traits."):
            x, kind = self.var("tr", f"T.get({field[7:]!r})"), "trait"
        elif field in ("days_since_last_activity", "days_since_signup"):
            at = "LA" if field == "days_since_last_activity" else "CA"
            x, kind = self.var("days", f"None if {at} is None else (now - {at}).total_seconds() / 86400"), "number"
        else:
            x, kind = self.var("f", f"V.get({field!r})"), conditions.COLUMN_FIELDS[field]
        if op == "exists":
            return f"({x} is not None)" if value else f"({x} is None)"
        if kind != "trait":
            if op == "in":
                return f"({x} in {self.const(frozenset(value))})"
            return f"({x} is not None and {x} {_PYOP[op]} {value!r})"
        if op == "contains":
            return f"((type({x}) is str or type({x}) is list) and {value!r} in {x})"
        if op == "in":
            return f"(type({x}) is str and {x} in {self.const(frozenset(value))})"
        if isinstance(value, str):
            return f"(type({x}) is str and {x} {_PYOP[op]} {value!r})"
        return f"((type({x}) is int or type({x}) is float) and {x} {_PYOP[op]} {value!r})"


_PYOP = {"eq": "==", "neq": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


def compile_hand(specs: list[PlaybookSpec]):
    """A function (user, counts, history, now) -> (matched, playbook_id, action, channel) written
    out as if by hand for these playbooks."""
    gen = _Gen()
    ranked = sorted(specs, key=lambda pb: (-score_of(pb), pb.name, pb.id))
    rank = {pb.id: k for k, pb in enumerate(ranked)}
    body: list[str] = []
    for pb in specs:
        c, hints = pb.constraints or {}, pb.strategy_hints or {}
        pid = gen.const(pb.id)
        entry = gen.node(pb.entry_conditions)
        lines = [f"# {pb.name}", f"if {entry}:", "    matched += 1"]
        checks: list[str] = []
        if pb.exit_conditions:
            checks.append(f"not {gen.node(pb.exit_conditions)}")
        conf = confidence_of(pb)
        if c.get("min_confidence") is not None and conf < c["min_confidence"]:
            checks.append("False")                     # static: this playbook never passes
        if hints.get("escalate"):
            action, channel_expr = "escalate", "'escalate'"
        elif hints.get("action_type"):
            action, channel_expr = "external_action", "None"
        else:
            action, channel_expr = "send", "ch"
        limit = max_per_user(c)
        if limit is not None:
            checks.append(f"HF.get({pid}, 0) < {limit}")
        if c.get("cooldown_hours") is not None:
            cd = gen.const(timedelta(hours=c["cooldown_hours"]))
            checks.append(f"(HL.get({pid}) is None or now - HL[{pid}] >= {cd})")
        if c.get("max_per_day") is not None:
            checks.append(f"HD.get({pid}, 0) < {c['max_per_day']}")
        inner: list[str] = []
        if action == "send":
            allowed = list(c.get("channels") or CHANNELS)
            pref = hints.get("preferred_channel")
            tries = ([pref] if pref in allowed else []) + [a for a in allowed if a != pref]
            inner.append("ch = None")
            inner.append("if 'all' not in O:")
            for k, chan in enumerate(tries):
                usable = f"{chan!r} not in O" + (" and E" if chan == "email" else "")
                inner.append(f"    {'if' if k == 0 else 'elif'} {usable}: ch = {chan!r}")
            q = c.get("quiet_hours")
            if q:
                start, end = dtime.fromisoformat(q["start"]), dtime.fromisoformat(q["end"])
                s_, e_ = gen.const(start), gen.const(end)
                qtz = q.get("timezone") or "UTC"
                lt = f"_lt(UTZ or {qtz!r})"
                quiet = (f"({s_} <= {lt} < {e_})" if start <= end else f"({lt} >= {s_} or {lt} < {e_})")
                checks.append(f"not {quiet}")
            checks.insert(0, "ch is not None")
        pick = (f"if best_rank is None or {rank[pb.id]} < best_rank: "
                f"best_rank, best, act, chan = {rank[pb.id]}, {pid}, {action!r}, {channel_expr}")
        for line in inner:
            lines.append("    " + line)
        lines.append(f"    if {' and '.join(checks) or 'True'}:")
        lines.append(f"        {pick}")
        body += lines
    prologue = ["V = user.facts.values", "T = user.facts.traits", "LA = user.facts.last_activity_at",
                "CA = user.facts.created_at", "C = counts", "O = user.opted_out", "E = user.email",
                "UTZ = user.timezone", "HF = history.for_user", "HL = history.last_for_user",
                "HD = history.last_day", "_cache = {}",
                "def _lt(name):",
                "    if name not in _cache:",
                "        _cache[name] = now.astimezone(ZoneInfo(name)).time()",
                "    return _cache[name]"]
    # per-user values, computed once, in first-use order
    prologue += [f"{name} = {expr}" for name, expr in gen.locals.items()]
    prologue += ["matched = 0", "best_rank = best = act = chan = None"]
    epilogue = ["return matched, best, act or 'none', chan"]
    src = "def hand(user, counts, history, now):\n" + "\n".join(
        "    " + line for line in prologue + body + epilogue) + "\n"
    namespace = {"ZoneInfo": ZoneInfo, **gen.consts}
    exec(compile(src, "<hand-written evaluator>", "exec"), namespace)
    return namespace["hand"]


def run(bench: h.Bench, args) -> int:
    playbooks = make_playbooks(SEED)
    for pb in playbooks:
        conditions.validate(pb["entry_conditions"])
        conditions.validate(pb["exit_conditions"])
    ids = [f"pb-{i:02d}" for i in range(N_PLAYBOOKS)]
    rng = random.Random(SEED + 11)
    specs = [PlaybookSpec(ids[i], pb["name"], pb["entry_conditions"], pb["exit_conditions"], pb["constraints"],
                          pb["strategy_hints"], rng.choice([None, None, 0.2, 0.5, 0.8]), pb["lifecycle_area"])
             for i, pb in enumerate(playbooks)]
    clauses = sorted({c for pb in playbooks for key in ("entry_conditions", "exit_conditions")
                      for c in conditions.event_clauses(pb[key])}, key=lambda c: (c[0], c[1] or 0))
    users = make_users(args.contexts, SEED, clauses, ids)
    playbook_set, hand = PlaybookSet(specs), compile_hand(specs)
    made = [decide(user, playbook_set, history, now=NOW, every=True) for user, _, history in users]
    diffs = [(user.user_id, want, got) for (user, counts, history), m in zip(users, made)
             if (got := hand(user, counts, history, NOW)) != (want := (m.matched_playbooks, m.playbook_id,
                                                                      m.action, m.channel))]
    probe = h.LoadProbe()
    times, _ = h.sides({
        "decide": lambda: [decide(user, playbook_set, history, now=NOW, every=True) for user, _, history in users],
        "hand": lambda: [hand(user, counts, history, NOW) for user, counts, history in users]}, args.passes, 1)
    d, hd = (statistics.median(times[k]) / len(users) * 1e6 for k in ("decide", "hand"))
    print(f"\ndecide() over {N_PLAYBOOKS} playbooks ({len(clauses)} event clauses), {args.contexts} user contexts, "
          f"median of {args.passes} passes, interleaved; {probe.line()}")
    print(h.table([["decide(..., every=True)", f"{d:.1f}", "1.00"],
                   ["hand-written: all 50, matched count + best", f"{hd:.1f}", f"{d / hd:.2f}"]],
                  ["method", "us/user", "decide / hand"]))
    print(f"  same decision (playbook, action, channel, matched count) for every user: "
          f"{'yes' if not diffs else 'NO: ' + str(diffs[:3])}")
    print(f"  goal: decide <= {GOAL:.0f}x hand-written: {d / hd:.2f} ({'met' if d / hd <= GOAL else 'NOT met'})")
    return 1 if args.strict and (d / hd > GOAL or diffs) else 0


if __name__ == "__main__":
    sys.exit(h.main("decide", __doc__, OPTIONS, run))
