"""The OpenAPI 3.1 document, built from the endpoint declarations and their pydantic
models (the same ones that validate requests)."""

from __future__ import annotations

import re
from typing import Any

from pydantic.json_schema import models_json_schema

from cs_daemon import __version__
from cs_daemon.auth import testmode
from cs_daemon.auth.access import ACCESS
from cs_daemon.schemas import ErrorBody

from .api import Api, Endpoint

REF = "#/components/schemas/{model}"
_ERROR_TEXT = {
    400: "Validation failed (code validation_failed, with details)",
    401: "Missing, malformed, unknown or revoked API key",
    403: "The key's role or permissions do not allow this, or a test key would change live data",
    404: "Not found (also for another tenant's ids)",
    409: "Conflict with the current state",
    408: "The request body stopped arriving for CS_CLIENT_TIMEOUT_SECONDS",
    410: "Gone",
    413: "The body is over 1 MiB (code payload_too_large)",
    414: "Request line too long (over 4094 bytes in production mode)",
    429: "Rate limit reached (see Retry-After)",
    503: "A dependency is not configured or not reachable",
}


INTERFACE_VERSION = "1.0.0"   # of the interface; the build's own is __version__ (docs/api.md)


def document(apis: list[Api]) -> dict[str, Any]:
    """The document of these APIs (the app's: `app.extensions["cs_apis"]`)."""
    endpoints = [ep for api in apis for ep in api.endpoints]
    refs, schemas = _schemas(endpoints)
    paths: dict[str, dict] = {}
    for ep in endpoints:
        paths.setdefault(ep.path, {})[ep.method.lower()] = _operation(ep, refs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Customer Success Automation Service",
            "version": INTERFACE_VERSION,
            "description": f"Interface version {INTERFACE_VERSION}, served by build {__version__} "
                           "(GET /api/health). Errors are JSON {error, code}.",
            "x-service-version": __version__,
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "rt_live_… or rt_test_… API key"},
            },
        },
    }


def _models(ep: Endpoint):
    if ep.body is not None:
        yield ep.body, "validation"
    for model in [ep.response, *ep.responses.values()]:
        if model is not None:
            yield model, "serialization"


def _schemas(endpoints: list[Endpoint]):
    """Component schemas, and the $ref of each (model, mode): pydantic names a model
    that differs between input and output `Name-Input` / `Name-Output`."""
    pairs = {(ErrorBody, "serialization")}
    for ep in endpoints:
        pairs.update(_models(ep))
    refs, top = models_json_schema(sorted(pairs, key=lambda p: (p[0].__name__, p[1])), ref_template=REF)
    return refs, top.get("$defs", {})


def _operation(ep: Endpoint, refs: dict) -> dict[str, Any]:
    def ref_in(model) -> dict:
        return refs[(model, "validation")]

    def ref_out(model) -> dict:
        return refs[(model, "serialization")]

    op: dict[str, Any] = {
        "operationId": ep.name,
        "summary": ep.summary,
        "tags": [ep.tag],
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", ep.path)
        ],
    }
    rule = ACCESS[ep.access]
    if rule is None:
        op["security"] = []
    else:
        op["security"] = [{"bearer": []}]
        op["x-access"] = {"class": ep.access, "roles": sorted(rule.roles),
                          "permissions": sorted(rule.permissions)}
        if ep.method != "GET":
            op["x-access"]["test_keys"] = testmode.describe(ep.path, configures=ep.configures)
    if ep.query is not None:
        for name, f in ep.query.model_fields.items():
            op["parameters"].append({
                "name": name, "in": "query", "required": f.is_required(),
                "schema": ep.query.model_json_schema()["properties"][name],
                **({"description": f.description} if f.description else {}),
            })
    if ep.body is not None:
        op["requestBody"] = {"required": True,
                             "content": {"application/json": {"schema": ref_in(ep.body)}}}
    elif ep.payload is not None:
        op["requestBody"] = {"required": True,
                             "content": {media: {"schema": schema} for media, schema in ep.payload.items()}}
    ok: dict[str, Any] = {"description": "Success"}
    if ep.response is not None:
        ok["content"] = {"application/json": {"schema": ref_out(ep.response)}}
    else:
        ok["content"] = {"application/json": {"schema": {"type": "object"}}}
    responses: dict[str, Any] = {str(ep.status): ok}
    error_codes = set(ep.errors)
    if ep.body is not None or ep.query is not None or ep.payload is not None or ep.method != "GET":
        error_codes.add(400)    # a request that reads no body still refuses one that is not a JSON object
    if ep.body is not None or ep.payload is not None or ep.method != "GET":
        error_codes.update({408, 413})   # the HTTP server's bound on a slow client (docs/deploy.md, "Slow
        # clients"); a body over 1 MiB, read or not
    error_codes.add(429)        # keyed: the key's limit; keyless: the client address's
    error_codes.add(414)        # any request line can be too long for the HTTP server
    if rule is not None:
        error_codes.update({401, 403})
    for code in sorted(error_codes):
        responses[str(code)] = {"description": _ERROR_TEXT.get(code, "Error"),
                                "content": {"application/json": {"schema": ref_out(ErrorBody)}}}
    for code, model in ep.responses.items():
        responses[str(code)] = {"description": _ERROR_TEXT.get(code, "Alternative answer"),
                                "content": {"application/json": {"schema": ref_out(model)}}}
    op["responses"] = responses
    return op
