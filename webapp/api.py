"""Endpoint declarations: one decorator names the method, path, access class and the
pydantic models of body, query and response. The same declaration registers the Flask
route, runs authentication, rate limiting, the access table and validation, and feeds
the OpenAPI document, so the document cannot drift from the code."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from flask import Blueprint, Response, current_app, g, request
from pydantic import BaseModel, ValidationError

from cs_daemon import addresses, jsontext, logs, metrics
from cs_daemon.auth import keys, testmode
from cs_daemon.auth.admission import admit, admit_address
from cs_daemon.auth.access import ACCESS, refusal
from cs_daemon.auth.service import Caller
from cs_daemon.errors import Forbidden, NotFound, RateLimited, ServiceError, Unauthorized, ValidationFailed
from cs_daemon.runtime import Runtime
from cs_daemon.uow import uow_of

_PARAM = re.compile(r"{(\w+)}")


@dataclass
class Endpoint:
    method: str
    path: str
    access: str
    handler: Callable
    summary: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    errors: tuple[int, ...] = ()
    tag: str = ""
    responses: dict[int, type[BaseModel] | None] = field(default_factory=dict)
    payload: dict[str, dict] | None = None   # a body the handler reads itself: media type → JSON Schema
    credentials: Callable[[], str | None] | None = None
    atomic: bool = True   # one transaction for the whole request
    configures: bool = False   # changes live configuration no path id names: test keys refused
    address_limit: str = "keyless"   # keyless endpoints: which per-address limit (docs/api.md, Rate limits)
    quick: Callable[[dict], Any] | None = None   # reads a plain body without the model, or None
    quick_json: Callable[[bytes], Any] | None = None   # the same on the raw body, before it is parsed

    @property
    def flask_path(self) -> str:
        # a user id is any string the tenant sent in its events, "org/7" too (its %2F
        # reaches the router as "/"), so `{user_id}` takes the rest of the path
        return _PARAM.sub(lambda m: f"<path:{m[1]}>" if m[1] == "user_id" else f"<{m[1]}>", self.path)

    @property
    def name(self) -> str:
        return self.handler.__name__


@dataclass
class Call:
    """What a handler gets: the runtime, the caller, the open unit of work and the
    validated input."""

    rt: Runtime
    session: Any
    caller: Caller | None
    body: Any = None
    query: Any = None

    @property
    def now(self):
        return self.rt.now()

    @property
    def tenant_id(self) -> str:
        assert self.caller is not None
        return self.caller.tenant_id


class Api:
    """A group of endpoints (one spec section); registered on the app as a blueprint."""

    def __init__(self, tag: str):
        self.tag = tag
        self.endpoints: list[Endpoint] = []

    def route(self, method: str, path: str, *, access: str, summary: str, body=None,
              query=None, response=None, status: int = 200, errors: tuple[int, ...] = (),
              responses: dict | None = None, payload: dict[str, dict] | None = None,
              credentials: Callable[[], str | None] | None = None, atomic: bool | None = None, configures: bool = False, address_limit: str = "keyless",
              quick: Callable[[dict], Any] | None = None, quick_json: Callable[[bytes], Any] | None = None):
        """`credentials` finds the API key where a platform's own client puts it (the
        connectors' native routes); by default it is the bearer token. A GET runs without
        a transaction around it (`atomic=False`: no BEGIN/COMMIT round trips) unless it
        says `atomic=True` because it writes more than one row that belong together.
        `configures` says a write changes the tenant's live configuration without naming
        it in the path (settings, a new webhook endpoint): a test key may not make it
        (cs_daemon/auth/testmode.py; path ids are judged by what they name). A keyless
        (`public`) endpoint is limited per client address: `address_limit` is "keyless"
        (CS_ADDRESS_RATE_LIMIT) or "health" (CS_HEALTH_RATE_LIMIT). `payload` documents a
        body the handler parses itself (a platform's own format, a signed webhook): for
        each media type it accepts, the JSON Schema of what it reads; such a body is
        answered 400 when it cannot be read, like a validated one. `quick(body)` reads a body
        of the plain kind `body` certainly takes into the same values without building
        the model (ingest's hot path), and says None for any other, which `body` then
        validates with its own errors. `quick_json(raw)` does what `quick` does on the raw
        body, parsing and checking it in one pass (validation on the raw body, no Python
        object made per JSON value first): None sends the body the usual way."""
        if access not in ACCESS:
            raise ValueError(f"unknown access class {access!r}")
        if address_limit not in ADDRESS_LIMITS:
            raise ValueError(f"unknown address limit {address_limit!r}")

        def decorate(fn: Callable) -> Callable:
            self.endpoints.append(Endpoint(
                method=method.upper(), path=path, access=access, handler=fn, summary=summary,
                body=body, query=query, response=response, status=status, errors=errors,
                tag=self.tag, responses=responses or {}, payload=payload, credentials=credentials,
                atomic=method.upper() != "GET" if atomic is None else atomic, configures=configures,
                address_limit=address_limit, quick=quick, quick_json=quick_json,
            ))
            return fn

        return decorate

    def blueprint(self) -> Blueprint:
        bp = Blueprint(self.tag.lower().replace(" ", "_"), __name__)
        for ep in self.endpoints:
            bp.add_url_rule(ep.flask_path, ep.name, _view(ep), methods=[ep.method])
        return bp


def _view(ep: Endpoint) -> Callable:
    def view(**path_params):
        rt: Runtime = current_app.extensions["cs"]
        with rt.session(atomic=ep.atomic) as session:
            caller = _authorize(rt, session, ep)
            call = Call(rt, session, caller)
            _storable(path_params)
            if caller is not None and ep.method != "GET":
                testmode.require_test_data(session, test_key=caller.test, path_ids=path_params,
                                           configures=ep.configures)
            if ep.query is not None:
                call.query = _validate(ep.query, request.args.to_dict(), "query")
            if ep.body is not None:
                raw = request.get_data(cache=False)
                call.body = (ep.quick_json and ep.quick_json(raw)) or _read_body(ep, raw)
            elif ep.payload is None and ep.method != "GET" and request.is_json:
                _unread_body(request.get_data(cache=False))
            result = ep.handler(call, **path_params)
        return render(result, ep.status)

    view.__name__ = ep.name
    return view


def _authorize(rt: Runtime, session, ep: Endpoint) -> Caller | None:
    if ACCESS[ep.access] is None:
        _admit_address(rt, ep)
        return None
    raw = ep.credentials() if ep.credentials else bearer_token()
    if not raw or not keys.well_formed(raw):
        raise Unauthorized("missing or malformed API key")
    caller, verdict = admit(session, raw, cache=rt.cache, memo=rt.key_memo, now=rt.now())
    uow_of(session).tenant_id = caller.tenant_id
    logs.set_tenant(caller.tenant_id)
    g.rate_headers = verdict.headers()
    if not verdict.allowed:
        metrics.bump(metrics.RATE_LIMITED, limit="key")
        raise RateLimited(f"rate limit of {verdict.limit} requests a minute reached; retry in {verdict.retry_after} s")
    why = refusal(ep.access, role=caller.role, permissions=list(caller.permissions), partner=caller.partner)
    if why:
        raise Forbidden(why)
    return caller


# keyless endpoints: the setting holding each per-address limit (requests a minute)
ADDRESS_LIMITS = {"keyless": "cs_address_rate_limit", "health": "cs_health_rate_limit"}


def _admit_address(rt: Runtime, ep: Endpoint) -> None:
    settings = rt.settings
    address = addresses.client(request.remote_addr, request.headers.get("X-Forwarded-For"),
                               settings.cs_trusted_proxies)
    limit = getattr(settings, ADDRESS_LIMITS[ep.address_limit])
    verdict = admit_address(rt.cache, f"{ep.method}{ep.path}", address, limit, rt.now())
    if not verdict.allowed:
        g.rate_headers = verdict.headers()
        metrics.bump(metrics.RATE_LIMITED, limit="address")
        raise RateLimited(f"rate limit of {limit} requests a minute from one address reached on this endpoint; "
                          f"retry in {verdict.retry_after} s")


def _storable(path_params: dict[str, str]) -> None:
    """No stored id or value holds the NUL character (PostgreSQL text cannot): a path
    with one names nothing, a query with one is invalid."""
    for name, value in path_params.items():
        if jsontext.NUL in value:
            raise NotFound(f"no {name.removesuffix('_id').replace('_', ' ')} has that id")
    for name, value in request.args.items(multi=True):
        if jsontext.NUL in value or jsontext.NUL in name:
            raise ValidationFailed(f"invalid query: {name}: may not contain the NUL character",
                                   [{"field": name, "message": "may not contain the NUL character"}])


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header[:7].lower() == "bearer " else None


def _read_body(ep: Endpoint, raw: bytes) -> Any:
    data = json_body(raw) if raw.strip() else {}
    return (ep.quick and isinstance(data, dict) and ep.quick(data)) or _validate(ep.body, data, "body")


def _unread_body(raw: bytes) -> None:
    """A JSON body sent to an endpoint that reads none (approve, pause, ...) must still be
    a JSON object: malformed or another value, it is a 400 as anywhere, before anything
    changes (docs/api.md, Errors). Another kind of body is not read (the one-click
    unsubscribe's form post)."""
    if raw.strip() and not isinstance(json_body(raw), dict):
        raise ValidationFailed("the request body must be a JSON object",
                               [{"field": "body", "message": "must be a JSON object"}])


def json_body(raw: bytes) -> Any:
    """A request body read as JSON (cs_daemon/jsontext.py), or 400 saying what is wrong."""
    try:
        return jsontext.loads(raw)
    except jsontext.Unstorable as exc:
        raise ValidationFailed(f"the request body holds what cannot be stored: {exc}",
                               [{"field": "body", "message": str(exc)}]) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed("the request body is not valid JSON",
                               [{"field": "body", "message": str(exc)}]) from None


def _validate(model: type[BaseModel], data: Any, where: str):
    if not isinstance(data, dict):
        raise ValidationFailed(f"the request {where} must be a JSON object",
                               [{"field": where, "message": "must be an object"}])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [{"field": _loc(e["loc"]) or where, "message": e["msg"]} for e in exc.errors()]
        first = details[0]
        raise ValidationFailed(f"invalid {where}: {first['field']}: {first['message']}", details) from None


def _loc(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def render(result: Any, status: int = 200) -> Response:
    if isinstance(result, tuple):
        result, status = result
    if isinstance(result, Response):
        return result
    if isinstance(result, BaseModel):
        payload = result.model_dump_json()
    else:
        payload = json.dumps(result, default=str)
    return Response(payload, status=status, mimetype="application/json")


def add_missing_headers(resp: Response, values: dict[str, str]) -> None:
    """Each header of `values` the response does not carry yet (as `headers.setdefault`,
    which raises and catches a KeyError for every missing header: most of the cost of an
    answer's after-request hooks on the ingest path)."""
    have = {name.lower() for name in resp.headers.keys()}
    for name, value in values.items():
        if name.lower() not in have:
            resp.headers.add(name, value)


def error_response(exc: ServiceError) -> Response:
    resp = Response(json.dumps(exc.body()), status=exc.status, mimetype="application/json")
    if exc.status == 401:
        resp.headers["WWW-Authenticate"] = "Bearer"    # as docs/api.md gives it
    return resp
