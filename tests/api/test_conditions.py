"""The condition language: one table of cases run on both back ends (SQL on SQLite and
PostgreSQL, and in memory), and a property test that they agree on random trees."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import delete, select

from cs_daemon.customers.models import Customer, Event
from cs_daemon.engine import conditions as cond
from tests.conftest import auth

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)

USERS = [
    dict(id="ada", name="Ada", email="ada@analytical.io", company="Analytical", locale="de", team_size=12,
         lifecycle_stage="engaged", risk_level="low", health=81.5, activation_score=100, engagement_score=70,
         traits={"plan": "pro", "seats": 5, "tags": ["beta", "vip"], "score": 7.5, "flag": True, "beta": True,
                 "big": 2**63 - 1},
         idle=1, age=200, events={"invited_teammate": [2, 20], "created_project": [1]}),
    dict(id="bob", name=None, email=None, company="Bobcorp", locale="en", team_size=None,
         lifecycle_stage="onboarding", risk_level="medium", health=42, activation_score=50, engagement_score=30,
         traits={"plan": "free", "seats": "5", "tags": ["alpha"], "beta": False, "big": 2**53 + 1},
         idle=5, age=6, events={"created_project": [5], "exported": [14]}),
    dict(id="cy", name="Cy", email="cy@example.com", company=None, locale=None, team_size=3,
         lifecycle_stage="at_risk", risk_level="critical", health=12, activation_score=0, engagement_score=2,
         traits={"matrix": [["beta"], [5]], "beta": 1, "ü": "v", 'a"b': "q", "a\\b": 2, "日本": ["x"]},
         idle=None, age=40, events={}),
    dict(id="dee", name="Dee", email="dee@Analytical.io", company="analytical", locale="de", team_size=5,
         lifecycle_stage="churned", risk_level="critical", health=0, activation_score=100, engagement_score=0,
         traits={"plan": "pro", "seats": 40, "nested": {"a": 1}, "tags": "beta-tester", "beta": "true"},
         idle=45, age=300, events={"invited_teammate": [60], "Invited_Teammate": [44],
                                   "exported": [timedelta(days=14, microseconds=1), 1, 2]}),
]

CASES = [
    ({}, {"ada", "bob", "cy", "dee"}),
    ({"all": []}, {"ada", "bob", "cy", "dee"}),
    ({"any": []}, set()),
    ({"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "engaged"]}, {"ada", "bob"}),
    ({"field": "lifecycle_stage", "op": "nin", "value": ["onboarding", "engaged"]}, {"cy", "dee"}),
    ({"field": "engagement_score", "op": "lt", "value": 40}, {"bob", "cy", "dee"}),
    ({"field": "health", "op": "gte", "value": 42}, {"ada", "bob"}),
    ({"field": "name", "op": "neq", "value": "Ada"}, {"cy", "dee"}),          # bob has no name: false
    ({"field": "name", "op": "exists", "value": False}, {"bob"}),
    ({"field": "email", "op": "contains", "value": "Analytical"}, {"dee"}),  # case-sensitive
    ({"field": "company", "op": "eq", "value": "analytical"}, {"dee"}),
    ({"field": "team_size", "op": "gt", "value": 4}, {"ada", "dee"}),
    ({"field": "team_size", "op": "eq", "value": "12"}, set()),              # a number is not a string
    ({"field": "locale", "op": "lt", "value": "e"}, {"ada", "dee"}),
    ({"field": "traits.plan", "op": "eq", "value": "pro"}, {"ada", "dee"}),
    ({"field": "traits.plan", "op": "neq", "value": "pro"}, {"bob"}),        # cy has no plan: false
    ({"field": "traits.seats", "op": "gte", "value": 5}, {"ada", "dee"}),    # "5" is text: no match
    ({"field": "traits.seats", "op": "lt", "value": 10}, {"ada"}),           # numbers, not text order
    ({"field": "traits.seats", "op": "eq", "value": "5"}, {"bob"}),
    ({"field": "traits.seats", "op": "in", "value": [5, "5"]}, {"ada", "bob"}),
    ({"field": "traits.seats", "op": "nin", "value": [5]}, {"bob", "dee"}),
    ({"field": "traits.seats", "op": "neq", "value": 5}, {"bob", "dee"}),     # the text "5" differs
    ({"field": "traits.big", "op": "gt", "value": 2**63 - 2}, {"ada"}),       # whole numbers exactly, not as floats
    ({"field": "traits.big", "op": "eq", "value": 2**53}, set()),
    ({"field": "traits.big", "op": "in", "value": [2**53 + 1, 0.5]}, {"bob"}),
    ({"field": "traits.big", "op": "lt", "value": 1e30}, {"ada", "bob"}),
    ({"field": "team_size", "op": "neq", "value": "12"}, {"ada", "cy", "dee"}),    # bob has none: false
    ({"field": "traits.ü", "op": "eq", "value": "v"}, {"cy"}),     # keys a SQLite path finds only escaped
    ({"field": 'traits.a"b', "op": "exists", "value": True}, {"cy"}),
    ({"field": "traits.a\\b", "op": "in", "value": [1, 2]}, {"cy"}),
    ({"field": "traits.日本", "op": "contains", "value": "x"}, {"cy"}),
    ({"field": "traits.ü", "op": "neq", "value": "w"}, {"cy"}),
    ({"field": "traits.日本", "op": "neq", "value": "x"}, set()),   # an array is of no comparable kind
    ({"field": "traits.tags", "op": "contains", "value": "beta"}, {"ada", "dee"}),  # array member, substring
    ({"field": "traits.tags", "op": "contains", "value": "bet"}, {"dee"}),
    ({"field": "traits.score", "op": "gt", "value": 7}, {"ada"}),
    ({"field": "traits.score", "op": "in", "value": [0, 7.5]}, {"ada"}),      # ints and floats in one list
    ({"field": "traits.flag", "op": "exists", "value": True}, {"ada"}),
    ({"field": "traits.flag", "op": "eq", "value": 1}, set()),               # a boolean is not a number
    ({"field": "traits.nested", "op": "exists", "value": True}, {"dee"}),
    ({"field": "traits.nested", "op": "eq", "value": "x"}, set()),
    ({"field": "traits.missing", "op": "exists", "value": False}, {"ada", "bob", "cy", "dee"}),
    ({"field": "days_since_last_activity", "op": "gte", "value": 3}, {"bob", "dee"}),
    ({"field": "days_since_last_activity", "op": "exists", "value": False}, {"cy"}),
    ({"field": "days_since_signup", "op": "lt", "value": 30}, {"bob"}),
    ({"event": "invited_teammate"}, {"ada", "dee"}),
    ({"event": "invited_teammate", "within_days": 14}, {"ada"}),
    ({"event": "invited_teammate", "count": {"op": "eq", "value": 0}, "within_days": 14}, {"bob", "cy", "dee"}),
    ({"event": "invited_teammate", "count": {"op": "gte", "value": 2}}, {"ada"}),
    ({"event": "Invited_Teammate"}, {"dee"}),                                 # names are exact
    ({"not": {"field": "risk_level", "op": "eq", "value": "critical"}}, {"ada", "bob"}),
    ({"not": {"field": "traits.plan", "op": "eq", "value": "pro"}}, {"bob", "cy"}),  # missing is not NULL
    ({"not": {"field": "name", "op": "eq", "value": "Ada"}}, {"bob", "cy", "dee"}),
    ({"any": [{"field": "locale", "op": "eq", "value": "de"}, {"field": "team_size", "op": "gte", "value": 3}]},
     {"ada", "cy", "dee"}),
    ({"trigger": {"event": "signed_up"}, "all": [{"field": "traits.plan", "op": "eq", "value": "pro"}]},
     {"ada", "dee"}),
    ({"all": [
        {"field": "lifecycle_stage", "op": "in", "value": ["onboarding", "activated", "engaged"]},
        {"field": "engagement_score", "op": "lt", "value": 80},
        {"event": "invited_teammate", "count": {"op": "eq", "value": 0}, "within_days": 14},
        {"not": {"field": "risk_level", "op": "eq", "value": "critical"}},
        {"any": [{"field": "locale", "op": "eq", "value": "en"}, {"field": "team_size", "op": "gte", "value": 5}]},
    ]}, {"bob"}),
    # event clauses compile to EXISTS / NOT EXISTS (grouped when a count above one matters)
    ({"event": "exported", "within_days": 14}, {"bob", "dee"}),               # at the cut-off: counted
    ({"event": "exported", "count": {"op": "gte", "value": 3}, "within_days": 14}, set()),
    ({"event": "exported", "count": {"op": "gte", "value": 3}}, {"dee"}),
    ({"event": "exported", "count": {"op": "eq", "value": 2}, "within_days": 14}, {"dee"}),
    ({"event": "exported", "count": {"op": "lt", "value": 2}, "within_days": 14}, {"ada", "bob", "cy"}),
    ({"event": "exported", "count": {"op": "lte", "value": 0}}, {"ada", "cy"}),   # cy has no events at all
    ({"event": "exported", "count": {"op": "neq", "value": 1}}, {"ada", "cy", "dee"}),
    ({"event": "exported", "count": {"op": "neq", "value": 0}}, {"bob", "dee"}),
    ({"event": "exported", "count": {"op": "gt", "value": 0.5}}, {"bob", "dee"}),
    ({"event": "exported", "count": {"op": "gte", "value": 0}}, {"ada", "bob", "cy", "dee"}),
    ({"event": "exported", "count": {"op": "lt", "value": 0}}, set()),
    ({"event": "exported", "count": {"op": "eq", "value": 1.5}}, set()),
    ({"event": "exported", "count": {"op": "neq", "value": 1.5}}, {"ada", "bob", "cy", "dee"}),
    ({"event": "exported", "count": {"op": "lte", "value": 1.5}}, {"ada", "bob", "cy"}),
    ({"not": {"event": "exported", "within_days": 14}}, {"ada", "cy"}),
    ({"any": [{"field": "risk_level", "op": "eq", "value": "critical"},
              {"not": {"event": "created_project"}}]}, {"cy", "dee"}),
    ({"any": [{"field": "risk_level", "op": "eq", "value": "low"},
              {"event": "exported", "count": {"op": "gte", "value": 2}}]}, {"ada", "dee"}),
    # days since: elapsed time against that many days, exact at the boundary
    ({"field": "days_since_last_activity", "op": "gte", "value": 5}, {"bob", "dee"}),
    ({"field": "days_since_last_activity", "op": "gt", "value": 5}, {"dee"}),
    ({"field": "days_since_last_activity", "op": "eq", "value": 5}, {"bob"}),
    ({"field": "days_since_last_activity", "op": "in", "value": [5, 45, "5"]}, {"bob", "dee"}),
    ({"field": "days_since_last_activity", "op": "nin", "value": [5]}, {"ada", "dee"}),
    ({"not": {"field": "days_since_last_activity", "op": "lt", "value": 3}}, {"bob", "cy", "dee"}),
    ({"field": "days_since_last_activity", "op": "lt", "value": 1e12}, {"ada", "bob", "dee"}),
    ({"field": "days_since_signup", "op": "lt", "value": 1e6}, {"ada", "bob", "cy", "dee"}),
    ({"field": "days_since_signup", "op": "gte", "value": 1e12}, set()),
    ({"field": "days_since_signup", "op": "gt", "value": -1e12}, {"ada", "bob", "cy", "dee"}),
    ({"field": "days_since_signup", "op": "lte", "value": -5e6}, set()),
    # plain comparisons, and their negation where the value is missing
    ({"field": "team_size", "op": "in", "value": [12.5, 3]}, {"cy"}),            # 12.5 is not 12
    ({"not": {"field": "locale", "op": "nin", "value": ["de"]}}, {"ada", "cy", "dee"}),
    ({"not": {"field": "traits.plan", "op": "in", "value": ["pro"]}}, {"bob", "cy"}),
    ({"field": "traits.seats", "op": "in", "value": ["5"]}, {"bob"}),
    ({"field": "traits.flag", "op": "eq", "value": "true"}, set()),                 # a boolean is not text
    ({"field": "traits.nested", "op": "eq", "value": '{"a": 1}'}, set()),          # an object is not text
    ({"field": "traits.matrix", "op": "contains", "value": "beta"}, set()),         # members, not nested
    ({"field": "traits.matrix", "op": "contains", "value": 5}, set()),
    ({"field": "traits.tags", "op": "in", "value": []}, set()),
    ({"field": "traits.tags", "op": "nin", "value": []}, {"dee"}),
    # booleans are values of their own kind: true is neither 1 nor "true"
    ({"field": "traits.beta", "op": "eq", "value": True}, {"ada"}),
    ({"field": "traits.beta", "op": "eq", "value": False}, {"bob"}),
    ({"field": "traits.beta", "op": "neq", "value": False}, {"ada", "cy", "dee"}),   # 1 and "true" differ
    ({"field": "traits.beta", "op": "neq", "value": True}, {"bob", "cy", "dee"}),
    ({"field": "traits.beta", "op": "in", "value": [True]}, {"ada"}),
    ({"field": "traits.beta", "op": "in", "value": [True, False]}, {"ada", "bob"}),
    ({"field": "traits.beta", "op": "in", "value": [1]}, {"cy"}),
    ({"field": "traits.beta", "op": "in", "value": [True, "true"]}, {"ada", "dee"}),
    ({"field": "traits.beta", "op": "nin", "value": [False]}, {"ada", "cy", "dee"}),
    ({"field": "traits.beta", "op": "nin", "value": [True, 1, "true"]}, {"bob"}),
    ({"field": "traits.beta", "op": "eq", "value": "true"}, {"dee"}),
    ({"field": "traits.beta", "op": "eq", "value": 1}, {"cy"}),
    ({"not": {"field": "traits.beta", "op": "eq", "value": True}}, {"bob", "cy", "dee"}),
    ({"not": {"field": "traits.beta", "op": "nin", "value": [True, False]}}, {"ada", "bob"}),
    ({"field": "traits.flag", "op": "neq", "value": False}, {"ada"}),
    ({"field": "traits.missing", "op": "neq", "value": False}, set()),
    ({"field": "team_size", "op": "eq", "value": True}, set()),
    ({"field": "team_size", "op": "nin", "value": [True]}, {"ada", "cy", "dee"}),
    ({"field": "name", "op": "in", "value": [True, "Cy"]}, {"cy"}),
    ({"field": "days_since_signup", "op": "neq", "value": False}, {"ada", "bob", "cy", "dee"}),   # as nin [False]
]


def _seed(session, tenant_id, users):
    session.execute(delete(Event))
    session.execute(delete(Customer))
    for u in users:
        session.add(Customer(
            tenant_id=tenant_id, id=u["id"], name=u["name"], email=u["email"], company=u["company"],
            locale=u["locale"], team_size=u["team_size"], lifecycle_stage=u["lifecycle_stage"],
            risk_level=u["risk_level"], health=u["health"], activation_score=u["activation_score"],
            engagement_score=u["engagement_score"], expansion_score=0, traits=u["traits"], state={},
            last_activity_at=None if u["idle"] is None else NOW - timedelta(days=u["idle"]),
            created_at=NOW - timedelta(days=u["age"]), updated_at=NOW))
        for name, ages in u["events"].items():
            for age in ages:
                age = age if isinstance(age, timedelta) else timedelta(days=age)
                session.add(Event(tenant_id=tenant_id, user_id=u["id"], event=name, properties={},
                                  timestamp=NOW - age, received_at=NOW))
    session.flush()


def _in_sql(session, tree) -> set[str]:
    expr = cond.to_sql(tree, now=NOW, dialect=session.get_bind().dialect.name)
    return set(session.scalars(select(Customer.id).where(expr)))


def _in_memory(session, tree) -> tuple[set[str], set[str]]:
    """The users the tree matches in memory: walked (evaluate), and compiled alone
    (compile_tree) and among others (compile_many, which must say the same)."""
    events = list(session.scalars(select(Event)))
    test = cond.compile_tree(tree)
    many = cond.compile_many([{"any": []}, tree, {"not": tree} if cond.fields_of(tree) else {"any": []}, tree])
    walked, compiled = set(), set()
    for c in session.scalars(select(Customer)):
        def count(name, within, user=c.id):
            since = None if within is None else NOW - timedelta(days=within)
            return sum(1 for e in events if e.user_id == user and e.event == name
                       and (since is None or e.timestamp >= since))

        facts = cond.Facts(values={f: getattr(c, f) for f in cond.COLUMN_FIELDS}, traits=c.traits,
                           last_activity_at=c.last_activity_at, created_at=c.created_at, now=NOW,
                           event_count=count)
        if cond.evaluate(tree, facts):
            walked.add(c.id)
        if test(facts):
            compiled.add(c.id)
        assert many(facts) == ([1, 3] if test(facts) else [2] if cond.fields_of(tree) else []), (c.id, tree)
    return walked, compiled


@pytest.fixture
def seeded(rt, tenant):
    with rt.session(tenant.id) as s:
        _seed(s, tenant.id, USERS)
    return tenant


@pytest.mark.parametrize("tree, expected", CASES, ids=[str(i) for i in range(len(CASES))])
def test_both_back_ends_pass_the_shared_cases(rt, seeded, tree, expected):
    cond.validate(tree)
    with rt.session(seeded.id) as s:
        assert _in_sql(s, tree) == expected
        assert _in_memory(s, tree) == (expected, expected)


@pytest.mark.parametrize("tree, path", [
    ([], "$"),
    ({"all": {}}, "$.all"),
    ({"all": [{"field": "health", "op": "gt", "value": 1}, {"field": "nope", "op": "eq", "value": 1}]}, "$.all[1].field"),
    ({"any": [{"field": "health", "op": "between", "value": 1}]}, "$.any[0].op"),
    ({"not": {"field": "health", "op": "in", "value": 3}}, "$.not.value"),
    ({"field": "health", "op": "exists", "value": "yes"}, "$.value"),
    ({"field": "health", "op": "eq"}, "$.value"),
    ({"event": "", "count": {"op": "eq", "value": 0}}, "$.event"),
    ({"event": "x", "count": {"op": "in", "value": 0}}, "$.count"),
    ({"event": "x", "within_days": -1}, "$.within_days"),
    ({"event": "x", "within_days": 1e6}, "$.within_days"),
    ({"all": [{"any": [{"event": "x", "within_days": 3650.5}]}]}, "$.all[0].any[0].within_days"),
    ({"field": "traits.beta", "op": "lt", "value": True}, "$.value"),
    ({"field": "traits.beta", "op": "contains", "value": True}, "$.value"),
    ({"field": "traits.beta", "op": "in", "value": [None]}, "$.value"),
    ({"field": "traits.plan", "op": "in", "value": ["x"] * 1001}, "$.value"),
    ({"field": "traits." + "x" * 300, "op": "eq", "value": 1}, "$.field"),
    ({"field": "health", "op": "gt", "value": 10**30}, "$.value"),          # past 64 bits: SQLite binds none
    ({"field": "traits.seats", "op": "in", "value": [1, -(2**63)]}, "$.value"),
    ({"event": "x", "count": {"op": "gt", "value": 2**63}}, "$.count.value"),
    ({"trigger": "signed_up"}, "$.trigger"),
    ({"all": [], "any": []}, "$"),
    ({"weird": 1}, "$"),
])
def test_validator_names_the_bad_node(tree, path):
    with pytest.raises(cond.ConditionError) as err:
        cond.validate(tree)
    assert err.value.path == path


def _nested(depth: int) -> dict:
    tree = {"field": "health", "op": "gt", "value": 1}
    for _ in range(depth - 1):
        tree = {"not": tree}
    return tree


def test_trees_nest_at_most_ten_levels():
    cond.validate(_nested(10))
    with pytest.raises(cond.ConditionError) as err:
        cond.validate(_nested(11))
    assert err.value.path == "$" + ".not" * 10 and "10 levels" in err.value.message
    deep_any = {"all": [{"any": [_nested(8)]}]}
    cond.validate(deep_any)
    with pytest.raises(cond.ConditionError) as err:
        cond.validate({"all": [{"any": [_nested(9)]}]})
    assert err.value.path == "$.all[0].any[0]" + ".not" * 8


def test_trees_hold_at_most_two_hundred_conditions():
    leaf = {"field": "health", "op": "gt", "value": 1}
    cond.validate({"all": [leaf] * 199})                     # 199 leaves and the all: 200
    with pytest.raises(cond.ConditionError) as err:
        cond.validate({"all": [leaf] * 200})
    assert err.value.path == "$.all[199]" and "200 conditions" in err.value.message
    with pytest.raises(cond.ConditionError) as err:          # empty nodes count as well
        cond.validate({"any": [{"all": []}] * 250})
    assert err.value.path == "$.any[199]"


# -- property: random trees × random users agree on both databases ------------------------

names = st.sampled_from(["a", "b", "c"])
texts = st.sampled_from(["x", "y", "Xy", "xyz", ""])
numbers = st.integers(-3, 50) | st.sampled_from([0.5, 12.25])
scalars = texts | numbers
trait_values = st.none() | scalars | st.booleans() | st.lists(scalars, max_size=3)

users = st.lists(st.fixed_dictionaries({
    "name": st.none() | texts, "locale": st.none() | texts, "team_size": st.none() | st.integers(0, 20),
    "health": st.integers(0, 100), "lifecycle_stage": st.sampled_from(["new", "engaged", "churned"]),
    "risk_level": st.sampled_from(["low", "high"]),
    "traits": st.dictionaries(names, trait_values, max_size=3),
    "idle": st.none() | st.integers(0, 40), "idle_part": st.sampled_from([0, 0.25]), "age": st.integers(41, 60),
    "events": st.dictionaries(names, st.lists(st.integers(0, 30), max_size=3), max_size=2),
}), min_size=1, max_size=6)

leaf_field = st.sampled_from(["name", "locale", "team_size", "health", "lifecycle_stage", "risk_level",
                              "days_since_last_activity", "days_since_signup", "traits.a", "traits.b"])


@st.composite
def leaves(draw):
    if draw(st.booleans()):
        op = draw(st.sampled_from(["eq", "neq", "lt", "lte", "gt", "gte"]))
        # whole-day windows put events exactly at the cut-off
        window = st.integers(1, 30) | st.integers(1, 30).map(lambda d: d + 0.5)
        return {"event": draw(names), "count": {"op": op, "value": draw(st.integers(0, 3) | st.just(1.5))},
                **({"within_days": draw(window)} if draw(st.booleans()) else {})}
    op = draw(st.sampled_from(cond.OPS))
    if op == "exists":
        value = draw(st.booleans())
    elif op in ("in", "nin"):
        value = draw(st.lists(scalars | st.booleans(), max_size=3))
    elif op in ("eq", "neq"):
        value = draw(scalars | st.booleans())
    else:
        value = draw(scalars)
    return {"field": draw(leaf_field), "op": op, "value": value}


trees = st.recursive(leaves(), lambda kids: st.one_of(
    st.builds(lambda c: {"all": c}, st.lists(kids, max_size=3)),
    st.builds(lambda c: {"any": c}, st.lists(kids, max_size=3)),
    st.builds(lambda c: {"not": c}, kids)), max_leaves=6)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(population=users, tree=trees)
def test_sql_and_memory_agree_on_random_trees_and_users(rt, tenant, population, tree):
    cond.validate(tree)
    people = [dict(u, id=f"u{i}", email=None, company=None, activation_score=0, engagement_score=0,
                   idle=None if u["idle"] is None else u["idle"] + u["idle_part"])
              for i, u in enumerate(population)]
    with rt.session(tenant.id, commit=False) as s:
        _seed(s, tenant.id, people)
        walked, compiled = _in_memory(s, tree)
        assert _in_sql(s, tree) == walked == compiled


@pytest.mark.parametrize("value, status", [(2**63 - 1, 200), (-(2**63 - 1), 200), (1e30, 200), (2**63, 400),
                                           (-(10**30), 400)])
def test_a_whole_number_past_64_bits_is_refused_not_a_500(client, tenant, value, status):
    """The largest whole number SQLite binds counts on both databases; one past it is a 400
    naming the node (a 500 before: SQLite could not bind it), and 1e30 is the way to write it."""
    h = auth(tenant.key)
    for tree in ({"field": "health", "op": "lt", "value": value},
                 {"field": "traits.seats", "op": "in", "value": [value]},
                 {"event": "login", "count": {"op": "lt", "value": value}}):
        resp = client.post("/api/playbooks/preview-count", headers=h, json={"entry_conditions": tree})
        assert resp.status_code == status, (tree, resp.json)
        if status == 400:
            assert resp.json["code"] == "validation_failed" and "9,223,372,036,854,775,807" in resp.json["error"]


def test_a_tree_at_the_limits_counts_and_sweeps_without_passing_the_databases_bound_on_parameters(
        client, rt, tenant, clock):
    """Lists of values bound a parameter a value: 199 lists of 1,000 (the limits allow
    them) passed SQLite's bound on a statement's parameters (too many SQL variables), so
    preview-count answered 503 and the tenant's decision sweep failed at every run."""
    from cs_daemon.decisions.requests import sweep_candidates

    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"x0": 500, "team_size": 5000}},
        {"user_id": "u2", "event": "$identify", "properties": {"x0": 7}}]})
    kept = {"field": "traits.x0", "op": "nin", "value": list(range(100))}
    found = {"field": "traits.x0", "op": "in", "value": list(range(100, 1000))}
    teams = {"field": "team_size", "op": "nin", "value": list(range(1000))}
    for tree in ({"all": [kept] * 10 + [found] * 189}, {"all": [teams] * 199}):
        resp = client.post("/api/playbooks/preview-count", headers=h, json={"entry_conditions": tree})
        assert resp.status_code == 200 and resp.json["matching_users"] == 1, resp.json
    pid = client.post("/api/playbooks", headers=h, json={"name": "big", "entry_conditions": {
        "all": [teams] * 199}}).json["id"]
    assert client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"}).status_code == 200
    with rt.session(tenant.id) as s:
        assert sweep_candidates(s, clock.now()) == ["u1"]
