"""One tenant's data can never stop another tenant's work: a hostile tenant (bad stored
config, a huge tree, an unreadable row) beside a good one through every sweep; the
failures show on /api/health, `cs doctor` names what is wrong, and once it is fixed
everything clears. Also `cs playbooks apply` and `cs doctor` on their own."""

from __future__ import annotations

import json

from sqlalchemy import select, update

from cs_daemon.customers import actors as customer_jobs
from cs_daemon.customers.models import Customer
from cs_daemon.decisions import actors as decision_jobs
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.interventions import actors as intervention_jobs
from cs_daemon.interventions.models import Intervention
from cs_daemon.jobs import heartbeat
from cs_daemon.playbooks.models import Playbook
from cs_daemon.tenants import actors as tenant_jobs
from cs_daemon.tenants.models import Tenant
from tests.conftest import auth

HOSTILE_CONFIG = {"churned_after_days": "x", "engagement_half_life_days": 0, "milestones": 5,
                  "shadow_mode_expires_at": "soon", "approvalMode": "yolo", "health_weights": {"activation": "all"}}


def _huge_tree() -> dict:
    tree = {"event": "exported", "within_days": 1e6}
    for _ in range(40):
        tree = {"not": tree}
    return {"any": [tree] + [{"field": "traits.plan", "op": "eq", "value": "pro"}] * 300}


def _world(client, rt, tenant, receiver) -> dict:
    """Users, a delivered intervention awaiting its outcome, an active sweep playbook."""
    h = auth(tenant.key)
    resp = client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "viewed"},
        {"user_id": "u2", "event": "$identify", "properties": {"plan": "pro", "email": "u2@x.io"}}]})
    assert resp.status_code == 200
    assert client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url}).status_code == 201
    nudge = client.post("/api/playbooks", headers=h, json={"name": "nudge",
                                                           "exit_conditions": {"event": "report_created"}}).json["id"]
    iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": nudge,
                                                            "channel": "webhook", "message_body": "hi"}).json["id"]
    assert client.put(f"/api/interventions/{iv}/approve", headers=h).status_code == 200
    with rt.session(tenant.id) as s:
        due = [d.id for d in s.scalars(select(Delivery).where(Delivery.status == "pending"))]
    for delivery_id in due:
        delivery.attempt(rt, delivery_id)
    pros = client.post("/api/playbooks", headers=h, json={
        "name": "pros", "entry_conditions": {"field": "traits.plan", "op": "eq", "value": "pro"}}).json["id"]
    client.put(f"/api/playbooks/{pros}/status", headers=h, json={"status": "active"})
    assert client.put("/api/settings/shadow-mode", headers=h, json={"active": True}).status_code == 200
    return {"nudge": nudge, "pros": pros, "delivered": iv}


def _make_hostile(rt, tenant, world) -> None:
    """Bad data written straight through the model and SQL, past every check."""
    with rt.session() as s:
        s.execute(update(Tenant).where(Tenant.id == tenant.id).values(config=HOSTILE_CONFIG))
    with rt.session(tenant.id) as s:
        s.get(Playbook, world["pros"]).entry_conditions = _huge_tree()
        nudge = s.get(Playbook, world["nudge"])
        nudge.exit_conditions = {"event": "report_created", "within_days": 1e6}
        nudge.constraints = {"cooldown_hours": "x"}
        s.execute(update(Customer).where(Customer.id == "u1").values(state={"first_seen_at": "garbage"}))


def _every_sweep() -> None:
    for job in (tenant_jobs.sweep_expiries, customer_jobs.sweep_scores, decision_jobs.sweep_decisions,
                intervention_jobs.sweep_outcomes):
        job()


def _failures(client) -> set[tuple[str, str]]:
    resp = client.get("/api/health")
    assert resp.status_code == 200 and resp.json["status"] == "ok", resp.json     # no outage for the others
    return {(f["sweep"], f["tenant_id"]) for f in resp.json["checks"]["sweeps"]["failures"]}


