"""Uplift per playbook (docs/decisions.md, "Holdout and uplift"): treated minus held-out
positive rate with Newcombe's hybrid score interval, in GET /api/playbooks, in
GET /api/analytics as roi.uplift, and in `cs analytics uplift`, checked against a hand
computation and the published figures of Newcombe (1998), example (a)."""

from __future__ import annotations

from datetime import timedelta
from math import sqrt

import pytest

from cs_daemon.interventions.models import Intervention
from tests.conftest import auth
from tests.support.sql import Statements

Z = 1.959964


def _by_hand(x1, n1, x0, n0):
    """Newcombe's method 10, written out: Wilson bounds of each rate, then the hybrid."""
    def wilson(x, n):
        p = x / n
        mid, half = (2 * x + Z ** 2) / (2 * (n + Z ** 2)), Z * sqrt(Z ** 2 + 4 * n * p * (1 - p)) / (2 * (n + Z ** 2))
        return mid - half, mid + half

    (l1, u1), (l0, u0) = wilson(x1, n1), wilson(x0, n0)
    p1, p0 = x1 / n1, x0 / n0
    return p1 - p0, p1 - p0 - sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2), p1 - p0 + sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)


def _playbook(client, tenant, name):
    resp = client.post("/api/playbooks", headers=auth(tenant.key), json={"name": name})
    assert resp.status_code == 201, resp.json
    return resp.json["id"]


def _add(rt, tenant, pid, status, outcomes: dict, *, test=False, days_ago=1):
    """Interventions of a playbook: `outcomes` maps an outcome (or None) to a count."""
    at = rt.now() - timedelta(days=days_ago)
    with rt.session(tenant.id) as s:
        for outcome, count in outcomes.items():
            for n in range(count):
                s.add(Intervention(tenant_id=tenant.id, user_id=f"{status}-{outcome}-{n}", playbook_id=pid,
                                   status=status, channel="email", source="engine", outcome=outcome, test=test,
                                   planned_at=at, updated_at=at))


@pytest.fixture
def data(client, make_tenant, rt):
    """A tenant with Proven: 56/70 treated vs 48/80 held out (Newcombe's example a), with
    rows that must not count; Unproven: 56/70 vs 54/80; Untested: no held-out arm; Old:
    outside 30 days."""
    tenant = make_tenant("Measured", plan_tier="growth")
    ids = {name: _playbook(client, tenant, name) for name in ("Proven", "Unproven", "Untested", "Old")}
    _add(rt, tenant, ids["Proven"], "delivered", {"positive": 56, "neutral": 10, "negative": 4})
    _add(rt, tenant, ids["Proven"], "held_out", {"positive": 48, "neutral": 30, "negative": 2})
    _add(rt, tenant, ids["Proven"], "delivered", {"positive": 9, None: 3}, test=True)     # test data
    _add(rt, tenant, ids["Proven"], "held_out", {None: 5})                                 # not settled
    _add(rt, tenant, ids["Proven"], "delivered", {None: 4})                                # not settled
    _add(rt, tenant, ids["Proven"], "rolled_back", {"positive": 3})                        # not delivered now
    _add(rt, tenant, ids["Proven"], "planned", {None: 2})
    _add(rt, tenant, ids["Unproven"], "delivered", {"positive": 56, "neutral": 14})
    _add(rt, tenant, ids["Unproven"], "held_out", {"positive": 54, "neutral": 26})
    _add(rt, tenant, ids["Untested"], "delivered", {"positive": 3, "negative": 1})
    _add(rt, tenant, ids["Old"], "delivered", {"positive": 9, "neutral": 1}, days_ago=40)
    _add(rt, tenant, ids["Old"], "held_out", {"positive": 3, "neutral": 7}, days_ago=40)
    tenant.ids = ids
    return tenant


def _items(client, data):
    return {p["name"]: p for p in client.get("/api/playbooks", headers=auth(data.key)).json["playbooks"]}


def test_uplift_and_its_interval_match_the_hand_computation(client, data):
    proven = _items(client, data)["Proven"]
    d, low, high = _by_hand(56, 70, 48, 80)
    assert (round(d, 4), round(low, 4), round(high, 4)) == (0.2, 0.0524, 0.3339)   # Newcombe 1998, Table II
    assert proven["uplift"] == round(d, 4) and proven["uplift_ci"] == [round(low, 4), round(high, 4)]
    assert proven["treated"] == {"n": 70, "positive": 56} and proven["held_out"] == {"n": 80, "positive": 48}
    assert proven["uplift_significant"] is True
    assert proven["success_rate"] == round((56 + 3) / (70 + 3), 4)   # with the rolled back; no held-out one


def test_an_interval_that_reaches_zero_is_not_significant_and_an_empty_arm_gives_null(client, data):
    items = _items(client, data)
    d, low, high = _by_hand(56, 70, 54, 80)
    assert low < 0 < high
    assert items["Unproven"]["uplift_ci"] == [round(low, 4), round(high, 4)]
    assert items["Unproven"]["uplift"] == round(d, 4) and items["Unproven"]["uplift_significant"] is False
    untested = items["Untested"]
    assert (untested["uplift"], untested["uplift_ci"], untested["uplift_significant"]) == (None, None, False)
    assert untested["treated"] == {"n": 4, "positive": 3} and untested["held_out"] == {"n": 0, "positive": 0}
    assert items["Old"]["treated"] == {"n": 10, "positive": 9}       # all time here


def test_analytics_shows_the_uplift_of_its_range(client, data):
    roi = client.get("/api/analytics?range=30d", headers=auth(data.key)).json["roi"]
    names = [u["name"] for u in roi["uplift"]]
    assert names == ["Proven", "Unproven", "Untested"]             # Old is outside the range
    proven = roi["uplift"][0]
    assert proven["playbook_id"] == data.ids["Proven"] and proven["uplift_ci"] == [0.0524, 0.3339]
    assert proven["treated"] == {"n": 70, "positive": 56} and proven["uplift_significant"] is True
    wide = client.get("/api/analytics?range=90d", headers=auth(data.key)).json["roi"]["uplift"]
    old = [u for u in wide if u["name"] == "Old"][0]
    d, low, high = _by_hand(9, 10, 3, 10)
    assert old["uplift"] == round(d, 4) and old["uplift_ci"] == [round(low, 4), round(high, 4)]


def test_held_out_decisions_are_not_counted_as_interventions_in_analytics(client, data):
    kpis = client.get("/api/analytics?range=30d", headers=auth(data.key)).json["kpis"]
    assert kpis["total_interventions"] == 70 + 4 + 3 + 2 + 70 + 4


def test_every_playbooks_uplift_comes_from_one_grouped_query(rt, data):
    from cs_daemon.analytics import uplift

    with rt.session(data.id) as s, Statements(rt.settings) as watched:
        found = uplift.by_playbook(s)
    statements = watched.seen
    assert set(found) == set(data.ids.values())
    assert len([q for q in statements if "interventions" in q]) == 1, statements
