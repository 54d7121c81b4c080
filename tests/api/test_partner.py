"""The partner API (docs/partners.md): provisioning, isolation between partners, the 403
rules, integrations shared into customers' platform listings, and stats checked against
a ledger of what the test seeded through the API."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.external.models import ActionType, PlatformConnection
from cs_daemon.interventions.models import Intervention
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from cs_daemon.tenants.models import Tenant
from tests.conftest import auth

SCHEMA = {"type": "object", "properties": {"points": {"type": "integer", "minimum": 1}},
          "required": ["points"], "additionalProperties": False}
UNKNOWN = "6f1c2e9a-9a55-4b8e-9d0e-2f4b8f3c1d11"


def partner_key(client, handle, role: str = "admin") -> str:
    """A `partner` key, issued through the settings API with the tenant's owner key."""
    resp = client.post("/api/settings/api-keys", headers=auth(handle.key),
                       json={"label": "partner", "role": role, "permissions": ["partner"]})
    assert resp.status_code == 201, resp.json
    assert resp.json["scope"] == {"permissions": ["partner"]}
    return resp.json["api_key"]


@pytest.fixture
def agency(client, make_tenant):
    handle = make_tenant("Agency", partner=True)
    return handle, partner_key(client, handle)


def provision(client, key, name, plan_tier="growth"):
    resp = client.post("/api/partner/customers", headers=auth(key),
                       json={"name": name, "owner_email": f"owner@{name.lower()}.example", "plan_tier": plan_tier})
    assert resp.status_code == 201, resp.json
    return resp.json


def test_a_provisioned_tenant_gets_a_key_that_works_on_it_alone(client, agency, rt):
    handle, key = agency
    made = provision(client, key, "Bakery", plan_tier="starter")
    tenant, secret = made["tenant"], made["api_key"]
    # the interface's Tenant object, with the customer list's tenant_id and tracked_users beside it
    assert set(tenant) == {"id", "name", "slug", "config", "plan_tier", "plan_status", "tracked_user_limit",
                           "kill_switch_active", "shadow_mode", "partner", "created_at", "tenant_id", "tracked_users"}
    assert (tenant["name"], tenant["slug"], tenant["plan_tier"], tenant["plan_status"]) == (
        "Bakery", "bakery", "starter", "active")
    assert secret.startswith("rt_live_")
    h = auth(secret)
    settings = client.get("/api/settings", headers=h).json
    assert settings["tenant"]["id"] == tenant["tenant_id"] == tenant["id"] and settings["tenant"]["partner"] is False
    assert {k: settings["tenant"][k] for k in settings["tenant"]} == {k: tenant[k] for k in settings["tenant"]}
    [owner_key] = settings["api_keys"]
    assert owner_key["role"] == "admin" and owner_key["scope"] == {"permissions": ["full"]}
    [owner] = client.get("/api/team/members", headers=h).json["members"]
    assert owner["email"] == "owner@bakery.example" and owner["role"] == "admin"
    assert client.put("/api/settings/kill-switch", headers=h, json={"active": False}).status_code == 200
    with rt.session() as s:
        assert s.get(Tenant, tenant["tenant_id"]).partner_tenant_id == handle.id

    # the new key sees its own tenant only: the partner's users are not there
    client.post("/api/track", headers=auth(handle.key), json={"events": [{"user_id": "p1", "event": "x"}]})
    client.post("/api/track", headers=h, json={"events": [{"user_id": "c1", "event": "x"}]})
    assert client.get("/api/customers/p1", headers=h).status_code == 404
    assert [c["id"] for c in client.get("/api/customers", headers=h).json["customers"]] == ["c1"]
    assert client.get("/api/customers/c1", headers=auth(handle.key)).status_code == 404
    assert client.get("/api/partner/customers", headers=h).status_code == 403   # a customer is no partner

    listed = client.get("/api/partner/customers", headers=auth(key)).json["customers"]
    assert [c["tenant_id"] for c in listed] == [tenant["tenant_id"]] and listed[0]["tracked_users"] == 1
    one = client.get(f"/api/partner/customers/{tenant['tenant_id']}", headers=auth(key)).json["customer"]
    assert one == {k: v for k, v in {**tenant, "tracked_users": 1}.items() if k in one}