def test_a_hostile_tenant_never_stops_a_good_tenants_sweeps(cs, client, make_tenant, rt, clock, receiver):
    rt.install_broker()
    heartbeat.beat(rt.cache)
    hostile, good = make_tenant("Hostile", plan_tier="growth"), make_tenant("Good", plan_tier="growth")
    worlds = {t.id: _world(client, rt, t, receiver) for t in (hostile, good)}
    _make_hostile(rt, hostile, worlds[hostile.id])
    clock.advance(days=31)
    heartbeat.beat(rt.cache)

    _every_sweep()

    mine = worlds[good.id]
    with rt.session(good.id) as s:
        assert s.get(Tenant, good.id).shadow_mode is False                            # expiries
        assert s.get(Customer, (good.id, "u1")).lifecycle_stage == "churned"          # scores
        assert s.get(Intervention, mine["delivered"]).outcome is not None             # outcomes
        engine = s.scalars(select(Intervention).where(Intervention.source == "engine")).all()
        assert [(iv.user_id, iv.playbook_id) for iv in engine] == [("u2", mine["pros"])]   # decisions
    assert _failures(client) == {("sweep_scores", hostile.id), ("sweep_decisions", hostile.id),
                                 ("sweep_outcomes", hostile.id)}

    code, out, _ = cs("doctor", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["tenants_checked"] == 2 and report["playbooks_checked"] == 4
    found = {(p["tenant_id"], p["playbook_id"], p["field"]) for p in report["problems"]}
    theirs = worlds[hostile.id]
    assert found == {
        (hostile.id, None, "config.churned_after_days"), (hostile.id, None, "config.engagement_half_life_days"),
        (hostile.id, None, "config.milestones"), (hostile.id, None, "config.shadow_mode_expires_at"),
        (hostile.id, None, "config.approvalMode"), (hostile.id, None, "config.health_weights.activation"),
        (hostile.id, theirs["pros"], "entry_conditions.any[0]" + ".not" * 9),
        (hostile.id, theirs["nudge"], "exit_conditions.within_days"),
        (hostile.id, theirs["nudge"], "constraints.cooldown_hours")}
    assert all(p["message"] for p in report["problems"])

    # fixed through the API (and the unreadable row repaired): every record clears
    h = auth(hostile.key)
    assert client.put("/api/settings/shadow-mode", headers=h, json={"active": False}).status_code == 200
    resp = client.patch("/api/settings", headers=h, json={"config": {
        k: None for k in HOSTILE_CONFIG if k != "shadow_mode_expires_at"}})   # set by the switch alone
    assert resp.status_code == 200, resp.json
    assert client.put(f"/api/playbooks/{theirs['pros']}", headers=h, json={
        "entry_conditions": {"field": "traits.plan", "op": "eq", "value": "pro"}}).status_code == 200
    assert client.put(f"/api/playbooks/{theirs['nudge']}", headers=h, json={
        "exit_conditions": {"event": "report_created"}, "constraints": {"cooldown_hours": 24}}).status_code == 200
    with rt.session(hostile.id) as s:
        s.execute(update(Customer).where(Customer.id == "u1").values(state={}))
    _every_sweep()
    assert _failures(client) == set()
    with rt.session(hostile.id) as s:
        assert s.get(Intervention, theirs["delivered"]).outcome is not None
        assert s.get(Customer, (hostile.id, "u1")).lifecycle_stage == "churned"
    code, out, _ = cs("doctor", "--json")
    assert code == 0 and json.loads(out)["problems"] == []


def test_doctor_on_clean_data_says_so(cs, make_tenant):
    make_tenant("Fine")
    code, out, _ = cs("doctor")
    assert code == 0 and "no problems in 1 tenants and 0 playbooks" in out
    code, out, _ = cs("doctor", "--json")
    assert code == 0 and json.loads(out) == {"ok": True, "tenants_checked": 1, "playbooks_checked": 0,
                                             "problems": []}


def test_doctor_lists_problems_as_a_table_and_never_a_secret(cs, make_tenant, rt):
    tenant = make_tenant("Odd")
    with rt.session() as s:
        s.execute(update(Tenant).where(Tenant.id == tenant.id).values(
            config={"crm_webhook_url": "ftp://crm.example/hook", "crm_webhook_secret": "hush-hush"}))
    code, out, _ = cs("doctor")
    assert code == 1
    assert "config.crm_webhook_url" in out and "config.crm_webhook_secret" in out and "hush-hush" not in out


def test_apply_refuses_bad_settings_naming_the_field(cs, tenant, tmp_path, rt):
    path = tmp_path / "pb.yaml"
    path.write_text("name: Nudge\nconstraints:\n  cooldown_hours: '24'\nstrategy_hints:\n  priority: hi\n")
    code, out, err = cs("playbooks", "apply", str(path), "--tenant", tenant.id, "--json")
    assert code != 0 and "Traceback" not in err
    assert json.loads(out)["code"] == "validation_failed" and "constraints.cooldown_hours" in json.loads(out)["error"]
    path.write_text(json.dumps({"name": "Deep", "entry_conditions": {"event": "x", "within_days": 1e6}}))
    code, out, err = cs("playbooks", "apply", str(path), "--tenant", tenant.id)
    assert code != 0 and "entry_conditions.within_days" in err and len(err.strip().splitlines()) == 1
    with rt.session(tenant.id) as s:
        assert s.scalars(select(Playbook)).all() == []


def test_a_hostile_tenants_stream_flood_leaves_a_good_tenant_its_streams(client, make_tenant, settings, clock):
    """Streams: an API process with 6 slots, of which a tenant may hold half (3). The
    hostile tenant asks for 12; the good tenant still connects and its approved message
    reaches its stream."""
    from cs_daemon.runtime import Runtime
    from tests.support.sse import AppServer, SseClient
    from webapp import create_app

    rt = Runtime(settings.model_copy(update={"cs_stream_slots": 6, "cs_stream_tenant_share": 50,
                                             "cs_streams_per_token": 2}), clock)
    server = AppServer(create_app(runtime=rt))
    opened: list[SseClient] = []

    def stream(tenant, user) -> SseClient:
        token = client.post("/api/in-app/tokens", headers=auth(tenant.key), json={"user_id": user}).json["token"]
        opened.append(SseClient(f"{server.url}/api/in-app/stream?token={token}"))
        return opened[-1]

    try:
        hostile, good = make_tenant("Hostile", plan_tier="growth"), make_tenant("Good", plan_tier="growth")
        for tenant in (hostile, good):
            client.post("/api/track", headers=auth(tenant.key), json={"events": [
                {"user_id": f"u{i}", "event": "$identify", "properties": {"name": "Ada"}} for i in range(6)]})
        flood = [stream(hostile, f"u{i // 3}") for i in range(12)]      # a fresh token each, 4 users
        held = [s for s in flood if s.status == 200]
        refused = [s for s in flood if s.status == 429]
        assert len(held) == 3 and len(refused) == 9
        assert all(s.response.json()["code"] == "rate_limited" for s in refused)

        mine = stream(good, "u1").wait_listening()
        h = auth(good.key)
        pid = client.post("/api/playbooks", headers=h, json={"name": "Nudge"}).json["id"]
        iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": pid,
                                                                "channel": "in_app", "message_body": "hello"}).json["id"]
        assert client.put(f"/api/interventions/{iv}/approve", headers=h).status_code == 200
        with rt.session(good.id) as s:
            due = [d.id for d in s.scalars(select(Delivery).where(Delivery.subject_id == iv))]
        for delivery_id in due:
            delivery.attempt(rt, delivery_id)
        message = mine.until(lambda e: e.event == "intervention")[-1]
        assert message.json["interventionId"] == iv and message.json["body"] == "hello"
    finally:
        for s in opened:
            s.close()
        server.close()
