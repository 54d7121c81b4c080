"""GET /api/analytics on a seeded tenant, against figures computed in the test."""

from __future__ import annotations

import random
from datetime import timedelta

from cs_daemon.customers.models import Customer
from cs_daemon.interventions.models import Intervention
from cs_daemon.playbooks.models import Playbook
from tests.conftest import auth

STAGES = ["new", "onboarding", "activated", "engaged", "at_risk", "dormant", "churned"]
RISKS = ["low", "medium", "high", "critical"]
STATUSES = ["planned", "approved", "delivered", "failed", "delivered", "shadow"]
OUTCOMES = [None, "positive", "negative", "neutral", "pending"]


def _seed(rt, tenant_id, now, rng):
    users, interventions = [], []
    with rt.session(tenant_id) as s:
        areas = {}
        for name, area in (("p1", "onboarding"), ("p2", "retention"), ("p3", None)):
            pb = Playbook(name=name, lifecycle_area=area, created_at=now, updated_at=now)
            s.add(pb)
            s.flush()
            areas[pb.id] = (name, area)
        for i in range(60):
            u = dict(id=f"u{i}", stage=rng.choice(STAGES), risk=rng.choice(RISKS), test=i % 10 == 0,
                     last=None if i % 7 == 0 else now - timedelta(days=rng.randint(0, 120)))
            users.append(u)
            s.add(Customer(id=u["id"], lifecycle_stage=u["stage"], risk_level=u["risk"], test=u["test"],
                           last_activity_at=u["last"], traits={}, state={}, opted_out=[], created_at=now, updated_at=now))
        for j in range(150):
            pid = rng.choice(list(areas))
            planned = now - timedelta(days=rng.randint(0, 100), hours=rng.randint(0, 23))
            status, outcome = rng.choice(STATUSES), rng.choice(OUTCOMES)
            delivered = planned + timedelta(hours=2) if status == "delivered" else None
            outcome_at = delivered + timedelta(days=rng.randint(0, 6)) if delivered and outcome in (
                "positive", "negative", "neutral") else None
            iv = dict(user=f"u{rng.randint(0, 59)}", pid=pid, status=status, outcome=outcome, planned=planned,
                      channel=rng.choice(["email", "in_app", "webhook", "escalate"]), test=j % 13 == 0,
                      delivered=delivered, outcome_at=outcome_at, area=areas[pid][1], name=areas[pid][0])
            interventions.append(iv)
            s.add(Intervention(user_id=iv["user"], playbook_id=pid, status=status, channel=iv["channel"],
                               outcome=outcome, test=iv["test"], planned_at=planned, delivered_at=delivered,
                               outcome_at=outcome_at, updated_at=now))
    return users, interventions


def test_analytics_match_independent_figures(client, tenant, rt, clock):
    now = clock.now()
    users, ivs = _seed(rt, tenant.id, now, random.Random(7))
    for range_, days in (("7d", 7), ("30d", 30), ("90d", 90)):
        resp = client.get(f"/api/analytics?range={range_}", headers=auth(tenant.key))
        assert resp.status_code == 200
        body = resp.json
        since = now - timedelta(days=days)
        live = [u for u in users if not u["test"]]
        counted = [i for i in ivs if not i["test"] and i["planned"] >= since and i["status"] != "shadow"
                   and i["channel"] != "escalate"]
        decided = [i for i in counted if i["outcome"] in ("positive", "negative", "neutral")]
        positive = [i for i in counted if i["outcome"] == "positive"]
        delivered = sum(i["status"] == "delivered" for i in counted)
        failed = sum(i["status"] == "failed" for i in counted)
        k = body["kpis"]
        assert body["range"] == range_
        assert k["total_users"] == len(live)
        assert k["total_interventions"] == len(counted)
        assert k["positive_outcome_rate"] == round(len(positive) / len(decided), 4)
        assert k["churn_rate"] == round(sum(u["stage"] == "churned" for u in live) / len(live), 4)
        assert k["retention_rate"] == round(sum(u["last"] is not None and u["last"] >= since for u in live) / len(live), 4)
        r = body["roi"]
        assert r["recovered_users"] == len({i["user"] for i in positive})
        assert r["intervention_success_rate"] == (round(delivered / (delivered + failed), 4) if delivered + failed else 0)
        timed = [i for i in decided if i["delivered"] and i["outcome_at"]]
        expected_avg = round(sum((i["outcome_at"] - i["delivered"]).total_seconds() for i in timed) / len(timed) / 86400, 2) \
            if timed else None
        assert r["avg_time_to_outcome_days"] == expected_avg
        stages = {d["stage"]: d["count"] for d in body["lifecycle_distribution"]}
        assert stages == {s: sum(u["stage"] == s for u in live) for s in STAGES if any(u["stage"] == s for u in live)}
        risks = {d["risk_level"]: d["count"] for d in body["risk_distribution"]}
        assert sum(risks.values()) == len(live)
        by_channel = {d["channel"]: (d["total"], d["delivered"], d["failed"]) for d in body["intervention_stats"]}
        for channel, (t, d, f) in by_channel.items():
            mine = [i for i in counted if i["channel"] == channel]
            assert (t, d, f) == (len(mine), sum(i["status"] == "delivered" for i in mine),
                                 sum(i["status"] == "failed" for i in mine))
        outcomes = {d["outcome"]: d["count"] for d in body["outcome_stats"]}
        assert outcomes == {o: sum(i["outcome"] == o for i in counted) for o in OUTCOMES[1:]
                            if any(i["outcome"] == o for i in counted)}
        areas = {a["lifecycle_area"]: a for a in body["roi"]["outcomes_by_lifecycle_area"]}
        for area, row in areas.items():
            mine = [i for i in counted if i["area"] == area]
            assert (row["interventions"], row["positive"], row["negative"], row["neutral"]) == (
                len(mine), sum(i["outcome"] == "positive" for i in mine), sum(i["outcome"] == "negative" for i in mine),
                sum(i["outcome"] == "neutral" for i in mine))
        assert body["lifecycle_area_breakdown"] == body["roi"]["outcomes_by_lifecycle_area"]
        top = body["top_playbooks"]
        assert [t["interventions"] for t in top] == sorted([t["interventions"] for t in top], reverse=True)
        assert set(top[0]) == {"playbook_id", "name", "interventions", "success_rate"}


def test_range_is_validated_and_defaults_to_30d(client, tenant):
    assert client.get("/api/analytics", headers=auth(tenant.key)).json["range"] == "30d"
    assert client.get("/api/analytics?range=365d", headers=auth(tenant.key)).status_code == 400


def test_other_tenants_data_never_counts(client, tenant, make_tenant, rt, clock):
    other = make_tenant("Other")
    _seed(rt, other.id, clock.now(), random.Random(1))
    body = client.get("/api/analytics", headers=auth(tenant.key)).json
    assert body["kpis"]["total_users"] == 0 and body["kpis"]["total_interventions"] == 0