@pytest.mark.parametrize("body, field", [
    ({"owner_email": "a@b.example"}, "name"),
    ({"name": "   ", "owner_email": "a@b.example"}, "name"),          # refused by the tenant service itself
    ({"name": "X", "owner_email": "not-an-email"}, "owner_email"),
    ({"name": "X", "owner_email": "a@b.example", "plan_tier": "gold"}, "plan_tier"),
])
def test_provisioning_is_validated(client, agency, body, field):
    resp = client.post("/api/partner/customers", headers=auth(agency[1]), json=body)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert resp.json["details"][0]["field"] == field
    assert client.get("/api/partner/customers", headers=auth(agency[1])).json["customers"] == []


def test_a_second_partner_gets_404_on_the_first_partners_customers(client, agency, make_tenant):
    _, key_a = agency
    other = make_tenant("Rival", partner=True)
    key_b = partner_key(client, other)
    mine = provision(client, key_a, "Bakery")["tenant"]["tenant_id"]
    plain = make_tenant("Plain").id      # a tenant nobody provisioned
    integration = register(client, key_b, "Rival CRM", "http://127.0.0.1:9/crm")["id"]
    b = auth(key_b)
    for tenant_id in (mine, plain, other.id, UNKNOWN):
        for path in (f"/api/partner/customers/{tenant_id}", f"/api/partner/customers/{tenant_id}/stats"):
            resp = client.get(path, headers=b)
            assert resp.status_code == 404 and resp.json == {"error": "customer not found", "code": "not_found"}
        resp = client.post(f"/api/partner/integrations/{integration}/share", headers=b,
                           json={"tenant_ids": [tenant_id]})
        assert resp.status_code == 404
    assert client.get("/api/partner/customers", headers=b).json["customers"] == []
    assert client.get("/api/partner/stats", headers=b).json["stats"]["customers"] == 0
    # nor can it share the first partner's integration, or see it
    theirs = register(client, key_a, "Agency CRM", "http://127.0.0.1:9/crm")["id"]
    assert client.post(f"/api/partner/integrations/{theirs}/share", headers=b, json={"all": True}).status_code == 404
    assert [i["id"] for i in client.get("/api/partner/integrations", headers=b).json["integrations"]] == [integration]


PARTNER_PATHS = [
    ("POST", "/api/partner/customers", {"name": "X", "owner_email": "x@x.example"}),
    ("GET", "/api/partner/customers", None),
    ("GET", "/api/partner/customers/{id}", None),
    ("GET", "/api/partner/customers/{id}/stats", None),
    ("GET", "/api/partner/stats", None),
    ("POST", "/api/partner/integrations", None),
    ("GET", "/api/partner/integrations", None),
    ("POST", "/api/partner/integrations/{id}/share", {"all": True}),
]


def test_the_403_table_covers_every_partner_route(app):
    served = {(m, r.rule.replace("<tenant_id>", "{id}").replace("<integration_id>", "{id}"))
              for r in app.url_map.iter_rules() if r.rule.startswith("/api/partner")
              for m in r.methods - {"HEAD", "OPTIONS"}}
    assert served == {(m, p) for m, p, _ in PARTNER_PATHS}


def _forbidden_callers(client, make_tenant, rt):
    """Keys that must get 403 on every partner path, by name."""
    partner = make_tenant("Agency", partner=True)
    plain = make_tenant("Plain")
    lapsed = make_tenant("Lapsed", partner=True)
    lapsed_key = partner_key(client, lapsed)
    with rt.session(lapsed.id) as s:
        tenants.set_partner(s, lapsed.id, False, now=rt.now())
    return {
        "full admin key on a partner tenant": partner.key,
        "every other permission on a partner tenant": partner.issue("admin",
                                                                     ["full", "manage", "ingest", "decide", "read"]),
        "partner key on a tenant that is not a partner": partner_key(client, plain),
        "partner key on a tenant no longer a partner": lapsed_key,
    }


