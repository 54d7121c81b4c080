"""cs tenant create --partner, cs tenant set-partner, cs partner customers."""

from __future__ import annotations

import json

from tests.conftest import auth


def _partner_key(cs, tenant_id: str) -> str:
    code, out, _ = cs("keys", "issue", "--tenant", tenant_id, "--role", "admin", "--permission", "partner", "--json")
    assert code == 0
    return json.loads(out)["api_key"]


def test_a_partner_made_by_the_cli_provisions_customers_it_then_lists(cs, client):
    code, out, _ = cs("tenant", "create", "Agency", "--owner-email", "a@agency.example", "--partner", "--json")
    assert code == 0
    partner = json.loads(out)
    key = _partner_key(cs, partner["tenant_id"])
    made = client.post("/api/partner/customers", headers=auth(key),
                       json={"name": "Bakery", "owner_email": "b@bakery.example"}).json["tenant"]

    code, out, _ = cs("partner", "customers", "--tenant", partner["tenant_id"], "--json")
    assert code == 0
    body = json.loads(out)
    assert body["partner"] is True
    assert [(c["tenant_id"], c["name"], c["slug"], c["plan_tier"]) for c in body["customers"]] == [
        (made["tenant_id"], "Bakery", "bakery", "trial")]
    code, out, _ = cs("partner", "customers", "--tenant", partner["tenant_id"])
    assert code == 0 and "Customers of Agency" in out and made["tenant_id"] in out and "bakery" in out

    code, out, _ = cs("tenant", "list", "--json")
    flags = {t["name"]: t["partner"] for t in json.loads(out)["tenants"]}
    assert flags == {"Agency": True, "Bakery": False}


def test_set_partner_on_and_off_follows_through_to_the_api(cs, tenant, client):
    key = _partner_key(cs, tenant.id)
    assert client.get("/api/partner/customers", headers=auth(key)).status_code == 403
    code, out, _ = cs("tenant", "set-partner", tenant.id, "on", "--json")
    assert code == 0 and json.loads(out) == {"tenant_id": tenant.id, "partner": True}
    assert client.get("/api/partner/customers", headers=auth(key)).status_code == 200
    code, out, _ = cs("tenant", "set-partner", tenant.id, "off")
    assert code == 0 and "partner off" in out
    assert client.get("/api/partner/customers", headers=auth(key)).status_code == 403


def test_bad_partner_input_is_one_line(cs, tenant):
    for argv, words in ((["tenant", "set-partner", tenant.id, "maybe"], "maybe"),
                        (["tenant", "set-partner", "nope", "on"], "tenant not found"),
                        (["partner", "customers", "--tenant", "nope"], "tenant not found")):
        code, out, err = cs(*argv)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], err
    code, out, _ = cs("partner", "customers", "--tenant", "nope", "--json")
    assert code == 1 and json.loads(out) == {"error": "tenant not found: no tenant has the id or slug 'nope'; `cs tenant list` shows them",
                                   "code": "not_found"}
