"""The OpenAPI document is valid 3.1 and lists exactly the routes the app serves."""

from __future__ import annotations

import re

from openapi_spec_validator import validate


def _served(app) -> set[tuple[str, str]]:
    """Every route but the console's pages (HTML for a browser, not the API: docs/console.md)
    and /metrics (Prometheus text for a scraper: docs/operations.md)."""
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/console/") or rule.rule in ("/console", "/metrics"):
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            routes.add((method, path))
    return routes


def test_document_is_valid_openapi_31(client):
    resp = client.get("/api/openapi.json")
    assert resp.status_code == 200
    doc = resp.json
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_the_document_carries_the_interface_version_and_the_build_apart(client):
    from cs_daemon import __version__

    info = client.get("/api/openapi.json").json["info"]
    assert info["version"] == "1.0.0"
    assert info["x-service-version"] == __version__ == client.get("/api/health").json["version"]


def test_document_lists_every_served_route_and_nothing_else(app, client):
    doc = client.get("/api/openapi.json").json
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == _served(app)


def test_every_ref_resolves_and_bodies_use_the_validating_models(client):
    doc = client.get("/api/openapi.json").json
    schemas = doc["components"]["schemas"]
    refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', str(doc).replace("'", '"'))
    assert refs and all(r in schemas for r in refs)
    patch = doc["paths"]["/api/settings"]["patch"]
    body_ref = patch["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schemas[body_ref]["properties"]) == {"name", "config", "approvalMode", "onboardingCompleted"}
    assert schemas[body_ref]["properties"]["approvalMode"]["anyOf"][0]["enum"] == [
        "suggest_only", "semi_auto", "full_auto"]


def test_secured_operations_declare_bearer_and_their_access(client):
    doc = client.get("/api/openapi.json").json
    kill = doc["paths"]["/api/settings/kill-switch"]["put"]
    assert kill["security"] == [{"bearer": []}]
    assert kill["x-access"]["roles"] == ["admin"]
    assert doc["paths"]["/api/health"]["get"]["security"] == []
    assert "503" in doc["paths"]["/api/health"]["get"]["responses"]


def test_bodies_a_handler_reads_itself_are_documented_with_their_400(client):
    """The connectors and Stripe's webhook parse their own bodies: the document still says
    what they take, and that a body they cannot read is a 400."""
    doc = client.get("/api/openapi.json").json
    mixpanel = doc["paths"]["/api/connectors/connector-b/track"]["post"]
    assert set(mixpanel["requestBody"]["content"]) == {"application/json", "application/x-www-form-urlencoded"}
    for path in ("/api/connectors/connector-a", "/api/connectors/connector-a/v1/batch",
                 "/api/connectors/connector-c/2/httpapi", "/api/billing/webhook"):
        op = doc["paths"][path]["post"]
        assert op["requestBody"]["required"] is True, path
        assert "application/json" in op["requestBody"]["content"], path
        assert op["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody"), path


def test_every_write_documents_400_and_413_it_may_answer(client):
    """A write that reads no body still refuses one that is not a JSON object (400) and any
    body over 1 MiB (413): the document says so, as schemathesis' conformance check asks."""
    doc = client.get("/api/openapi.json").json
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method != "get":
                assert {"400", "413"} <= set(op["responses"]), (method, path)