@pytest.mark.parametrize("method, path, body", PARTNER_PATHS, ids=[f"{m} {p}" for m, p, _ in PARTNER_PATHS])
def test_403_on_every_partner_path(client, make_tenant, rt, method, path, body):
    callers = _forbidden_callers(client, make_tenant, rt)
    url = path.replace("{id}", UNKNOWN)
    for who, key in callers.items():
        resp = client.open(url, method=method, headers=auth(key), json=body if body is not None else {})
        assert resp.status_code == 403, who
        assert resp.json["code"] == "forbidden" and resp.json["error"], who
        assert set(resp.json) <= {"error", "code", "details"}, who
    with rt.session() as s:
        assert s.scalars(select(Tenant).where(Tenant.partner_tenant_id.isnot(None))).all() == []


def test_a_viewer_partner_key_reads_but_does_not_write(client, agency):
    handle, key = agency
    viewer = partner_key(client, handle, role="viewer")
    assert client.get("/api/partner/customers", headers=auth(viewer)).status_code == 200
    resp = client.post("/api/partner/customers", headers=auth(viewer), json={"name": "X", "owner_email": "x@x.example"})
    assert resp.status_code == 403 and resp.json["code"] == "forbidden"


# --- integrations ------------------------------------------------------------------------


def register(client, key, name, webhook, **extra):
    body = {"name": name, "description": "Points for your users.", "domain": "loyalty",
            "credential_fields": ["base_url", "account"],
            "action_types": [
                {"name": "award_points", "description": "Award points.", "parameters_schema": SCHEMA,
                 "delivery_webhook": "{base_url}/hooks/award", "estimated_cost_usd": "0.02"},
                {"name": "send_badge", "description": "Send a badge.", "provider": "badgeworks",
                 "parameters_schema": {"type": "object"}, "delivery_webhook": webhook},
            ], **extra}
    resp = client.post("/api/partner/integrations", headers=auth(key), json=body)
    assert resp.status_code == 201, resp.json
    return resp.json["integration"]


def _platform_ids(client, key):
    resp = client.get("/api/external/platforms", headers=auth(key))
    assert resp.status_code == 200
    return [p["id"] for p in resp.json["platforms"]]


