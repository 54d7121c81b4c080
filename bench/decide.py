"""Per-user decision time with 50 active playbooks against a hand-written evaluator, and the
dry-run latency over HTTP.

    .venv/bin/python bench/decide.py                       # or with --users / --requests
    .venv/bin/python bench/decide.py --skip-http           # the in-process part only

By itself it
  1. in process: builds 50 PlaybookSpec objects (deterministic, seeded) of about 5
     conditions each - column fields, derived days, traits (string, number and array),
     one event clause (count >= N or = 0 within D days), nested any/not - with realistic
     exit conditions, constraints (channels, max_per_user, cooldown, max_per_day, quiet
     hours, min_confidence) and strategy hints (priority, preferred channel, escalate,
     external actions), a set of user contexts (Facts with precomputed event counts, an
     e-mail or not, a time zone, opt-outs) and a History each; then times, interleaved
     over --passes passes, per user:
       decide:  cs_daemon.engine.decisions.decide(user, playbooks, history, now=NOW, every=True)
                (the dry run's call: every playbook considered, a verdict for each), with
                playbooks = PlaybookSet(specs) built once before the timing, as the
                service keeps it per set of playbooks (and as the hand-written function is
                generated once);
       hand:    a Python function generated from the same 50 playbooks - plain if-statements
                per playbook, the conditions written out with the same semantics (missing
                values never compare, numbers never equal text), the constraints inlined,
                static values (score, confidence, rank) precomputed - that counts the
                matching playbooks and picks the best (same playbook, action and channel
                as decide; checked for every user);
       hand-early: the same, playbooks in rank order, stopping at the first eligible one
                (no matched count; an upper bound of what hand-written code can do);
     and prints microseconds a user and the ratio decide / hand (goal <= 3);
  2. over HTTP: creates a fresh PostgreSQL database (unique name), migrates it, makes a
     tenant on the "scale" plan (rate limits do not interfere), starts gunicorn with
     2 sync workers (webapp.wsgi:app, production mode: DATABASE_URL, REDIS_URL with a
     unique CS_REDIS_PREFIX, CS_SECRET_KEY), creates the same 50 playbooks through
     POST /api/playbooks and activates them with PUT /api/playbooks/{id}/status, ingests
     --users users through POST /api/track ($identify with traits, $locale, product events
     over the last 30 days; batches of 100), then sends --warmup + --requests
     POST /api/interventions/dry-run for random users from one sequential client and
     prints p50/p95/p99/mean latency and throughput; then, in this process on the same
     database, times service.dry_run (the route's work without HTTP/auth/serialization) and
     its parts (loading specs, the user's context, the history; decide) for a breakdown;
  3. tears everything down (gunicorn, database, Redis keys of the prefix), also on error
     or Ctrl-C.

Machine load (load average, the machine's busy CPU share) is printed with the figures.
Exit status: 0 when the measurement ran (--strict: 1 when the ratio goal is missed or a
decision differs), 2 when setup or a request failed. CS_TEST_PG / CS_TEST_REDIS say where
PostgreSQL and Redis are (as for the tests)."""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, time as dtime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg
import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cs_daemon.engine import conditions  # noqa: E402
from cs_daemon.engine.decisions import (  # noqa: E402
    CHANNELS, History, PlaybookSet, PlaybookSpec, UserContext, confidence_of, decide, max_per_user, score_of,
)

PG = os.environ.get("CS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("CS_TEST_REDIS", "redis://127.0.0.1:6379/0")
HOST = "127.0.0.1"
NOW = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)
GOAL = 3.0
PLAN = "scale"
WORKERS = 2
N_PLAYBOOKS = 50


class BenchError(Exception):
    pass


def _conninfo(dbname: str) -> str:
    return PG.replace("postgresql+psycopg://", "postgresql://") + f"/{dbname}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _cpu_times() -> tuple[float, float]:
    with open("/proc/stat") as fh:
        parts = [float(x) for x in fh.readline().split()[1:]]
    return sum(parts), parts[3] + (parts[4] if len(parts) > 4 else 0.0)


