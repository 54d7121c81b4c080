"""The condition language of playbooks (docs/conditions.md): one tree, one validator, two back
ends that must agree on every case.

- in memory, on one user (per-event decisions): `compile_tree(tree)` turns the tree into
  one function of `Facts`, built once per playbook (the engine keeps it with the
  playbook); `evaluate(tree, facts)` walks the tree instead, for one-off checks;
- `to_sql(tree, now, dialect)` compiles to a SQLAlchemy expression over the customers
  table (preview counts, sweeps), on SQLite and PostgreSQL alike: event clauses become
  EXISTS / NOT EXISTS semi-joins (grouped with HAVING when a count above one matters),
  and comparisons stay plain enough for the customers' indexes.

Semantics: `{}` matches every user; empty `all` is true, empty `any` false; a
comparison with a missing value is false (so `neq` and `nin` too: use `exists`);
numbers compare as numbers, also in traits, and a number never equals a string;
booleans are values of their own kind (`true` is neither 1 nor "true");
`contains` is a case-sensitive substring on strings and membership on arrays;
`days_since_*` compares the time elapsed with that many days, to the microsecond.
docs/conditions.md is the reference.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
import operator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from sqlalchemy import (ARRAY, DateTime, Float, Numeric, Text, all_, and_, any_, bindparam, case, cast, exists, false, func,
                        literal, not_, or_, select, true)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql import ColumnElement

from ..customers import fields
from ..customers.models import Customer, Event

COLUMN_FIELDS = fields.COMPARED
DERIVED_FIELDS = {"days_since_last_activity", "days_since_signup"}
OPS = ("eq", "neq", "lt", "lte", "gt", "gte", "in", "nin", "exists", "contains")
ORDER_OPS = ("lt", "lte", "gt", "gte")
EQUALITY_OPS = ("eq", "neq")
MISSING = object()

# bounds on what one tree may ask (docs/conditions.md, "Limits"): a tree is compiled to
# SQL and to Python, and swept over every customer of the tenant each minute
MAX_DEPTH = 10           # nested objects, the root counted as 1
MAX_CLAUSES = 200        # objects in the tree (all, any, not, field and event nodes)
MAX_VALUES = 1000        # members of an in / nin list
MAX_WITHIN_DAYS = 3650


class ConditionError(ValueError):
    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


# -- validation --------------------------------------------------------------------------

def validate(tree: Any, path: str = "$") -> None:
    """Refuse a malformed or oversized tree, naming the path of the bad node (e.g.
    `$.all[2].op`)."""
    _Checker().node(tree, path, 1)


class _Checker:
    """One validation walk: counts the objects seen so far against MAX_CLAUSES."""

    def __init__(self):
        self.clauses = 0

    def node(self, tree: Any, path: str, depth: int) -> None:
        if not isinstance(tree, dict):
            raise ConditionError(path, "a condition must be an object")
        if depth > MAX_DEPTH:
            raise ConditionError(path, f"conditions may nest at most {MAX_DEPTH} levels deep")
        node = dict(tree)
        if path == "$":
            _root_settings(node)
        if not node:
            return
        self.clauses += 1
        if self.clauses > MAX_CLAUSES:
            raise ConditionError(path, f"a tree may hold at most {MAX_CLAUSES} conditions")
        keys = set(node)
        if keys & {"all", "any"}:
            if len(keys) != 1:
                raise ConditionError(path, "all/any stands alone in its object")
            key = keys.pop()
            if not isinstance(node[key], list):
                raise ConditionError(f"{path}.{key}", "must be an array of conditions")
            for i, child in enumerate(node[key]):
                self.node(child, f"{path}.{key}[{i}]", depth + 1)
        elif "not" in keys:
            if len(keys) != 1:
                raise ConditionError(path, "not stands alone in its object")
            self.node(node["not"], f"{path}.not", depth + 1)
            if not node["not"]:
                raise ConditionError(f"{path}.not", "must not be empty")
        elif "field" in keys:
            _validate_field(node, path)
        elif "event" in keys:
            _validate_event(node, path)
        else:
            raise ConditionError(path, f"unknown condition keys {sorted(keys)}; expected all, any, not, field or event")


def _root_settings(node: dict) -> None:
    """Check and take out the settings that sit beside the conditions at the root."""
    if "trigger" in node:
        trigger = node.pop("trigger")
        if not (isinstance(trigger, dict) and set(trigger) == {"event"} and _name(trigger["event"])):
            raise ConditionError("$.trigger", 'must be {"event": "<event name>"}')
    if "attribution_days" in node:
        days = node.pop("attribution_days")
        if not (isinstance(days, int) and not isinstance(days, bool) and 1 <= days <= 365):
            raise ConditionError("$.attribution_days", "must be a whole number of days from 1 to 365")


def _name(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 255


def _validate_field(node: dict, path: str) -> None:
    extra = set(node) - {"field", "op", "value"}
    if extra:
        raise ConditionError(path, f"unknown keys {sorted(extra)}")
    field = node["field"]
    if not _name(field) or not (field in COLUMN_FIELDS or field in DERIVED_FIELDS
                                or (field.startswith("traits.") and len(field) > 7)):
        raise ConditionError(f"{path}.field", f"unknown field {field!r}")
    _validate_comparison(node, path)


def _validate_comparison(node: dict, path: str) -> None:
    op = node.get("op")
    if op not in OPS:
        raise ConditionError(f"{path}.op", f"unknown op {op!r}; one of {', '.join(OPS)}")
    if "value" not in node:
        raise ConditionError(f"{path}.value", "is required")
    value = node["value"]
    if any(map(_too_large, value if isinstance(value, list) else [value])):
        raise ConditionError(f"{path}.value", TOO_LARGE)
    if op == "exists":
        if not isinstance(value, bool):
            raise ConditionError(f"{path}.value", "exists takes true or false")
    elif op in ("in", "nin"):
        if not isinstance(value, list) or not all(_scalar(v) or isinstance(v, bool) for v in value):
            raise ConditionError(f"{path}.value", f"{op} takes an array of strings, numbers or booleans")
        if len(value) > MAX_VALUES:
            raise ConditionError(f"{path}.value", f"{op} takes at most {MAX_VALUES} values")
    elif op in ORDER_OPS:
        if not (_number(value) or isinstance(value, str)):
            raise ConditionError(f"{path}.value", f"{op} takes a number or a string")
    elif op in EQUALITY_OPS:
        if not (_scalar(value) or isinstance(value, bool)):
            raise ConditionError(f"{path}.value", f"{op} takes a string, a number or a boolean")
    elif not _scalar(value):
        raise ConditionError(f"{path}.value", f"{op} takes a string or a number")


def _validate_event(node: dict, path: str) -> None:
    extra = set(node) - {"event", "count", "within_days"}
    if extra:
        raise ConditionError(path, f"unknown keys {sorted(extra)}")
    if not _name(node["event"]):
        raise ConditionError(f"{path}.event", "must be an event name")
    count = node.get("count", {"op": "gte", "value": 1})
    if isinstance(count, dict) and _too_large(count.get("value")):
        raise ConditionError(f"{path}.count.value", TOO_LARGE)
    if not isinstance(count, dict) or count.get("op") not in ("eq", "neq", "lt", "lte", "gt", "gte") \
            or not _number(count.get("value")):
        raise ConditionError(f"{path}.count", 'must be {"op": eq|neq|lt|lte|gt|gte, "value": <number>}')
    days = node.get("within_days")
    if days is not None and (not _number(days) or not 0 < days <= MAX_WITHIN_DAYS):
        raise ConditionError(f"{path}.within_days", f"must be a number of days above 0, at most {MAX_WITHIN_DAYS}")


# A whole number a tree holds fits in 64 bits: SQLite binds no larger integer, and a tree
# must count the same on both databases and in memory (docs/conditions.md, "Limits").
MAX_INTEGER = 2**63 - 1
TOO_LARGE = f"whole numbers may be at most {MAX_INTEGER:,} either side of 0; write a larger one as 1e30"


def _too_large(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _scalar(value) -> bool:
    return _number(value) or isinstance(value, str)


def trigger_of(tree: dict | None) -> str | None:
    trigger = (tree or {}).get("trigger")
    return trigger.get("event") if isinstance(trigger, dict) else None


# settings that sit beside the conditions at the root of a tree: the entry trigger, and the
# attribution window of exit conditions (interventions/outcomes.py)
ROOT_SETTINGS = frozenset({"trigger", "attribution_days"})


def fields_of(tree: dict | None) -> dict:
    """The tree without its root settings; a `neq` comparison as the `nin` of its one
    value, which it is (a present value of any kind that differs: docs/conditions.md), so
    every evaluator reads it the same way."""
    node = {k: v for k, v in (tree or {}).items() if k not in ROOT_SETTINGS}
    if node.get("op") == "neq" and "field" in node:
        node["op"], node["value"] = "nin", [node["value"]]
    return node


def event_clauses(tree: dict | None) -> set[tuple[str, float | None]]:
    """The (event name, within_days) pairs whose counts the tree asks for."""
    node, found = fields_of(tree), set()
    for child in node.get("all", []) + node.get("any", []) + ([node["not"]] if "not" in node else []):
        found |= event_clauses(child)
    if "event" in node:
        found.add((node["event"], node.get("within_days")))
    return found


# -- shared by both back ends ------------------------------------------------------------

AT_LEAST_ONE = {"op": "gte", "value": 1}
COMPARE = {"eq": operator.eq, "neq": operator.ne, "lt": operator.lt, "lte": operator.le,
           "gt": operator.gt, "gte": operator.ge}
NEGATED = {"eq": "neq", "neq": "eq", "lt": "gte", "lte": "gt", "gt": "lte", "gte": "lt"}
MIRRORED = {"eq": "eq", "neq": "neq", "lt": "gt", "lte": "gte", "gt": "lt", "gte": "lte"}


def span(days) -> timedelta | None:
    """`days` as a duration; None when no two datetimes are that far apart."""
    try:
        return timedelta(days=days)
    except OverflowError:
        return None


def elapsed_is(op: str, elapsed: timedelta, days) -> bool:
    """`elapsed op days`, exact to the microsecond; beyond any datetime the sign decides."""
    duration = span(days)
    return COMPARE[op](0, days) if duration is None else COMPARE[op](elapsed, duration)


def cheap_first(children: list) -> list:
    """The same children, comparisons on the user before event counts and nesting (the
    result does not depend on the order; the work does)."""
    return sorted(children, key=_cost)


def _cost(node) -> int:
    """0 for a column, 1 for a trait, 2 for an event count: the dearest leaf below."""
    node = fields_of(node)
    if "field" in node:
        return 1 if node["field"].startswith("traits.") else 0
    if "event" in node:
        return 2
    children = node.get("all") or node.get("any") or ([node["not"]] if "not" in node else [])
    return max(map(_cost, children), default=0)


def _kind(value) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if _number(value):
        return "number"
    if isinstance(value, str):
        return "text"
    return None


# -- in memory: the tree walked ----------------------------------------------------------

@dataclass
class Facts:
    """What the in-memory back end knows of one user."""

    values: dict[str, Any]                  # customer fields (None when unknown)
    traits: dict[str, Any]
    last_activity_at: datetime | None
    created_at: datetime | None
    now: datetime
    event_count: Callable[[str, float | None], int]   # (name, within_days) -> count

    def __post_init__(self):
        if not isinstance(self.traits, dict):
            self.traits = {}


def evaluate(tree: dict | None, facts: Facts) -> bool:
    node = fields_of(tree)
    if not node:
        return True
    if "all" in node:
        return all(evaluate(c, facts) for c in node["all"])
    if "any" in node:
        return any(evaluate(c, facts) for c in node["any"])
    if "not" in node:
        return not evaluate(node["not"], facts)
    if "event" in node:
        count = node.get("count", AT_LEAST_ONE)
        return COMPARE[count["op"]](facts.event_count(node["event"], node.get("within_days")), count["value"])
    if node["field"] in DERIVED_FIELDS:
        return _compare_elapsed(node["op"], _elapsed(node["field"], facts), node["value"])
    return _compare(node["op"], _value(node["field"], facts), node["value"])


def _value(field: str, facts: Facts):
    if field.startswith("traits."):
        return facts.traits.get(field[7:], MISSING)
    value = facts.values.get(field)
    return MISSING if value is None else value


def _elapsed(field: str, facts: Facts):
    then = facts.last_activity_at if field == "days_since_last_activity" else facts.created_at
    return MISSING if then is None else facts.now - then


def _compare_elapsed(op: str, elapsed, expected) -> bool:
    if elapsed is MISSING:
        return op == "exists" and expected is False
    if op == "exists":
        return expected is True
    if op in ("in", "nin"):
        hit = any(_number(v) and elapsed_is("eq", elapsed, v) for v in expected)
        return hit if op == "in" else not hit
    return op != "contains" and _number(expected) and elapsed_is(op, elapsed, expected)


def _compare(op: str, actual, expected) -> bool:
    if actual is MISSING or actual is None:
        return op == "exists" and expected is False
    if op == "exists":
        return expected is True
    if op == "contains":
        if isinstance(actual, str):
            return isinstance(expected, str) and expected in actual
        if isinstance(actual, list):
            return any(_kind(item) == _kind(expected) and item == expected for item in actual)
        return False
    if op in ("in", "nin"):
        hit = any(_kind(actual) is not None and _kind(actual) == _kind(v) and actual == v for v in expected)
        return hit if op == "in" else (_kind(actual) is not None and not hit)
    if _kind(actual) is None or _kind(actual) != _kind(expected):
        return False
    return COMPARE[op](actual, expected)


# -- in memory: the tree compiled --------------------------------------------------------
#
# A tree becomes one Python expression, with every operator, kind check and value resolved
# when it is compiled, and many trees become one function that tests them all in a row
# (compile_many), so a decision over a tenant's playbooks costs about what hand-written
# if-statements do. The source holds no value from the tree: values are constants bound by
# name (k0, k1, ...) in the function's namespace, so nothing in a tree can become code.
# Column fields hold values of their declared kind (text or number), as loaded from the
# database; traits are checked per value, as in `_compare`.

Test = Callable[[Facts], bool]

# what the generated function binds from Facts, once per call
_PROLOGUE = ("g = f.values.get", "t = f.traits.get", "ec = f.event_count", "now = f.now",
             "la = f.last_activity_at", "ca = f.created_at")
_OPERATOR = {"eq": "==", "neq": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


def _finite_number(value) -> bool:
    kind = type(value)
    return kind is int or (kind is float and -math.inf < value < math.inf)


def _trait_member(value, texts: frozenset, numbers: frozenset, booleans: frozenset) -> bool | None:
    """Whether a trait value is in an in/nin list: None when it is of no comparable kind.
    Each kind is looked up in its own set (True == 1 in Python, never here)."""
    if type(value) is str:
        return value in texts
    if type(value) is bool:
        return value in booleans
    if _finite_number(value):
        return value in numbers
    return None


def _trait_holds(value, wanted) -> bool:
    """`contains` with a number: an array trait holding it."""
    return type(value) is list and any(_finite_number(item) and item == wanted for item in value)


class _Source:
    """Builds the expression of one or more trees; `names` are the constants it binds."""

    def __init__(self):
        self.names: dict[str, Any] = {"_fin": _finite_number, "_member": _trait_member, "_holds": _trait_holds}
        self.reads: dict[tuple[str, str], str] = {}     # (column|trait, name) -> local, read once a call

    def read(self, where: str, name: str) -> str:
        """A local holding the user's column or trait `name`, read in the prologue."""
        local = self.reads.get((where, name))
        if local is None:
            local = self.reads[(where, name)] = f"{where[0]}{len(self.reads)}"
        return local

    def const(self, value) -> str:
        name = f"k{len(self.names)}"
        self.names[name] = value
        return name

    def node(self, node: dict) -> str:
        if not node:
            return "True"
        if "all" in node or "any" in node:
            key = "all" if "all" in node else "any"
            parts = [self.node(fields_of(c)) for c in cheap_first(node[key])]
            if not parts:
                return "True" if key == "all" else "False"
            return "(" + (" and " if key == "all" else " or ").join(parts) + ")"
        if "not" in node:
            return f"(not {self.node(fields_of(node['not']))})"
        if "event" in node:
            count = node.get("count", AT_LEAST_ONE)
            return (f"(ec({self.const(node['event'])}, {self.const(node.get('within_days'))}) "
                    f"{_OPERATOR[count['op']]} {self.const(count['value'])})")
        field, op, value = node["field"], node["op"], node["value"]
        if field.startswith("traits."):
            return self.trait(field[7:], op, value)
        if field in DERIVED_FIELDS:
            return self.elapsed("la" if field == "days_since_last_activity" else "ca", op, value)
        return self.column(field, COLUMN_FIELDS[field], op, value)

    def column(self, name: str, kind: str, op: str, value) -> str:
        x = self.read("column", name)
        if op == "exists":
            return f"({x} is {'not ' if value else ''}None)"
        if op == "contains":
            if kind != "text" or not isinstance(value, str):
                return "False"
            return f"({x} is not None and {self.const(value)} in {x})"
        if op in ("in", "nin"):
            same = frozenset(v for v in value if _kind(v) == kind)
            if op == "in":
                return f"({x} in {self.const(same)})" if same else "False"
            return f"({x} is not None and {x} not in {self.const(same)})"
        if _kind(value) != kind:
            return "False"
        return f"({x} is not None and {x} {_OPERATOR[op]} {self.const(value)})"

    def elapsed(self, then: str, op: str, value) -> str:
        if op == "exists":
            return f"({then} is {'not ' if value else ''}None)"
        if op in ("in", "nin"):
            spans = frozenset(d for d in (span(v) for v in value if _number(v)) if d is not None)
            hit = f"(now - {then}) in {self.const(spans)}"
            return f"({then} is not None and {'' if op == 'in' else 'not '}{hit})"
        if op == "contains" or not _number(value):
            return "False"
        duration = span(value)
        if duration is None:          # beyond any datetime: the sign decides
            return f"({then} is not None)" if COMPARE[op](0, value) else "False"
        return f"({then} is not None and (now - {then}) {_OPERATOR[op]} {self.const(duration)})"

    def trait(self, key: str, op: str, value) -> str:
        x = self.read("trait", key)
        if op == "exists":
            return f"({x} is {'not ' if value else ''}None)"
        if op == "contains":
            if isinstance(value, str):
                return f"(type({x}) in (str, list) and {self.const(value)} in {x})"
            return f"_holds({x}, {self.const(value)})"
        if op in ("in", "nin"):
            texts = self.const(frozenset(v for v in value if isinstance(v, str)))
            numbers = self.const(frozenset(v for v in value if _number(v)))
            booleans = self.const(frozenset(v for v in value if isinstance(v, bool)))
            member = f"_member({x}, {texts}, {numbers}, {booleans})"
            return f"({member} is True)" if op == "in" else f"({member} is False)"
        if isinstance(value, str):
            return f"(type({x}) is str and {x} {_OPERATOR[op]} {self.const(value)})"
        if isinstance(value, bool):
            return f"(type({x}) is bool and {x} {_OPERATOR[op]} {self.const(value)})"
        return f"(_fin({x}) and {x} {_OPERATOR[op]} {self.const(value)})"

    def prologue(self) -> list[str]:
        lines = list(_PROLOGUE)
        for (where, name), local in self.reads.items():
            lines.append(f"{local} = {'g' if where == 'column' else 't'}({self.const(name)})")
        return lines

    def function(self, name: str, body: list[str]) -> Callable:
        source = "\n    ".join([f"def {name}(f):", *self.prologue(), *body])
        namespace = dict(self.names)
        exec(compile(source, f"<conditions:{name}>", "exec"), namespace)
        return namespace[name]