def test_a_shared_integration_is_listed_for_the_chosen_tenants_and_connects(client, agency, rt, receiver):
    _, key = agency
    made = register(client, key, "Points Hub", receiver.url + "/badge")
    assert made["shared_with"] == [] and made["credential_fields"] == ["base_url", "account"]
    assert [a["name"] for a in made["action_types"]] == ["award_points", "send_badge"]
    assert [(a["provider"], a["domain"]) for a in made["action_types"]] == [(None, None), ("badgeworks", None)]
    one, two, three = (provision(client, key, n) for n in ("One", "Two", "Three"))
    ids = [c["tenant"]["tenant_id"] for c in (one, two, three)]
    share = f"/api/partner/integrations/{made['id']}/share"
    assert client.post(share, headers=auth(key), json={"tenant_ids": ids[:2]}).json == {"shared": 2}
    assert client.post(share, headers=auth(key), json={"tenant_ids": [ids[0]]}).json == {"shared": 1}  # idempotent

    built_in = ["loyalty", "support_desk", "team_chat"]
    for c in (one, two):
        assert _platform_ids(client, c["api_key"]) == built_in + [made["id"]]
    assert _platform_ids(client, three["api_key"]) == built_in
    listed = client.get("/api/partner/integrations", headers=auth(key)).json["integrations"]
    assert sorted(listed[0]["shared_with"]) == sorted(ids[:2])

    # not shared: connect is 404 as for an unknown platform
    creds = {"credentials": {"base_url": receiver.url, "account": "acct-1"}}
    h3 = auth(three["api_key"])
    assert client.post(f"/api/external/platforms/{made['id']}/connect", headers=h3, json=creds).status_code == 404

    h1 = auth(one["api_key"])
    [item] = [p for p in client.get("/api/external/platforms", headers=h1).json["platforms"] if p["id"] == made["id"]]
    assert item == {"id": made["id"], "name": "Points Hub", "description": "Points for your users.",
                    "domain": "loyalty", "credential_fields": ["base_url", "account"], "connected": False,
                    "connected_at": None, "action_types": ["award_points", "send_badge"]}
    resp = client.post(f"/api/external/platforms/{made['id']}/connect", headers=h1,
                       json={"credentials": {"base_url": receiver.url}})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "credentials.account"
    own = client.post("/api/external/action-types", headers=h1, json={
        "name": "own_type", "description": "Mine.", "provider": "me", "parameters_schema": {"type": "object"},
        "delivery_webhook": receiver.url}).json["action_type"]
    resp = client.post(f"/api/external/platforms/{made['id']}/connect", headers=h1, json=creds)
    assert resp.status_code == 200, resp.json
    assert resp.json["platform"]["connected"] is True and resp.json["platform"]["connected_at"]
    types = [t for t in client.get("/api/external/action-types", headers=h1).json["action_types"]
             if t["name"] != "own_type"]
    assert {(t["name"], t["provider"], t["delivery_webhook"], t["domain"], t["active"]) for t in types} == {
        ("award_points", made["id"], "{base_url}/hooks/award", "loyalty", True),   # filled at dispatch
        ("send_badge", "badgeworks", receiver.url + "/badge", "loyalty", True)}   # its own provider
    with rt.session(ids[0]) as s:
        [conn] = s.scalars(select(PlatformConnection)).all()
        assert "acct-1" not in conn.credentials_enc
    assert client.get("/api/external/action-types", headers=auth(two["api_key"])).json["action_types"] == []

    # a registered type dispatches like any other: a signed POST reaches the partner's URL
    client.post("/api/track", headers=h1, json={"events": [{"user_id": "u1", "event": "x"}]})
    action = client.post("/api/external/actions", headers=h1,
                         json={"action_type": "award_points", "user_id": "u1", "parameters": {"points": 5}})
    assert action.status_code == 201, action.json
    _run_deliveries(rt, ids[0])
    [req] = [r for r in receiver.requests if r.path == "/hook/hooks/award"]
    assert json.loads(req.body)["parameters"] == {"points": 5}
    assert req.headers["X-Service-Action-Id"] == action.json["action"]["id"]

    # disconnect deactivates exactly the integration's types
    resp = client.post(f"/api/external/platforms/{made['id']}/disconnect", headers=h1)
    assert resp.json["platform"]["connected"] is False
    with rt.session(ids[0]) as s:
        active = {t.name: t.active for t in s.scalars(select(ActionType))}
    assert active == {"award_points": False, "send_badge": False, "own_type": True} and own["name"] == "own_type"

    # all: true reaches every customer
    assert client.post(share, headers=auth(key), json={"all": True}).json == {"shared": 3}
    assert made["id"] in _platform_ids(client, three["api_key"])


def test_sharing_with_a_foreign_id_shares_with_nobody(client, agency, make_tenant):
    _, key = agency
    made = register(client, key, "Points Hub", "http://127.0.0.1:9/badge")
    mine = provision(client, key, "Mine")
    foreign = make_tenant("Foreign")
    share = f"/api/partner/integrations/{made['id']}/share"
    resp = client.post(share, headers=auth(key), json={"tenant_ids": [mine["tenant"]["tenant_id"], foreign.id]})
    assert resp.status_code == 404 and resp.json["code"] == "not_found"
    assert made["id"] not in _platform_ids(client, mine["api_key"])
    assert made["id"] not in _platform_ids(client, foreign.key)
    assert client.post(f"/api/partner/integrations/{UNKNOWN}/share", headers=auth(key),
                       json={"all": True}).status_code == 404
    for body in ({}, {"tenant_ids": []}, {"tenant_ids": ["x"], "all": True}, {"all": False},
                 {"all": "yes"}, {"all": 1}):   # `all` is a JSON boolean
        assert client.post(share, headers=auth(key), json=body).status_code == 400, body


def _type(**overrides):
    return {"name": "award_points", "description": "Award points.", "parameters_schema": SCHEMA,
            "delivery_webhook": "{base_url}/hooks", **overrides}


