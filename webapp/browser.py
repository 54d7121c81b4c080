"""What a web page on a tenant's own site needs to reach us (the JS SDK):
CORS on the endpoints a browser calls, and the key in the URL for
`navigator.sendBeacon`, which cannot set an Authorization header. docs/sdk.md."""

from __future__ import annotations

from flask import Flask, Response, request

from cs_daemon.auth.service import Caller
from cs_daemon.errors import Forbidden

from .api import add_missing_headers, bearer_token

BROWSER_PATHS = frozenset({"/api/track", "/api/in-app/stream", "/api/in-app/events"})

# No cookie is ever read, so any origin may call: the key or the stream token is the
# credential. Retry-After must be exposed or the SDK could not honour it in a browser.
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Last-Event-ID",
    "Access-Control-Expose-Headers": "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset",
    "Access-Control-Max-Age": "600",
}


def install(app: Flask) -> None:
    """CORS headers on every answer of the browser paths, preflights (Flask's automatic
    OPTIONS answers) and errors included."""

    @app.after_request
    def _cors(resp: Response) -> Response:
        if request.path in BROWSER_PATHS:
            add_missing_headers(resp, CORS_HEADERS)
        return resp


def beacon_credentials() -> str | None:
    """The bearer key, or else `?api_key=` (a beacon's only way to carry one)."""
    return bearer_token() or request.args.get("api_key") or None


def refuse_wide_key_in_url(caller: Caller) -> None:
    """A key in a URL ends up in logs and page source, so only an ingest-only key, which
    can write events and read nothing, may travel there."""
    if bearer_token() is None and set(caller.permissions) != {"ingest"}:
        raise Forbidden("a key in the URL (?api_key=, for sendBeacon) must have only the ingest permission; "
                        "send other keys as Authorization: Bearer")
