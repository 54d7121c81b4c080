"""The condition language of playbooks (decisions §5): one tree, one validator, two back
ends that must agree on every case.

- `evaluate(tree, facts)` runs in memory on one user (per-event decisions);
- `to_sql(tree, now, dialect)` compiles to a SQLAlchemy expression over the customers
  table (preview counts, sweeps), on SQLite and PostgreSQL alike.

Semantics: `{}` matches every user; empty `all` is true, empty `any` false; a
comparison with a missing value is false (so `neq` and `nin` too: use `exists`);
numbers compare as numbers, also in traits, and a number never equals a string;
`contains` is a case-sensitive substring on strings and membership on arrays.
docs/conditions.md is the reference.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from sqlalchemy import Float, Text, and_, case, cast, false, func, literal, not_, or_, select, true
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql import ColumnElement

from ..customers.models import Customer, Event

COLUMN_FIELDS = {
    "name": "text", "email": "text", "company": "text", "role": "text", "locale": "text",
    "lifecycle_stage": "text", "risk_level": "text", "team_size": "number", "health": "number",
    "activation_score": "number", "engagement_score": "number", "expansion_score": "number",
}
DERIVED_FIELDS = {"days_since_last_activity", "days_since_signup"}
OPS = ("eq", "neq", "lt", "lte", "gt", "gte", "in", "nin", "exists", "contains")
ORDER_OPS = ("lt", "lte", "gt", "gte")
MISSING = object()


class ConditionError(ValueError):
    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


# -- validation --------------------------------------------------------------------------

def validate(tree: Any, path: str = "$") -> None:
    """Refuse a malformed tree, naming the path of the bad node (e.g. `$.all[2].op`)."""
    if not isinstance(tree, dict):
        raise ConditionError(path, "a condition must be an object")
    node = dict(tree)
    if path == "$" and "trigger" in node:
        trigger = node.pop("trigger")
        if not (isinstance(trigger, dict) and set(trigger) == {"event"} and _name(trigger["event"])):
            raise ConditionError("$.trigger", 'must be {"event": "<event name>"}')
    if not node:
        return
    keys = set(node)
    if keys & {"all", "any"}:
        if len(keys) != 1:
            raise ConditionError(path, "all/any stands alone in its object")
        key = keys.pop()
        if not isinstance(node[key], list):
            raise ConditionError(f"{path}.{key}", "must be an array of conditions")
        for i, child in enumerate(node[key]):
            validate(child, f"{path}.{key}[{i}]")
    elif "not" in keys:
        if len(keys) != 1:
            raise ConditionError(path, "not stands alone in its object")
        validate(node["not"], f"{path}.not")
        if not node["not"]:
            raise ConditionError(f"{path}.not", "must not be empty")
    elif "field" in keys:
        _validate_field(node, path)
    elif "event" in keys:
        _validate_event(node, path)
    else:
        raise ConditionError(path, f"unknown condition keys {sorted(keys)}; expected all, any, not, field or event")


def _name(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 255


def _validate_field(node: dict, path: str) -> None:
    extra = set(node) - {"field", "op", "value"}
    if extra:
        raise ConditionError(path, f"unknown keys {sorted(extra)}")
    field = node["field"]
    if not isinstance(field, str) or not (field in COLUMN_FIELDS or field in DERIVED_FIELDS
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
    if op == "exists":
        if not isinstance(value, bool):
            raise ConditionError(f"{path}.value", "exists takes true or false")
    elif op in ("in", "nin"):
        if not isinstance(value, list) or not all(_scalar(v) for v in value):
            raise ConditionError(f"{path}.value", f"{op} takes an array of strings or numbers")
    elif op in ORDER_OPS:
        if not (_number(value) or isinstance(value, str)):
            raise ConditionError(f"{path}.value", f"{op} takes a number or a string")
    elif not _scalar(value):
        raise ConditionError(f"{path}.value", f"{op} takes a string or a number")


def _validate_event(node: dict, path: str) -> None:
    extra = set(node) - {"event", "count", "within_days"}
    if extra:
        raise ConditionError(path, f"unknown keys {sorted(extra)}")
    if not _name(node["event"]):
        raise ConditionError(f"{path}.event", "must be an event name")
    count = node.get("count", {"op": "gte", "value": 1})
    if not isinstance(count, dict) or count.get("op") not in ("eq", "neq", "lt", "lte", "gt", "gte") \
            or not _number(count.get("value")):
        raise ConditionError(f"{path}.count", 'must be {"op": eq|neq|lt|lte|gt|gte, "value": <number>}')
    days = node.get("within_days")
    if days is not None and (not _number(days) or days <= 0):
        raise ConditionError(f"{path}.within_days", "must be a positive number of days")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _scalar(value) -> bool:
    return _number(value) or isinstance(value, str)


def trigger_of(tree: dict | None) -> str | None:
    trigger = (tree or {}).get("trigger")
    return trigger.get("event") if isinstance(trigger, dict) else None


def fields_of(tree: dict | None) -> dict:
    """The tree without its trigger."""
    return {k: v for k, v in (tree or {}).items() if k != "trigger"}


# -- in memory ---------------------------------------------------------------------------

@dataclass
class Facts:
    """What the in-memory back end knows of one user."""

    values: dict[str, Any]                  # customer fields (None when unknown)
    traits: dict[str, Any]
    last_activity_at: datetime | None
    created_at: datetime | None
    now: datetime
    event_count: Callable[[str, float | None], int]   # (name, within_days) -> count


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
        count = node.get("count", {"op": "gte", "value": 1})
        return _compare(count["op"], facts.event_count(node["event"], node.get("within_days")), count["value"])
    return _compare(node["op"], _value(node["field"], facts), node["value"])


def _value(field: str, facts: Facts):
    if field.startswith("traits."):
        return facts.traits.get(field[7:], MISSING) if isinstance(facts.traits, dict) else MISSING
    if field == "days_since_last_activity":
        return _days(facts.now, facts.last_activity_at)
    if field == "days_since_signup":
        return _days(facts.now, facts.created_at)
    value = facts.values.get(field)
    return MISSING if value is None else value


def _days(now: datetime, then: datetime | None):
    return MISSING if then is None else (now - then).total_seconds() / 86400


def _kind(value) -> str | None:
    if _number(value):
        return "number"
    if isinstance(value, str):
        return "text"
    return None


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
    return {"eq": actual == expected, "neq": actual != expected, "lt": actual < expected,
            "lte": actual <= expected, "gt": actual > expected, "gte": actual >= expected}[op]


# -- SQL ---------------------------------------------------------------------------------

def to_sql(tree: dict | None, *, now: datetime, dialect: str) -> ColumnElement[bool]:
    """A boolean expression over `customers` (rows of one tenant are selected by the
    caller's tenant-scoped session)."""
    return _Sql(now, dialect).node(fields_of(tree))


class _Sql:
    def __init__(self, now: datetime, dialect: str):
        self.now = now
        self.pg = dialect == "postgresql"

    def node(self, node: dict) -> ColumnElement[bool]:
        if not node:
            return true()
        if "all" in node:
            return and_(true(), *[self.node(c) for c in node["all"]])
        if "any" in node:
            return or_(false(), *[self.node(c) for c in node["any"]])
        if "not" in node:
            return not_(self.node(node["not"]))
        if "event" in node:
            return self.event(node)
        # two-valued on purpose: a NULL here would make `not` disagree with memory
        return func.coalesce(self.field(node), false())

    # event clauses: a correlated count over the user's events by exact name
    def event(self, node: dict) -> ColumnElement[bool]:
        count = node.get("count", {"op": "gte", "value": 1})
        query = select(func.count()).select_from(Event).where(
            Event.tenant_id == Customer.tenant_id, Event.user_id == Customer.id, Event.event == node["event"])
        if node.get("within_days") is not None:
            query = query.where(Event.timestamp >= self.now - timedelta(days=node["within_days"]))
        return _ordered(count["op"], query.scalar_subquery(), literal(count["value"]))

    def field(self, node: dict) -> ColumnElement[bool]:
        name, op, value = node["field"], node["op"], node["value"]
        if name.startswith("traits."):
            return self.trait(name[7:], op, value)
        if name in DERIVED_FIELDS:
            column = Customer.last_activity_at if name == "days_since_last_activity" else Customer.created_at
            return self.typed(op, value, self.days_since(column), "number", column.isnot(None))
        column = getattr(Customer, name)
        return self.typed(op, value, column, COLUMN_FIELDS[name], column.isnot(None))

    def days_since(self, column):
        if self.pg:
            return func.extract("epoch", literal(self.now) - column) / 86400.0
        now = self.now.replace(tzinfo=None).isoformat(sep=" ")
        return (func.julianday(now) - func.julianday(column)) * 1.0

    def typed(self, op, value, expr, kind, present) -> ColumnElement[bool]:
        """A comparison on a column of a known kind (text or number)."""
        if op == "exists":
            return present if value else not_(present)
        if op == "contains":
            if kind != "text" or not isinstance(value, str):
                return false()
            return and_(present, self.substring(expr, value))
        if op in ("in", "nin"):
            same = [v for v in value if _kind(v) == kind]
            if op == "in":
                return and_(present, expr.in_(same)) if same else false()
            return and_(present, not_(expr.in_(same))) if same else present
        if _kind(value) != kind:
            return false()
        if kind == "text":
            return and_(present, _ordered(op, self.binary(expr), self.binary(literal(value))))
        return and_(present, _ordered(op, expr, literal(value)))

    def binary(self, expr):
        """Order text by code point on both databases, as Python does."""
        return expr.collate("C") if self.pg else expr

    def substring(self, expr, value: str):
        return func.strpos(expr, value) > 0 if self.pg else func.instr(expr, value) > 0

    # traits: JSON values whose type is only known per row
    def trait(self, key: str, op: str, value) -> ColumnElement[bool]:
        kind, text, number = self.trait_parts(key)
        present = kind.isnot(None) & (kind != "null")
        if op == "exists":
            return present if value else not_(present)
        if op == "contains":
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                return false()
            on_text = and_(kind == "string", self.substring(text, value)) if isinstance(value, str) else false()
            return or_(on_text, and_(kind == "array", self.array_has(key, value)))
        if op in ("in", "nin"):
            texts = [v for v in value if isinstance(v, str)]
            numbers = [float(v) for v in value if _number(v)]   # one bind type for every member
            hit = or_(and_(kind == "string", text.in_(texts)) if texts else false(),
                      and_(kind == "number", number.in_(numbers)) if numbers else false())
            return hit if op == "in" else and_(kind.in_(("string", "number")), not_(hit))
        if isinstance(value, str):
            return and_(kind == "string", _ordered(op, self.binary(text), self.binary(literal(value))))
        return and_(kind == "number", _ordered(op, number, literal(float(value))))

    def trait_parts(self, key: str):
        """(json type, text value, numeric value) of traits.<key>, with the type named
        the same on both databases: string, number, boolean, array, object, null."""
        path = "$." + '"' + key.replace('"', '\\"') + '"'
        if self.pg:
            j = Customer.traits.op("->")(key)
            text = Customer.traits.op("->>", return_type=Text)(key)
            return func.json_typeof(j), text, case((func.json_typeof(j) == "number", cast(text, Float)))
        t = func.json_type(Customer.traits, path)
        kind = case((t.in_(("integer", "real")), "number"), (t == "text", "string"),
                    (t.in_(("true", "false")), "boolean"), else_=t)
        return kind, func.json_extract(Customer.traits, path), func.json_extract(Customer.traits, path) * 1.0

    def array_has(self, key: str, value) -> ColumnElement[bool]:
        if self.pg:  # jsonb equality: strings exactly, numbers as numbers, never across types
            elem = func.json_array_elements(Customer.traits.op("->")(key)).table_valued("value").alias()
            wanted = cast(literal(json.dumps(value)), JSONB)
            return select(1).select_from(elem).where(cast(elem.c.value, JSONB) == wanted).exists()
        path = "$." + '"' + key.replace('"', '\\"') + '"'
        each = func.json_each(Customer.traits, path).table_valued("value", "type").alias()
        wanted = ("text",) if isinstance(value, str) else ("integer", "real")
        return select(1).select_from(each).where(each.c.type.in_(wanted), each.c.value == value).exists()


def _ordered(op: str, left, right) -> ColumnElement[bool]:
    return {"eq": left == right, "neq": left != right, "lt": left < right, "lte": left <= right,
            "gt": left > right, "gte": left >= right}[op]