@pytest.mark.parametrize("action_types, field", [
    ([_type(name="AwardPoints")], "action_types[0].name"),
    ([_type(parameters_schema={"type": "nope"})], "action_types[0].parameters_schema"),
    ([_type(), _type()], "action_types[1].name"),
    ([_type(delivery_webhook="{host}/hooks")], "action_types[0].delivery_webhook"),
    ([_type(delivery_webhook="{base_url/hooks")], "action_types[0].delivery_webhook"),
    ([_type(estimated_cost_usd="cheap")], "action_types[0].estimated_cost_usd"),
    ([], "action_types"),
])
def test_integration_action_types_are_validated_like_action_types(client, agency, action_types, field):
    body = {"name": "Hub", "description": "d", "domain": "loyalty", "credential_fields": ["base_url"],
            "action_types": action_types}
    resp = client.post("/api/partner/integrations", headers=auth(agency[1]), json=body)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert field in [d["field"] for d in resp.json["details"]], resp.json


def test_integration_names_and_credential_fields(client, agency):
    _, key = agency
    register(client, key, "Hub", "http://127.0.0.1:9/x")
    body = {"name": "Hub", "description": "d", "domain": "d", "credential_fields": ["base_url"],
            "action_types": [_type()]}
    assert client.post("/api/partner/integrations", headers=auth(key), json=body).status_code == 409
    for fields in (["Base URL"], ["base_url", "base_url"]):
        resp = client.post("/api/partner/integrations", headers=auth(key),
                           json={**body, "name": "Other", "credential_fields": fields})
        assert resp.status_code == 400 and resp.json["details"][0]["field"].startswith("credential_fields")


def test_private_webhooks_are_refused_when_production_rules_apply(client, agency, settings, clock):
    from webapp import create_app

    _, key = agency
    strict = create_app(runtime=Runtime(settings.model_copy(update={"allow_private_webhook_urls": False}),
                                        clock)).test_client()
    body = {"name": "Hub", "description": "d", "domain": "d", "credential_fields": ["base_url"],
            "action_types": [_type(delivery_webhook="http://127.0.0.1:9/hooks")]}
    resp = strict.post("/api/partner/integrations", headers=auth(key), json=body)
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "action_types[0].delivery_webhook"
    # a placeholder URL is complete only at connect, and is checked there
    made = strict.post("/api/partner/integrations", headers=auth(key),
                       json={**body, "action_types": [_type()]}).json["integration"]
    customer = provision(strict, key, "Customer")
    strict.post(f"/api/partner/integrations/{made['id']}/share", headers=auth(key), json={"all": True})
    resp = strict.post(f"/api/external/platforms/{made['id']}/connect", headers=auth(customer["api_key"]),
                       json={"credentials": {"base_url": "http://127.0.0.1:9"}})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "delivery_webhook"


# --- stats -------------------------------------------------------------------------------


def _run_deliveries(rt, tenant_id):
    with rt.session(tenant_id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.status.in_(("pending", "retrying"))))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


