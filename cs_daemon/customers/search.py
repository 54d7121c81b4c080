"""Customers as the console finds them: a text search (id, name, email or company) and
filters by stage, risk level and one segment trait, newest first, a page at a time
(docs/console.md, "Customers"). The filters are a condition tree compiled by the engine
(docs/conditions.md), so "trait plan = pro" means here what it means in a playbook."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, or_
from sqlalchemy.orm import Session

from ..engine import conditions
from ..errors import ValidationFailed
from .models import Customer
from .service import Page, newest_first, page_of

PAGE = 50
MAX_QUERY = 200


def filters(*, stage: str | None = None, risk: str | None = None, trait: str | None = None,
            trait_value: str | None = None) -> dict:
    """The condition tree of the console's filters ({} matches everyone)."""
    nodes = []
    if stage:
        nodes.append({"field": "lifecycle_stage", "op": "eq", "value": stage})
    if risk:
        nodes.append({"field": "risk_level", "op": "eq", "value": risk})
    if trait:
        nodes.append({"field": f"traits.{trait}", "op": "eq", "value": _typed(trait_value)}
                     if trait_value not in (None, "") else {"field": f"traits.{trait}", "op": "exists", "value": True})
    tree = {"all": nodes} if nodes else {}
    try:
        conditions.validate(tree)
    except conditions.ConditionError as exc:
        raise ValidationFailed(f"invalid filter: {exc.message}", [{"field": "trait", "message": exc.message}]) from None
    return tree


def _typed(value: str):
    """A trait value typed in a form: true/false and numbers as such, else text."""
    if value in ("true", "false"):
        return value == "true"
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value else number


def find(session: Session, *, now: datetime, q: str | None = None, tree: dict | None = None,
         test: bool | None = None, cursor: str | None = None, limit: int = PAGE) -> Page:
    q = (q or "").strip()
    if len(q) > MAX_QUERY:
        raise ValidationFailed("the search is too long", [{"field": "q", "message": f"at most {MAX_QUERY} characters"}])
    query = newest_first(limit)
    if tree:
        query = query.where(conditions.to_sql(tree, now=now, dialect=session.get_bind().dialect.name))
    if q:
        like = "%" + q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(or_(Customer.id == q, *(func.lower(column).like(like, escape="\\")
                                                    for column in (Customer.name, Customer.email, Customer.company))))
    if test is not None:
        query = query.where(Customer.test.is_(test))
    return page_of(session, query, limit=limit, cursor=cursor)
