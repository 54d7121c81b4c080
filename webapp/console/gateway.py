"""The console acts through the API's own endpoint declarations: the same access rule
(role and permission), the same test-mode rule, the same validation of the body and
the same handler, called in the console request's unit of work. So a console button can
do exactly what the signed-in member's or key's API call could, and its refusals and
validation messages are the API's, word for word."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from cs_daemon.auth import testmode
from cs_daemon.auth.access import refusal
from cs_daemon.errors import Forbidden

from ..api import Call, Endpoint, _validate
from ..endpoints import all_apis


@lru_cache(maxsize=1)
def _endpoints() -> dict[tuple[str, str], Endpoint]:
    return {(ep.method, ep.path): ep for api in all_apis() for ep in api.endpoints}


def has(method: str, path: str) -> bool:
    """Whether this daemon serves that endpoint (later features show up when they exist)."""
    return (method, path) in _endpoints()


def allowed(caller, method: str, path: str) -> bool:
    """Whether the caller may use the endpoint: what decides which controls a page shows."""
    ep = _endpoints().get((method, path))
    return ep is not None and refusal(ep.access, role=caller.role, permissions=list(caller.permissions),
                                      partner=caller.partner) is None


def call(rt, session, caller, method: str, path: str, *, body: Any = None, query: dict | None = None,
         **path_params: str) -> Any:
    """Run the endpoint as the caller; its answer as plain JSON values. Raises the
    ServiceError the API would answer with."""
    ep = _endpoints()[(method, path)]
    why = refusal(ep.access, role=caller.role, permissions=list(caller.permissions), partner=caller.partner)
    if why:
        raise Forbidden(why)
    if method != "GET":
        testmode.require_test_data(session, test_key=caller.test, path_ids=path_params, configures=ep.configures)
    done = Call(rt, session, caller)
    if ep.query is not None:
        done.query = _validate(ep.query, {k: v for k, v in (query or {}).items() if v not in (None, "")}, "query")
    if ep.body is not None:
        done.body = _validate(ep.body, body if body is not None else {}, "body")
    result = ep.handler(done, **path_params)
    if isinstance(result, tuple):
        result = result[0]
    return result.model_dump(mode="json") if isinstance(result, BaseModel) else result
