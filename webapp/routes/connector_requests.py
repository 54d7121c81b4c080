"""Reading a platform's request as its own client sends it: the body (gzip or not; JSON,
or Mixpanel's form field `data`) and the API key wherever that client puts it."""

from __future__ import annotations

import zlib
from typing import Any

from flask import g, request
from werkzeug.exceptions import RequestEntityTooLarge

from cs_daemon.connectors import BadPayload, mixpanel
from cs_daemon.errors import Unauthorized, ValidationFailed

from ..api import bearer_token, json_body

MAX_INFLATED = 1024 * 1024
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def raw_body() -> bytes:
    """The request body, inflated when sent with `Content-Encoding: gzip`."""
    if "connector_body" not in g:
        data = request.get_data(cache=True)
        if request.headers.get("Content-Encoding", "").strip().lower() == "gzip":
            data = _gunzip(data)
        g.connector_body = data
    return g.connector_body


def _gunzip(data: bytes) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, MAX_INFLATED + 1)
    except zlib.error:
        raise ValidationFailed("the request body is not valid gzip",
                               [{"field": "body", "message": "not valid gzip"}]) from None
    if len(out) > MAX_INFLATED:
        raise RequestEntityTooLarge()
    return out


def json_payload() -> Any:
    if "connector_payload" not in g:
        g.connector_payload = json_body(raw_body())
    return g.connector_payload


def mixpanel_payload() -> Any:
    """Mixpanel's records: the form field `data` (JSON or base64 of JSON), or a JSON body."""
    if request.mimetype not in FORM_TYPES:
        return json_payload()
    if "connector_payload" not in g:
        data = request.form.get("data")
        if data is None:
            raise ValidationFailed("the form field data is required",
                                   [{"field": "data", "message": "is required"}])
        try:
            g.connector_payload = mixpanel.decode_data(data)
        except BadPayload as exc:
            raise ValidationFailed(f"invalid data: {exc.summary()}", exc.details) from None
    return g.connector_payload


def basic_or_bearer() -> str | None:
    """HTTP Basic with the key as the user name (or, with no user name, the password), or
    a bearer key."""
    auth = request.authorization
    if auth is not None and auth.type == "basic":
        return auth.username or auth.password or None
    return bearer_token()


def segment_key() -> str | None:
    return basic_or_bearer()


def mixpanel_key() -> str | None:
    """Basic or Bearer, else the project `token` the records carry (all the same one)."""
    key = basic_or_bearer()
    if key:
        return key
    try:
        found = mixpanel.tokens(mixpanel_payload())
    except ValidationFailed:
        return None
    if len(found) > 1:
        raise Unauthorized("the records carry different tokens; send one project's records per request")
    return next(iter(found), None)


def amplitude_key() -> str | None:
    """`api_key` in the body, else a bearer key."""
    try:
        payload = json_payload()
    except ValidationFailed:
        return bearer_token()
    key = payload.get("api_key") if isinstance(payload, dict) else None
    return key if isinstance(key, str) and key else bearer_token()
