"""In-app messages (docs/channels.md, "In-app"): stream tokens minted by the tenant's backend, and the
server-sent-events stream a front end opens with one."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from flask import Response, g, request
from pydantic import Field

from cs_daemon.channels import in_app_events
from cs_daemon.channels import in_app_tokens as tokens
from cs_daemon.channels.in_app_stream import OpenStream
from cs_daemon.channels.stream_caps import StreamsFull
from cs_daemon.customers.models import Customer
from cs_daemon.errors import NotFound, RateLimited, ValidationFailed
from cs_daemon.schemas import Wire

from .. import stream_handoff
from ..api import Api, Call

api = Api("In-app messages")


class TokenRequest(Wire):
    user_id: str = Field(min_length=1, max_length=255)


class StreamToken(Wire):
    token: str
    expires_at: datetime


# what a stream token is made of (base64url and a dot): anything else is a 400, not a 401
TOKEN_PATTERN = r"^[A-Za-z0-9_.-]*$"


class StreamQuery(Wire):
    token: str | None = Field(None, max_length=4096, pattern=TOKEN_PATTERN,
                              description="A token from POST /api/in-app/tokens")


@api.route("POST", "/api/in-app/tokens", access="read", body=TokenRequest, response=StreamToken, errors=(404,),
           summary="Mint a 24-hour stream token for one user (hand it to your front end, never a key)")
def post_token(call: Call):
    user_id = call.body.user_id
    if call.session.get(Customer, (call.tenant_id, user_id)) is None:
        raise NotFound("user not found")
    token, expires_at = tokens.mint(call.rt.settings.secret_key, call.tenant_id, user_id, call.now)
    return StreamToken(token=token, expires_at=expires_at)


@api.route("GET", "/api/in-app/stream", access="public", query=StreamQuery, errors=(400, 401, 429),
           summary="The user's in-app messages as server-sent events (text/event-stream; "
                   "event: intervention | withdrawn; resumes from Last-Event-ID)")
def get_stream(call: Call):
    resume_from = last_event_id()
    grant = tokens.verify(call.rt.settings.secret_key, call.query.token, call.now)
    try:
        body = OpenStream(call.rt, grant, resume_from)
    except StreamsFull as exc:
        g.rate_headers = {"Retry-After": str(exc.retry_after)}
        raise RateLimited(str(exc)) from None
    request.environ[stream_handoff.OPENED] = body      # the event loop takes it from here
    return Response(body, mimetype="text/event-stream", headers={
        "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
        # the token is the credential (no cookie), so any origin may open the stream
        "Access-Control-Allow-Origin": "*"})


_EVENT_ID = re.compile(r"[0-9]{1,18}")      # the ids the stream writes: ASCII digits, within 64 bits


def last_event_id() -> int | None:
    """The id the client resumes from; None without the header (or with an empty one, as
    EventSource sends none before its first id)."""
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return None
    if not _EVENT_ID.fullmatch(raw):
        message = "must be the id of an event of this stream (a plain integer)"
        raise ValidationFailed(f"invalid Last-Event-ID header: {message}",
                               [{"field": "Last-Event-ID", "message": message}])
    return int(raw)


class InAppEvent(Wire):
    token: str = Field(min_length=1, max_length=4096, pattern=TOKEN_PATTERN, description="The stream token of the user")
    intervention_id: str = Field(min_length=1, max_length=36)
    action: Literal["clicked", "dismissed"]


class InAppEventRecorded(Wire):
    recorded: bool = Field(description="false when it changed nothing (already clicked, already opted out)")
    intervention_id: str
    action: str


@api.route("POST", "/api/in-app/events", access="public", body=InAppEvent, response=InAppEventRecorded,
           errors=(400, 401, 404, 409),
           summary="Report a click on an in-app message (user.responded) or its dismissal for good "
                   "(the user is opted out of in-app messages; user.opted_out); the stream token is the credential")
def post_in_app_event(call: Call):
    body = call.body
    grant = tokens.verify(call.rt.settings.secret_key, body.token, call.now)
    recorded = in_app_events.report(call.session, grant, body.intervention_id, body.action, now=call.now)
    return InAppEventRecorded(recorded=recorded, intervention_id=body.intervention_id, action=body.action)