def compile_tree(tree: dict | None) -> Test:
    """The tree (already validated) as one function of a user's Facts."""
    src = _Source()
    return src.function("test", [f"return bool({src.node(fields_of(tree))})"])


def compile_many(trees: list[dict | None]) -> Callable[[Facts], list[int]]:
    """The trees (already validated) as one function answering the indices of those that
    match, in order."""
    src = _Source()
    body = ["m = []"]
    for i, tree in enumerate(trees):
        body += [f"if {src.node(fields_of(tree))}:", f"    m.append({i})"]
    return src.function("matching", body + ["return m"])


# -- SQL ---------------------------------------------------------------------------------
#
# Each node compiles to (expression, may_be_null). A comparison on a missing value is NULL
# in SQL, which a WHERE clause treats as false, as memory does; only under `not` must it
# become false first (COALESCE), so comparisons elsewhere stay plain for the indexes.

def to_sql(tree: dict | None, *, now: datetime, dialect: str) -> ColumnElement[bool]:
    """A WHERE criterion over `customers` (rows of one tenant are selected by the caller's
    tenant-scoped session). It may be NULL where it means false: use it as a criterion,
    and negate inside the tree (`not`), never around it."""
    return _Sql(now, dialect).node(fields_of(tree))[0]


class _Sql:
    def __init__(self, now: datetime, dialect: str):
        self.now = now
        self.pg = dialect == "postgresql"

    def node(self, node: dict) -> tuple[ColumnElement[bool], bool]:
        if not node:
            return true(), False
        if "all" in node or "any" in node:
            key = "all" if "all" in node else "any"
            parts = [self.node(fields_of(c)) for c in cheap_first(node[key])]
            join, empty = (and_, true()) if key == "all" else (or_, false())
            return join(empty, *[e for e, _ in parts]), any(nullable for _, nullable in parts)
        if "not" in node:
            expr, nullable = self.node(fields_of(node["not"]))
            return not_(func.coalesce(expr, false()) if nullable else expr), False
        if "event" in node:
            return self.event(node), False
        field, op, value = node["field"], node["op"], node["value"]
        if field.startswith("traits."):
            return self.trait(field[7:], op, value)
        if field in DERIVED_FIELDS:
            return self.elapsed(field, op, value)
        return self.column(field, op, value)

    # event clauses: users with (EXISTS) or without (NOT EXISTS) enough matching events
    def event(self, node: dict) -> ColumnElement[bool]:
        count = node.get("count", AT_LEAST_ONE)
        op, wanted = count["op"], count["value"]
        matching = [Event.event == node["event"]]
        if node.get("within_days") is not None:
            matching.append(Event.timestamp >= self.now - timedelta(days=node["within_days"]))
        if COMPARE[op](0, wanted):   # users without events match: exclude those with too many
            return not_(self.users_counting(NEGATED[op], wanted, matching))
        return self.users_counting(op, wanted, matching)

    def users_counting(self, op: str, wanted, matching: list) -> ColumnElement[bool]:
        """The user has matching events whose count satisfies `op wanted` (which zero does not)."""
        if op in ("gte", "gt", "neq") and COMPARE[op](1, wanted):   # one event is enough
            return exists().where(Event.tenant_id == Customer.tenant_id, Event.user_id == Customer.id, *matching)
        counted = (select(Event.tenant_id, Event.user_id).where(*matching)
                   .group_by(Event.tenant_id, Event.user_id)
                   .having(COMPARE[op](func.count(), literal(wanted))).subquery())
        return exists().where(counted.c.tenant_id == Customer.tenant_id, counted.c.user_id == Customer.id)

    def column(self, name: str, op: str, value) -> tuple[ColumnElement[bool], bool]:
        column, kind = getattr(Customer, name), COLUMN_FIELDS[name]
        nullable = Customer.__table__.c[name].nullable
        if op == "exists":
            return (column.isnot(None) if value else column.is_(None)), False
        if op == "contains":
            if kind != "text" or not isinstance(value, str):
                return false(), False
            return self.substring(column, value), nullable
        if op in ("in", "nin"):
            same = [v for v in value if _kind(v) == kind]
            if not same:
                return (false(), False) if op == "in" else (column.isnot(None), False)
            return self.one_of(op, column, same, kind), nullable
        if _kind(value) != kind:
            return false(), False
        if kind == "text" and op in ORDER_OPS:
            return COMPARE[op](self.binary(column), self.binary(literal(value))), nullable
        return COMPARE[op](column, literal(value)), nullable

    # days since: the timestamp against now minus that many days, so its index serves
    def elapsed(self, field: str, op: str, value) -> tuple[ColumnElement[bool], bool]:
        name = "last_activity_at" if field == "days_since_last_activity" else "created_at"
        column, nullable = getattr(Customer, name), Customer.__table__.c[name].nullable
        present = column.isnot(None)
        if op == "exists":
            return (present if value else column.is_(None)), False
        if op in ("in", "nin"):
            cutoffs = [c for c in (self.cutoff(v) for v in value if _number(v)) if c is not None]
            if not cutoffs:
                return (false(), False) if op == "in" else (present, False)
            return self.one_of(op, column, cutoffs, "datetime"), nullable
        if op == "contains" or not _number(value):
            return false(), False
        cutoff = self.cutoff(value)
        if cutoff is None:   # every datetime is on the same side of it
            return (present if COMPARE[op](0, value) else false()), False
        return COMPARE[MIRRORED[op]](column, cutoff), nullable

    def cutoff(self, days) -> datetime | None:
        duration = span(days)
        try:
            return None if duration is None else self.now - duration
        except OverflowError:
            return None

    def binary(self, expr):
        """Order text by code point on both databases, as Python does (equality needs no
        collation, so it keeps the column's indexes)."""
        return expr.collate("C") if self.pg else expr

    def substring(self, expr, value: str):
        return func.strpos(expr, value) > 0 if self.pg else func.instr(expr, value) > 0

    # traits: JSON values whose type is only known per row; each JSON type test is one
    # CASE over the value's type, read once
    def trait(self, key: str, op: str, value) -> tuple[ColumnElement[bool], bool]:
        text, of_type = self.trait_parts(key)
        if op == "exists":
            return (text.isnot(None) if value else text.is_(None)), False
        if op == "contains":
            branches = {"array": self.array_has(key, value)}
            if isinstance(value, str):
                branches["string"] = self.substring(text, value)
            return of_type(branches), False
        if op in ("in", "nin"):
            texts = [v for v in value if isinstance(v, str)]
            numbers = [v for v in value if _number(v)]
            booleans = {v for v in value if isinstance(v, bool)}
            if op == "in" and not numbers and not booleans and all(map(_only_a_string, texts)):
                return (self.one_of(op, text, texts, "text"), True) if texts else (false(), False)
            branches = {}
            if texts or op == "nin":
                branches["string"] = self.member(op, text, texts, "text")
            if numbers or op == "nin":
                branches["number"] = self.member(op, self.read_number(text, numbers), numbers, "number")
            if booleans or op == "nin":
                branches["boolean"] = {b for b in (True, False) if (b in booleans) == (op == "in")}
            return of_type(branches), False
        if isinstance(value, bool):
            return of_type({"boolean": {value} if op == "eq" else {not value}}), False
        if isinstance(value, str):
            if op == "eq" and _only_a_string(value):
                return text == value, True
            order = op in ORDER_OPS
            left, right = (self.binary(text), self.binary(literal(value))) if order else (text, literal(value))
            return of_type({"string": COMPARE[op](left, right)}), False
        exact = _past_float([value])
        right = literal(Decimal(value), Numeric()) if self.pg and exact else literal(value)
        return of_type({"number": COMPARE[op](self.read_number(text, [value]), right)}), False

    def read_number(self, text, values: list):
        """A trait's number: on SQLite as json_extract gives it (an integer or a real, which
        SQLite compares exactly); on PostgreSQL a float, or numeric where the tree holds a
        whole number a float cannot hold (past 2**53), so it compares as Python does."""
        if not self.pg:
            return text
        return cast(text, Numeric if _past_float(values) else Float)

    def member(self, op: str, expr, values: list, kind: str):
        if not values:
            return false() if op == "in" else true()
        return self.one_of(op, expr, values, kind)

    def one_of(self, op: str, expr, values: list, kind: str) -> ColumnElement[bool]:
        """`expr IN values` (`NOT IN` for nin) with the values bound as one parameter, an
        array on PostgreSQL and a JSON array read by json_each on SQLite: one parameter
        a value would pass the databases' bound on a statement's parameters (SQLite
        32,766, PostgreSQL 65,535) with a tree the limits allow (200 lists of 1,000)."""
        if self.pg:
            element = _PG_TYPES.get(kind)
            if kind == "number":   # one type for the array: numeric where a float is not exact
                element, values = ((Numeric(), [Decimal(repr(v)) for v in values]) if _past_float(values)
                                   else (Float(), [float(v) for v in values]))
            listed = bindparam(None, list(values), type_=ARRAY(element))
            return expr == any_(listed) if op == "in" else expr != all_(listed)
        if kind == "datetime":   # as SQLite keeps them (db.UTCDateTime)
            values = [v.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") for v in values]
        each = func.json_each(bindparam(None, json.dumps(values), type_=Text)).table_valued("value").alias()
        listed = select(each.c.value)
        return expr.in_(listed) if op == "in" else expr.not_in(listed)

    def trait_parts(self, key: str):
        """(text value, of_type) of traits.<key> (read_number reads its number); of_type({json type:
        expression}) is true when the value has one of those types (string, number, array)
        and that type's expression holds; for "boolean" it takes the set of booleans that
        match instead of an expression."""
        if self.pg:
            text = Customer.traits.op("->>", return_type=Text)(key)
            type_of, names = func.json_typeof(Customer.traits.op("->")(key)), {}
        elif _plain_key(key):
            path = _sqlite_path(key)
            text = func.json_extract(Customer.traits, path)
            type_of = func.json_type(Customer.traits, path)
            names = {"string": ("text",), "number": ("integer", "real")}
        else:   # a path finds a key only as stored, escapes and all: json_each's key is decoded
            member = func.json_each(Customer.traits).table_valued("key", "value", "type").alias()
            text = select(member.c.value).where(member.c.key == key).scalar_subquery()
            type_of = select(member.c.type).where(member.c.key == key).scalar_subquery()
            names = {"string": ("text",), "number": ("integer", "real")}

        def of_type(branches: dict):
            branches = dict(branches)
            whens = {name: expr for kind, expr in branches.items() if kind != "boolean"
                     for name in names.get(kind, (kind,))}
            whens.update(self.booleans(text, branches.get("boolean") or set()))
            if not whens:
                return false()
            return case(whens, value=type_of, else_=false())
        return text, of_type

    def booleans(self, text, matching: set) -> dict:
        """The CASE branches that make a boolean trait true when it is one of `matching`:
        PostgreSQL types both as "boolean" (`->>` reads "true" / "false"); SQLite's
        json_type names them "true" and "false"."""
        if not matching:
            return {}
        if self.pg:
            return {"boolean": true() if len(matching) == 2 else text == json.dumps(next(iter(matching)))}
        return {json.dumps(b): true() for b in matching}

    def array_has(self, key: str, value) -> ColumnElement[bool]:
        if self.pg:  # jsonb containment: strings exactly, numbers as numbers, never across types
            return cast(Customer.traits.op("->")(key), JSONB).op("@>", is_comparison=True)(
                cast(literal(json.dumps([value])), JSONB))
        array = (Customer.traits, _sqlite_path(key)) if _plain_key(key) else (self.trait_parts(key)[0],)
        each = func.json_each(*array).table_valued("value", "type").alias()
        wanted = ("text",) if isinstance(value, str) else ("integer", "real")
        return select(1).select_from(each).where(each.c.type.in_(wanted), each.c.value == value).exists()


_PG_TYPES = {"text": Text(), "datetime": DateTime(timezone=True)}
FLOAT_EXACT = 2 ** 53     # whole numbers below this are floats exactly, and so are their neighbours


def _past_float(values) -> bool:
    return any(type(v) is int and abs(v) >= FLOAT_EXACT for v in values)


def _plain_key(key: str) -> bool:
    """A key stored as written in the JSON text (no escape in it), which a SQLite JSON
    path finds: printable ASCII without a quote or a backslash."""
    return key.isascii() and key.isprintable() and '"' not in key and "\\" not in key


def _sqlite_path(key: str) -> str:
    return "$." + '"' + key.replace('"', '\\"') + '"'


def _only_a_string(value: str) -> bool:
    """True when no JSON value but a string reads as this text (`->>` renders numbers,
    booleans, arrays and objects as their JSON text), so equality needs no type test."""
    try:
        json.loads(value)
    except ValueError:
        return True
    return False
