"""Connectors (docs/connectors.md): each platform's payloads at its spec
path answer `{accepted, users_upserted}`; beneath it, the platform's native ingestion
routes take its official library's requests (its credentials, its answer)."""

from __future__ import annotations

import json
from typing import Any, Callable

from flask import Blueprint, Response, request

from cs_daemon.connectors import BadPayload, amplitude, mixpanel, segment
from cs_daemon.connectors.intake import ingest_all
from cs_daemon.connectors.schemas import (
    AmplitudeAnswer, ConnectorResult, MixpanelAnswer, SegmentAnswer,
)
from cs_daemon.customers.ingest import IngestResult
from cs_daemon.errors import ValidationFailed

from ..api import Api, Call
from .connector_requests import (
    amplitude_key, json_payload, mixpanel_key, mixpanel_payload, raw_body, segment_key,
)

A = "/api/connectors/connector-a"
B = "/api/connectors/connector-b"
C = "/api/connectors/connector-c"

# what each platform's client sends (parsed and checked by cs_daemon/connectors/, not by
# a model): documented as the request body; `Content-Encoding: gzip` is accepted too
_RECORD = {"type": "object"}
SEGMENT_BODY = {"application/json": _RECORD}
MIXPANEL_BODY = {
    "application/json": {"anyOf": [_RECORD, {"type": "array", "items": _RECORD}]},
    "application/x-www-form-urlencoded": {"type": "object", "required": ["data"],
                                          "properties": {"data": {"type": "string"}}},
}
AMPLITUDE_BODY = {"application/json": {"type": "object", "required": ["events"], "properties": {
    "api_key": {"type": "string"}, "events": {"type": "array", "items": _RECORD}}}}


class ConnectorApi(Api):
    def blueprint(self) -> Blueprint:
        bp = super().blueprint()
        bp.after_request(_mixpanel_error_status)
        return bp


def _mixpanel_error_status(resp: Response) -> Response:
    """Mixpanel's client reads `status` of every answer: a refusal says 0 as well."""
    if resp.status_code >= 400 and request.path.startswith(B + "/") and resp.is_json:
        body = resp.get_json(silent=True)
        if isinstance(body, dict) and "status" not in body:
            resp.set_data(json.dumps({**body, "status": 0}))
    return resp


api = ConnectorApi("Connectors")


def _ingest(call: Call, source: str, normalise: Callable, *args: Any) -> IngestResult:
    try:
        events = normalise(*args)
    except BadPayload as exc:
        raise ValidationFailed(f"invalid payload: {exc.summary()}", exc.details) from None
    return ingest_all(call.session, call.tenant_id, events, source=source,
                      test=call.caller.test, now=call.now)


def _result(ingested: IngestResult) -> ConnectorResult:
    return ConnectorResult(accepted=ingested.accepted, users_upserted=ingested.users_upserted)


# -- our answer at the spec paths (bearer key) ------------------------------------------

@api.route("POST", A, access="ingest", response=ConnectorResult, payload=SEGMENT_BODY,
           summary="Segment messages: one message, or {batch: [...]}")
def post_connector_a(call: Call):
    return _result(_ingest(call, "connector-a", segment.normalise, json_payload()))


@api.route("POST", B, access="ingest", response=ConnectorResult, payload=MIXPANEL_BODY,
           summary="Mixpanel records: one event or profile update, or an array of them")
def post_connector_b(call: Call):
    return _result(_ingest(call, "connector-b", mixpanel.normalise, mixpanel_payload()))


@api.route("POST", C, access="ingest", response=ConnectorResult, payload=AMPLITUDE_BODY,
           summary="Amplitude HTTP V2 payload: {api_key, events: [...]}")
def post_connector_c(call: Call):
    return _result(_ingest(call, "connector-c", amplitude.normalise, json_payload()))


# -- the platforms' native routes -------------------------------------------------------

def _segment_route(kind: str) -> None:
    def handler(call: Call):
        _ingest(call, "connector-a", segment.normalise, json_payload(), kind)
        return SegmentAnswer()

    handler.__name__ = f"post_connector_a_v1_{kind}"
    api.route("POST", f"{A}/v1/{kind}", access="ingest", credentials=segment_key,
              response=SegmentAnswer, payload=SEGMENT_BODY,
              summary=f"Segment tracking API /v1/{kind} (Basic with the key as user, or Bearer)")(handler)


for _kind in (*segment.KINDS, "batch"):
    _segment_route(_kind)


def _mixpanel_route(name: str) -> None:
    def handler(call: Call):
        _ingest(call, "connector-b", mixpanel.normalise, mixpanel_payload())
        return MixpanelAnswer()

    handler.__name__ = f"post_connector_b_{name}"
    api.route("POST", f"{B}/{name}", access="ingest", credentials=mixpanel_key,
              response=MixpanelAnswer, payload=MIXPANEL_BODY,
              summary=f"Mixpanel ingestion API /{name} (token in the records, Basic or Bearer)")(handler)


for _name in ("track", "engage", "import"):
    _mixpanel_route(_name)


def _amplitude_route(path: str, name: str) -> None:
    def handler(call: Call):
        payload = json_payload()
        _ingest(call, "connector-c", amplitude.normalise, payload)
        return AmplitudeAnswer(events_ingested=amplitude.count_events(payload),
                               payload_size_bytes=len(raw_body()),
                               server_upload_time=int(call.now.timestamp() * 1000))

    handler.__name__ = f"post_connector_c_{name}"
    api.route("POST", f"{C}{path}", access="ingest", credentials=amplitude_key,
              response=AmplitudeAnswer, payload=AMPLITUDE_BODY,
              summary=f"Amplitude {path} (api_key in the body, or Bearer)")(handler)


_amplitude_route("/2/httpapi", "httpapi")
_amplitude_route("/batch", "batch")