class LoadProbe:
    def __init__(self):
        self.load0 = os.getloadavg()
        self.cpu0 = _cpu_times()

    def line(self) -> str:
        total, idle = _cpu_times()
        dt, di = total - self.cpu0[0], idle - self.cpu0[1]
        busy = 100.0 * (1 - di / dt) if dt > 0 else float("nan")
        return (f"load average {self.load0[0]:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, "
                f"machine CPU busy {busy:.0f}% over the phase")


# --- the 50 playbooks ----------------------------------------------------------------------

STAGES = ["new", "onboarding", "activated", "engaged", "at_risk", "dormant", "churned"]
LOCALES = ["en", "de", "fr", "es", "en-GB", "ja", "pt", "nl"]
ROLES = ["engineer", "product manager", "designer", "founder", "marketing", "support lead", "admin", "analyst"]
PLANS_T = ["free", "starter", "pro", "enterprise"]
TAGS = ["beta", "vip", "trial-extended", "partner", "edu", "api", "sso", "churn-risk"]
TIMEZONES = ["Europe/Berlin", "America/New_York", "America/Los_Angeles", "Asia/Tokyo", "UTC"]
EVENT_NAMES = ["page_viewed", "feature_used", "session_started", "login", "api_call", "report_viewed",
               "dashboard_viewed", "search_performed", "created_project", "logout", "comment_added",
               "file_uploaded", "export_created", "invited_teammate", "settings_changed",
               "integration_connected", "billing_viewed", "support_ticket_opened", "upgraded_plan",
               "seat_added"]
EVENT_WEIGHTS = [30, 14, 11, 8, 5, 6, 6, 5, 3, 3, 3, 2, 2, 1.2, 1.2, 0.6, 0.8, 0.7, 0.2, 0.3]


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


def event_clauses(playbooks) -> list[tuple[str, float | None]]:
    out: set = set()
    for pb in playbooks:
        out |= conditions.event_clauses(pb["entry_conditions"]) | conditions.event_clauses(pb["exit_conditions"])
    return sorted(out, key=lambda c: (c[0], c[1] or 0))


# --- users ---------------------------------------------------------------------------------


@dataclass
class UserCase:
    user: UserContext
    counts: dict
    history: History


def make_users(n: int, seed: int, clauses, playbook_ids: list[str]) -> list[UserCase]:
    rng = random.Random(seed)
    rnd = rng.random
    out = []
    for i in range(n):
        stage = rng.choices(STAGES, weights=[8, 20, 25, 22, 12, 8, 5])[0]
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
            traits["plan"] = rng.choices(PLANS_T, weights=[40, 30, 20, 10])[0]
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
        out.append(UserCase(user, counts, History(for_user, last_for_user, {})))
    return out


def tenant_day_counts(seed: int, playbook_ids: list[str]) -> dict[str, int]:
    rng = random.Random(seed + 1)
    return {pid: rng.choice([0, 10, 60, 300]) for pid in playbook_ids}


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
        if field.startswith("traits."):
            key = field[7:]
            x = self.var("tr", f"T.get({key!r})")
            return self.trait(x, op, value)
        if field == "days_since_last_activity":
            x = self.var("days", "None if LA is None else (now - LA).total_seconds() / 86400")
            kind = "number"
        elif field == "days_since_signup":
            x = self.var("days", "None if CA is None else (now - CA).total_seconds() / 86400")
            kind = "number"
        else:
            x = self.var("f", f"V.get({field!r})")
            kind = conditions.COLUMN_FIELDS[field]
        return self.column(x, kind, op, value)

    @staticmethod
    def _same(kind: str, v) -> bool:
        return (kind == "number") == (isinstance(v, (int, float)) and not isinstance(v, bool))

    def column(self, x: str, kind: str, op: str, value) -> str:
        if op == "exists":
            return f"({x} is not None)" if value else f"({x} is None)"
        if op == "contains":
            if kind != "text" or not isinstance(value, str):
                return "False"
            return f"({x} is not None and {value!r} in {x})"
        if op in ("in", "nin"):
            same = frozenset(v for v in value if self._same(kind, v))
            if op == "in":
                return f"({x} in {self.const(same)})" if same else "False"
            return f"({x} is not None and {x} not in {self.const(same)})" if same else f"({x} is not None)"
        if not self._same(kind, value):
            return "False"
        return f"({x} is not None and {x} {_PYOP[op]} {value!r})"

    def trait(self, x: str, op: str, value) -> str:
        num = f"(type({x}) is int or type({x}) is float)"
        if op == "exists":
            return f"({x} is not None)" if value else f"({x} is None)"
        if op == "contains":
            if isinstance(value, str):
                return f"((type({x}) is str or type({x}) is list) and {value!r} in {x})"
            return (f"(type({x}) is list and any((type(i) is int or type(i) is float) and i == {value!r} "
                    f"for i in {x}))")
        if op in ("in", "nin"):
            strs = frozenset(v for v in value if isinstance(v, str))
            nums = frozenset(v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool))
            neg = "not " if op == "nin" else ""
            parts = []
            if strs or op == "nin":
                parts.append(f"(type({x}) is str and {x} {neg}in {self.const(strs)})")
            if nums or op == "nin":
                parts.append(f"({num} and {x} {neg}in {self.const(nums)})")
            return "(" + " or ".join(parts) + ")" if parts else "False"
        if isinstance(value, str):
            return f"(type({x}) is str and {x} {_PYOP[op]} {value!r})"
        return f"({num} and {x} {_PYOP[op]} {value!r})"


