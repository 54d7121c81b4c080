"""Condition trees compile to PostgreSQL SQL with every node typed as SQLAlchemy expects
(an untyped operator once made `not` negate a JSONB value, which SQLAlchemy 2.1
deprecates and a later release refuses)."""

from __future__ import annotations

import itertools
import warnings
from datetime import datetime, timezone

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from cs_daemon.engine import conditions

VALUES = ["pro", 3, 2.5, True, ["a", 1], ["a"], [2]]


def _trees():
    for op, value in itertools.product(conditions.OPS, VALUES):
        leaf = {"field": "traits.plan", "op": op, "value": value}
        try:
            conditions.validate({"all": [leaf]})
        except conditions.ConditionError:
            continue
        yield leaf
        yield {"not": leaf}
        yield {"not": {"any": [leaf, {"field": "days_since_signup", "op": "lt", "value": 40}]}}


@pytest.mark.parametrize("dialect", [postgresql.dialect(), sqlite.dialect()], ids=["postgresql", "sqlite"])
def test_every_trait_operator_compiles_under_not_without_a_typing_warning(dialect):
    now = datetime(2026, 11, 2, tzinfo=timezone.utc)
    trees = list(_trees())
    assert len(trees) > 30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for tree in trees:
            criterion = conditions.to_sql(tree, now=now, dialect=dialect.name)
            str(criterion.compile(dialect=dialect))