class Ledger:
    """What the test seeded, through the API, for computing the expected figures."""

    def __init__(self, client, rt, clock, receiver):
        self.client, self.rt, self.clock, self.receiver = client, rt, clock, receiver
        self.events, self.interventions, self.users = [], [], {}

    def customer(self, key):
        h = auth(key)
        endpoint = self.client.post("/api/webhooks/endpoints", headers=h, json={"url": self.receiver.url})
        assert endpoint.status_code == 201
        playbook = self.client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
        test_key = self.client.post("/api/settings/api-keys", headers=h,
                                    json={"role": "admin", "permissions": ["full"], "test": True}).json["api_key"]
        return {"key": key, "test_key": test_key, "playbook": playbook,
                "id": self.client.get("/api/settings", headers=h).json["tenant"]["id"]}

    def track(self, c, user, *, days_ago=0, test=False):
        when = self.clock.now() - timedelta(days=days_ago)
        resp = self.client.post("/api/track", headers=auth(c["test_key"] if test else c["key"]), json={"events": [
            {"user_id": user, "event": "used_feature", "timestamp": when.isoformat()}]})
        assert resp.json["accepted"] == 1
        self.events.append({"tenant": c["id"], "at": when, "test": test})
        self.users.setdefault(c["id"], set()).add(user)

    def intervene(self, c, user, *, to="planned", outcome=None, test=False):
        h = auth(c["test_key"] if test else c["key"])
        iv = self.client.post("/api/interventions", headers=h, json={
            "user_id": user, "playbook_id": c["playbook"], "channel": "webhook", "message_body": "hi"}).json["id"]
        if to == "delivered":
            self.client.put(f"/api/interventions/{iv}/approve", headers=h)
            _run_deliveries(self.rt, c["id"])
        elif to == "rejected":
            self.client.put(f"/api/interventions/{iv}/reject", headers=h, json={"reason": "no"})
        if outcome:
            # no endpoint records an intervention's outcome (attribution does); set it in the tenant's scope
            with self.rt.session(c["id"]) as s:
                row = s.get(Intervention, iv)
                row.outcome, row.outcome_at = outcome, self.clock.now()
        [item] = [i for i in self.client.get("/api/interventions", headers=h).json["interventions"] if i["id"] == iv]
        assert item["status"] == to
        self.interventions.append({"tenant": c["id"], "at": self.clock.now(), "status": to, "outcome": outcome,
                                   "test": test})

    def escalate(self, c, user):
        resp = self.client.post("/api/escalations", headers=auth(c["key"]), json={
            "user_id": user, "playbook_id": c["playbook"], "severity": "High", "reason": "stuck"})
        assert resp.status_code == 201   # on channel escalate: never counted as an intervention

    def expected(self, tenant_ids):
        since = self.clock.now() - timedelta(days=30)
        events = [e for e in self.events if e["tenant"] in tenant_ids and not e["test"] and e["at"] >= since]
        ivs = [i for i in self.interventions if i["tenant"] in tenant_ids and not i["test"] and i["at"] >= since]
        decided = [i for i in ivs if i["outcome"] in ("positive", "negative", "neutral")]
        positive = [i for i in ivs if i["outcome"] == "positive"]
        return {"tracked_users": sum(len(self.users.get(t, ())) for t in tenant_ids), "events_30d": len(events),
                "interventions_30d": len(ivs), "delivered_30d": sum(i["status"] == "delivered" for i in ivs),
                "positive_outcome_rate": round(len(positive) / len(decided), 4) if decided else 0.0}


def test_stats_match_figures_computed_from_what_was_seeded(client, agency, make_tenant, rt, clock, receiver):
    handle, key = agency
    ledger = Ledger(client, rt, clock, receiver)
    one = ledger.customer(provision(client, key, "One")["api_key"])
    two = ledger.customer(provision(client, key, "Two")["api_key"])
    idle = ledger.customer(provision(client, key, "Idle")["api_key"])

    ledger.track(one, "u1")
    ledger.track(one, "u2")
    ledger.intervene(one, "u1", to="delivered", outcome="positive")      # falls out of the window below
    clock.advance(days=31)
    for user in ("u1", "u1", "u3"):
        ledger.track(one, user)
    ledger.track(one, "u1", days_ago=40)                                 # an old event sent late
    ledger.track(one, "u9", test=True)
    ledger.intervene(one, "u1", to="delivered", outcome="positive")
    ledger.intervene(one, "u3", to="delivered", outcome="negative")
    ledger.intervene(one, "u1")
    ledger.intervene(one, "u3", to="rejected")
    ledger.intervene(one, "u9", test=True)
    ledger.escalate(one, "u1")
    for user in ("v1", "v2", "v1"):
        ledger.track(two, user)
    ledger.intervene(two, "v1", to="delivered", outcome="neutral")
    ledger.intervene(two, "v2", outcome="positive")

    # data of the partner itself and of another partner's customer never counts
    client.post("/api/track", headers=auth(handle.key), json={"events": [{"user_id": "own", "event": "x"}]})
    rival = partner_key(client, make_tenant("Rival", partner=True))
    foreign = provision(client, rival, "Foreign")["api_key"]
    client.post("/api/track", headers=auth(foreign), json={"events": [{"user_id": "f", "event": "x"}]})

    h = auth(key)
    for c in (one, two, idle):
        resp = client.get(f"/api/partner/customers/{c['id']}/stats", headers=h)
        assert resp.status_code == 200
        assert resp.json == {"stats": ledger.expected({c["id"]})}
    assert ledger.expected({one["id"]})["interventions_30d"] == 4        # the ledger is not trivially empty
    overall = client.get("/api/partner/stats", headers=h).json["stats"]
    assert overall == {**ledger.expected({one["id"], two["id"], idle["id"]}), "customers": 3}
    assert overall["positive_outcome_rate"] == 0.5      # 2 positive of 4 decided, over both customers