_PYOP = {"eq": "==", "neq": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


def _local_time(tz_name: str, fallback: str, now: datetime) -> dtime:
    try:
        return now.astimezone(ZoneInfo(tz_name)).time()
    except (ZoneInfoNotFoundError, ValueError):
        return now.astimezone(ZoneInfo(fallback)).time()


def compile_hand(specs: list[PlaybookSpec], *, early_exit: bool = False):
    """A function (user, history, now) -> (matched or None, playbook_id, action, channel)
    written out as if by hand for these playbooks."""
    gen = _Gen()
    ranked = sorted(specs, key=lambda pb: (-score_of(pb), pb.name, pb.id))
    rank = {pb.id: k for k, pb in enumerate(ranked)}
    order = ranked if early_exit else specs
    body: list[str] = []
    for pb in order:
        c, hints = pb.constraints or {}, pb.strategy_hints or {}
        pid = gen.const(pb.id)
        entry = gen.node(pb.entry_conditions)
        lines = [f"# {pb.name}", f"if {entry}:"]
        if not early_exit:
            lines.append("    matched += 1")
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
                lt = f"_lt(UTZ or {qtz!r}, {qtz!r})"
                quiet = (f"({s_} <= {lt} < {e_})" if start <= end else f"({lt} >= {s_} or {lt} < {e_})")
                checks.append(f"not {quiet}")
            checks.insert(0, "ch is not None")
        pick = (f"return None, {pid}, {action!r}, {channel_expr}" if early_exit else
                f"if best_rank is None or {rank[pb.id]} < best_rank: "
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
                "def _lt(name, fallback):",
                "    t = _cache.get((name, fallback))",
                "    if t is None:",
                "        t = _cache[(name, fallback)] = _local_time(name, fallback, now)",
                "    return t"]
    # per-user values, computed once, in first-use order
    prologue += [f"{name} = {expr}" for name, expr in gen.locals.items()]
    if early_exit:
        epilogue = ["return None, None, 'none', None"]
    else:
        prologue += ["matched = 0", "best_rank = best = act = chan = None"]
        epilogue = ["return matched, best, act or 'none', chan"]
    src = "def hand(user, counts, history, now):\n" + "\n".join(
        "    " + line for line in prologue + body + epilogue) + "\n"
    namespace = {"_local_time": _local_time, **gen.consts}
    exec(compile(src, "<hand-written evaluator>", "exec"), namespace)
    return namespace["hand"], src


# --- in-process timing ---------------------------------------------------------------------


def in_process(specs: list[PlaybookSpec], users: list[UserCase], passes: int) -> dict:
    playbooks = PlaybookSet(specs)
    hand, src = compile_hand(specs)
    early, _ = compile_hand(specs, early_exit=True)
    # agreement, user by user
    diffs = []
    for case in users:
        made = decide(case.user, playbooks, case.history, now=NOW, every=True)
        got = hand(case.user, case.counts, case.history, NOW)
        want = (made.matched_playbooks, made.playbook_id, made.action, made.channel)
        if got != want:
            diffs.append((case.user.user_id, want, got))
        e = early(case.user, case.counts, case.history, NOW)
        if e[1:] != want[1:]:
            diffs.append((case.user.user_id, want, ("early",) + e))
    stats = {"decide": [], "hand": [], "hand-early": []}

    def run_decide():
        for case in users:
            decide(case.user, playbooks, case.history, now=NOW, every=True)

    def run_hand():
        for case in users:
            hand(case.user, case.counts, case.history, NOW)

    def run_early():
        for case in users:
            early(case.user, case.counts, case.history, NOW)

    runs = [("decide", run_decide), ("hand", run_hand), ("hand-early", run_early)]
    for fn in (run_decide, run_hand, run_early):   # warm-up
        fn()
    for p in range(passes):
        for label, fn in (runs if p % 2 == 0 else runs[::-1]):
            t0 = time.perf_counter()
            fn()
            stats[label].append((time.perf_counter() - t0) / len(users) * 1e6)
    picked = sum(1 for case in users
                 if decide(case.user, playbooks, case.history, now=NOW, every=True).playbook_id is not None)
    matched = statistics.fmean(decide(c.user, playbooks, c.history, now=NOW, every=True).matched_playbooks
                               for c in users)
    return {"stats": stats, "diffs": diffs, "src_lines": src.count("\n"), "picked": picked, "matched": matched,
            "src": src}


# --- HTTP environment ------------------------------------------------------------------------


def _no_control_socket() -> list[str]:
    from gunicorn import config

    names = {setting.name for setting in config.KNOWN_SETTINGS}
    return ["--no-control-socket"] if "control_socket_disable" in names else []


class Environment:
    """Everything the HTTP part creates, and its teardown (safe at any stage)."""

    def __init__(self):
        self.dbname = f"cs_bench_decide_{uuid.uuid4().hex[:10]}"
        self.prefix = f"csbench-{uuid.uuid4().hex[:8]}"
        self.secret = secrets.token_hex(32)
        self.db_url = f"{PG}/{self.dbname}"
        self.tmp = Path(tempfile.mkdtemp(prefix="cs-bench-decide-"))
        self.db_created = False
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log = self.tmp / "api.log"
        self.tenant_id: str | None = None
        self.key: str | None = None
        self.torn_down = False

    def settings(self):
        from cs_daemon.config import Settings

        return Settings(database_url=self.db_url, redis_url=REDIS, cs_redis_prefix=self.prefix,
                        cs_secret_key=self.secret, cs_data_dir=self.tmp)

    def create(self) -> None:
        from cs_daemon import migrate
        from cs_daemon.runtime import Runtime
        from cs_daemon.tenants import service as tenants

        with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.db_created = True
        migrate.upgrade(self.settings())
        from sqlalchemy import update

        from cs_daemon.tenants.models import Tenant

        rt = Runtime(self.settings())
        with rt.session() as s:
            made = tenants.create(s, name="Bench", owner_email="owner@bench.example", now=rt.now(), plan_tier=PLAN)
            # The scale plan has no tracked-user limit, but tenants.create stores the model's
            # default (1000) for None (as bench/ingest.py notes too); lift it here.
            s.execute(update(Tenant).where(Tenant.id == made.tenant.id).values(tracked_user_limit=None))
        self.tenant_id, self.key = made.tenant.id, made.key.secret

    def start(self) -> None:
        from cs_daemon.config import Settings

        ours = {name.upper() for name in Settings.model_fields}
        env = {k: v for k, v in os.environ.items() if k.upper() not in ours}
        env.update({"DATABASE_URL": self.db_url, "REDIS_URL": REDIS, "CS_REDIS_PREFIX": self.prefix,
                    "CS_SECRET_KEY": self.secret, "CS_DATA_DIR": str(self.tmp / "data"),
                    "CS_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"})
        self.port = _free_port()
        argv = [sys.executable, "-m", "gunicorn", "webapp.wsgi:app", "--workers", str(WORKERS),
                "--bind", f"{HOST}:{self.port}", "--pythonpath", str(ROOT), "--graceful-timeout", "5",
                *_no_control_socket()]
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(argv, cwd=self.tmp, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 30.0) -> requests.Response:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"gunicorn exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                resp = requests.get(self.url("/api/settings"), headers=self.headers(), timeout=5)
                if resp.status_code == 200:
                    return resp
                last = f"HTTP {resp.status_code}: {resp.text[:300]}"
            except requests.RequestException as exc:
                last = str(exc)
            time.sleep(0.1)
        raise BenchError(f"gunicorn not ready after {timeout:.0f} s ({last}):\n{self.log_tail()}")

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"}

    def teardown(self) -> list[str]:
        if self.torn_down:
            return []
        self.torn_down = True
        problems, done = [], []
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                problems.append("gunicorn did not stop on SIGTERM; killed")
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)
            done.append("gunicorn stopped")
        try:
            from cs_daemon.db import dispose_engines

            dispose_engines()
        except Exception as exc:  # pragma: no cover
            problems.append(f"disposing engines: {exc}")
        if self.db_created:
            try:
                with psycopg.connect(_conninfo("postgres"), autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
                self.db_created = False
                done.append(f"database {self.dbname} dropped")
            except Exception as exc:
                problems.append(f"dropping database {self.dbname}: {exc}")
        try:
            client = redis.Redis.from_url(REDIS, socket_timeout=5)
            batch = list(client.scan_iter(f"{self.prefix}:*", count=1000))
            if batch:
                client.delete(*batch)
            client.close()
            done.append(f"{len(batch)} Redis keys deleted")
        except Exception as exc:
            problems.append(f"deleting Redis keys {self.prefix}:*: {exc}")
        for f in sorted(self.tmp.rglob("*"), reverse=True):
            try:
                f.unlink() if f.is_file() else f.rmdir()
            except OSError:
                pass
        try:
            self.tmp.rmdir()
        except OSError:
            pass
        print(f"teardown: {', '.join(done) or 'nothing to undo'}", file=sys.stderr)
        return problems


def _check(resp: requests.Response, what: str, status: int = 200) -> dict:
    if resp.status_code != status:
        raise BenchError(f"{what}: HTTP {resp.status_code}: {resp.text[:400]}")
    return resp.json()


def track_batches(n_users: int, seed: int, real_now: datetime) -> tuple[list[dict], int]:
    """POST /api/track bodies (100 events each) for n_users users."""
    rng = random.Random(seed + 7)
    events: list[dict] = []
    for i in range(n_users):
        uid = f"user-{i:06d}"
        t0 = real_now - timedelta(days=rng.uniform(1, 60))
        traits = {"name": f"User {i}", "company": f"Company {i % 997}", "role": rng.choice(ROLES),
                  "team_size": min(2000, int(rng.paretovariate(1.1)))}
        if rng.random() < 0.9:
            traits["email"] = f"user{i}@example.com"
        if rng.random() < 0.95:
            traits["plan"] = rng.choices(PLANS_T, weights=[40, 30, 20, 10])[0]
        traits["seats"] = min(5000, int(rng.paretovariate(0.9))) if rng.random() < 0.85 else "12"
        if rng.random() < 0.7:
            traits["tags"] = rng.sample(TAGS, int(rng.random() * 4))
        if rng.random() < 0.4:
            traits["timezone"] = rng.choice(TIMEZONES)
        evs = [{"user_id": uid, "event": "$identify", "properties": traits, "timestamp": t0.isoformat()}]
        if rng.random() < 0.7:
            evs.append({"user_id": uid, "event": "$locale", "properties": {"locale": rng.choice(LOCALES)},
                        "timestamp": t0.isoformat()})
        n = int(min(120, 3 + rng.lognormvariate(2.3, 0.8)))
        span = max(0.0, (real_now - t0).total_seconds() - 60)
        quiet = rng.expovariate(1 / 5) * 86400   # days since the last event
        for _ in range(n):
            at = t0 + timedelta(seconds=rng.uniform(0, max(1.0, span - quiet)))
            evs.append({"user_id": uid, "event": rng.choices(EVENT_NAMES, weights=EVENT_WEIGHTS)[0],
                        "properties": {}, "timestamp": at.isoformat()})
        for k, e in enumerate(evs):
            e["idempotency_key"] = f"{uid}-{k}"
        events += evs
    return [{"events": events[k:k + 100]} for k in range(0, len(events), 100)], len(events)


def percentiles(xs: list[float]) -> dict:
    ms = [x * 1000 for x in xs]
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50": statistics.median(ms), "p95": q[94], "p99": q[98], "mean": statistics.fmean(ms),
            "max": max(ms), "n": len(ms)}


def http_part(args, playbooks: list[dict]) -> dict:
    env = Environment()
    out: dict = {"env": env}
    try:
        print(f"HTTP: database {env.dbname}, Redis prefix {env.prefix}", file=sys.stderr)
        env.create()
        env.start()
        first = env.wait_ready()
        from cs_daemon.plans import plan

        if first.headers.get("X-RateLimit-Limit") != str(plan(PLAN).requests_per_minute):
            raise BenchError(f"expected X-RateLimit-Limit {plan(PLAN).requests_per_minute} (production mode), "
                             f"got {first.headers.get('X-RateLimit-Limit')!r}")
        s = requests.Session()
        h = env.headers()
        t0 = time.perf_counter()
        ids = []
        for pb in playbooks:
            made = _check(s.post(env.url("/api/playbooks"), json=pb, headers=h, timeout=30), "POST /api/playbooks",
                          201)
            _check(s.put(env.url(f"/api/playbooks/{made['id']}/status"), json={"status": "active"}, headers=h,
                         timeout=30), "PUT status")
            ids.append(made["id"])
        out["playbooks_s"] = time.perf_counter() - t0
        real_now = datetime.now(timezone.utc)
        bodies, n_events = track_batches(args.users, args.seed, real_now)
        t0 = time.perf_counter()
        errors: list[str] = []
        lock = threading.Lock()
        cursor = iter(bodies)

        def worker():
            sess = requests.Session()
            while True:
                with lock:
                    body = next(cursor, None)
                if body is None or errors:
                    return
                try:
                    resp = sess.post(env.url("/api/track"), json=body, headers=h, timeout=60)
                except requests.RequestException as exc:
                    errors.append(f"POST /api/track: {exc}")
                    return
                if resp.status_code != 200:
                    errors.append(f"POST /api/track: HTTP {resp.status_code}: {resp.text[:300]}")
                elif resp.json().get("over_limit"):
                    errors.append(f"POST /api/track: events over the tracked-user limit: {resp.text[:300]}")

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise BenchError(errors[0])
        out["ingest_s"] = time.perf_counter() - t0
        stats = _check(s.get(env.url("/api/customers/stats"), headers=h, timeout=30), "GET /api/customers/stats")
        if stats.get("stats", {}).get("total") != args.users:
            raise BenchError(f"expected {args.users} customers after ingest, the API counts {stats}")
        out["ingest_events"] = n_events
        out["ingest_requests"] = len(bodies)
        user_ids = [f"user-{i:06d}" for i in range(args.users)]
        rng = random.Random(args.seed + 3)
        # check one response
        sample = _check(s.post(env.url("/api/interventions/dry-run"), json={"user_id": user_ids[0]}, headers=h,
                               timeout=30), "dry-run")
        if len(sample["rules"]) != N_PLAYBOOKS:
            raise BenchError(f"dry-run lists {len(sample['rules'])} rules, expected {N_PLAYBOOKS}")
        for _ in range(args.warmup):
            _check(s.post(env.url("/api/interventions/dry-run"), json={"user_id": rng.choice(user_ids)}, headers=h,
                          timeout=30), "dry-run")
        probe = LoadProbe()
        lat: list[float] = []
        actions: dict[str, int] = {}
        matched = []
        sizes = []
        perf = time.perf_counter
        t_all = perf()
        for _ in range(args.requests):
            uid = rng.choice(user_ids)
            t0 = perf()
            resp = s.post(env.url("/api/interventions/dry-run"), json={"user_id": uid}, headers=h, timeout=30)
            body = resp.content
            t1 = perf()
            if resp.status_code != 200:
                raise BenchError(f"dry-run: HTTP {resp.status_code}: {body[:300]!r}")
            lat.append(t1 - t0)
            data = json.loads(body)
            actions[data["decision"]["action"]] = actions.get(data["decision"]["action"], 0) + 1
            matched.append(data["context"]["matched_playbooks"])
            sizes.append(len(body))
        out["wall"] = perf() - t_all
        out["load"] = probe.line()
        out["lat"] = percentiles(lat)
        out["actions"] = actions
        out["matched"] = statistics.fmean(matched)
        out["bytes"] = statistics.fmean(sizes)
        s.close()
        if env.proc.poll() is not None:
            raise BenchError(f"gunicorn died during the run:\n{env.log_tail()}")
        out["breakdown"] = breakdown(env, user_ids, rng, args.breakdown)
    except BaseException:
        problems = env.teardown()
        for p in problems:
            print(f"teardown: {p}", file=sys.stderr)
        raise
    return out


def breakdown(env: Environment, user_ids: list[str], rng: random.Random, n: int) -> dict:
    """The route's work in this process (no HTTP, auth, rate limit or serialization), and its
    parts, on the same database."""
    from cs_daemon.customers import service as customers
    from cs_daemon.decisions import context, service
    from cs_daemon.runtime import Runtime

    rt = Runtime(env.settings())
    parts: dict[str, list[float]] = {"dry_run total": [], "session + customer": [], "specs (2 queries)": [],
                                     "user_context (1 query)": [], "history (2 queries)": [], "decide": []}
    perf = time.perf_counter
    for k in range(n + 20):
        uid = rng.choice(user_ids)
        now = rt.now()
        t0 = perf()
        with rt.session(env.tenant_id, commit=False) as s:
            service.dry_run(s, uid, now=now)
        t1 = perf()
        with rt.session(env.tenant_id, commit=False) as s:
            customer = customers.get(s, uid)
            t2 = perf()
            specs = context.specs(s)
            t3 = perf()
            user = context.user_context(s, customer, specs, now)
            t4 = perf()
            hist = context.history(s, uid, now)
            t5 = perf()
            decide(user, specs, hist, now=now, every=True)
            t6 = perf()
        if k >= 20:
            for key, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
                parts[key].append(dt)
    return {k: (statistics.median(v) * 1000, statistics.quantiles(v, n=100, method="inclusive")[98] * 1000)
            for k, v in parts.items()}


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, default=5000, help="user contexts timed in process (default 5000)")
    ap.add_argument("--passes", type=int, default=7, help="in-process passes over the contexts (default 7)")
    ap.add_argument("--users", type=int, default=3000, help="users ingested over HTTP (default 3000)")
    ap.add_argument("--requests", type=int, default=3000, help="measured dry-run requests (default 3000)")
    ap.add_argument("--warmup", type=int, default=200, help="warm-up dry-run requests (default 200)")
    ap.add_argument("--breakdown", type=int, default=300, help="in-process dry runs for the breakdown (default 300)")
    ap.add_argument("--seed", type=int, default=20261102)
    ap.add_argument("--skip-http", action="store_true", help="only the in-process part")
    ap.add_argument("--show-hand", action="store_true", help="print the generated hand-written evaluator")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the goal is missed or decisions differ")
    args = ap.parse_args(argv)
    if args.contexts < 10 or args.passes < 1 or args.requests < 100 or args.users < 10:
        ap.error("--contexts >= 10, --passes >= 1, --requests >= 100, --users >= 10")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    t_start = time.monotonic()
    status = 0
    http = None
    try:
        playbooks = make_playbooks(args.seed)
        for pb in playbooks:
            conditions.validate(pb["entry_conditions"])
            conditions.validate(pb["exit_conditions"])
        ids = [f"pb-{i:02d}" for i in range(N_PLAYBOOKS)]
        rng = random.Random(args.seed + 11)
        specs = [PlaybookSpec(ids[i], pb["name"], pb["entry_conditions"], pb["exit_conditions"], pb["constraints"],
                              pb["strategy_hints"], rng.choice([None, None, 0.2, 0.5, 0.8]), pb["lifecycle_area"])
                 for i, pb in enumerate(playbooks)]
        clauses = event_clauses(playbooks)
        users = make_users(args.contexts, args.seed, clauses, ids)
        day = tenant_day_counts(args.seed, ids)
        users = [UserCase(u.user, u.counts, History(u.history.for_user, u.history.last_for_user, day))
                 for u in users]
        leaves = [sum(1 for _ in _leaves(pb["entry_conditions"])) for pb in playbooks]
        print(f"in process: {N_PLAYBOOKS} playbooks, {args.contexts} user contexts, {args.passes} passes",
              file=sys.stderr)
        probe = LoadProbe()
        ip = in_process(specs, users, args.passes)
        ip_load = probe.line()
        if args.show_hand:
            print(ip["src"])
        if not args.skip_http:
            http = http_part(args, playbooks)

        st = ip["stats"]
        d, hd, he = (statistics.median(st[k]) for k in ("decide", "hand", "hand-early"))
        print()
        print(f"Decisions: {N_PLAYBOOKS} active playbooks, entry conditions of {min(leaves)}-{max(leaves)} leaves "
              f"(mean {statistics.fmean(leaves):.1f}), {len(clauses)} distinct event clauses, "
              f"{sum(1 for pb in playbooks if pb['exit_conditions'])} with exit conditions")
        print(f"  in process: {args.contexts} user contexts (Facts with precomputed event counts), median of "
              f"{args.passes} passes, interleaved; {ip_load}")
        print(f"  per user: {ip['matched']:.1f} playbooks match on average; {ip['picked']} of {args.contexts} users "
              f"get an action")
        print()
        print(f"  {'method':<48} {'us/user':>9} {'ratio':>7}")
        print(f"  {'decide(..., every=True)':<48} {d:>9.1f} {1.0:>7.2f}")
        print(f"  {'hand-written: all 50, matched count + best':<48} {hd:>9.1f} {d / hd:>7.2f}  (decide / hand)")
        print(f"  {'hand-written, rank order, stop at first':<48} {he:>9.1f} {d / he:>7.2f}  (decide / hand-early)")
        print(f"  per-pass spread (min-max us/user): decide {min(st['decide']):.1f}-{max(st['decide']):.1f}, "
              f"hand {min(st['hand']):.1f}-{max(st['hand']):.1f}, "
              f"hand-early {min(st['hand-early']):.1f}-{max(st['hand-early']):.1f}")
        agree = not ip["diffs"]
        print(f"  same decision (playbook, action, channel, matched count) for every user: "
              f"{'yes' if agree else 'NO: ' + str(ip['diffs'][:3])}")
        verdict = "met" if d / hd <= GOAL else "NOT met"
        print(f"  goal: decide <= {GOAL:.0f}x hand-written: {d / hd:.2f} ({verdict})")
        if http:
            lat = http["lat"]
            print()
            print(f"  HTTP: POST /api/interventions/dry-run, gunicorn {WORKERS} sync workers, production mode "
                  f"(PostgreSQL + Redis), plan {PLAN}")
            print(f"    setup: 50 playbooks created + activated in {http['playbooks_s']:.1f} s; "
                  f"{args.users} users / {http['ingest_events']:,} events ingested in "
                  f"{http['ingest_requests']} POST /api/track in {http['ingest_s']:.1f} s")
            print(f"    {lat['n']} measured requests after {args.warmup} warm-up, one sequential client, random users; "
                  f"{http['load']}")
            print(f"    latency ms: p50 {lat['p50']:.2f}  p95 {lat['p95']:.2f}  p99 {lat['p99']:.2f}  "
                  f"mean {lat['mean']:.2f}  max {lat['max']:.2f};  {lat['n'] / http['wall']:.0f} req/s")
            print(f"    responses: {http['actions']}, {http['matched']:.1f} matched playbooks and "
                  f"{http['bytes'] / 1024:.1f} KiB on average")
            print(f"    in this process on the same database (median / p99 ms of {args.breakdown}):")
            for k, (med, p99) in http["breakdown"].items():
                print(f"      {k:<26} {med:>8.2f} {p99:>8.2f}")
        print()
        print(f"  total run {time.monotonic() - t_start:.0f} s")
        if args.strict and (d / hd > GOAL or not agree):
            status = 1
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        status = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if http is not None:
            for p in http["env"].teardown():
                print(f"teardown: {p}", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return status


def _leaves(tree):
    node = conditions.fields_of(tree)
    for key in ("all", "any"):
        for child in node.get(key, []):
            yield from _leaves(child)
    if "not" in node:
        yield from _leaves(node["not"])
    if "field" in node or "event" in node:
        yield node


if __name__ == "__main__":
    sys.exit(main())
