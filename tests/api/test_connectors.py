"""Connectors (docs/connectors.md): each platform's payloads at the spec
path and at its native routes, with its native credentials and answers."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import datetime, timezone

import pytest
from sqlalchemy import func, select

from cs_daemon.customers.models import Customer, Event
from tests.conftest import auth

A = "/api/connectors/connector-a"
B = "/api/connectors/connector-b"
C = "/api/connectors/connector-c"


def _events(rt, tenant_id) -> list[Event]:
    with rt.session(tenant_id) as s:
        return list(s.scalars(select(Event).order_by(Event.timestamp, Event.event)))


def _customer(client, key, user_id) -> dict:
    resp = client.get(f"/api/customers/{user_id}", headers=auth(key))
    assert resp.status_code == 200, resp.json
    return resp.json["customer"]


def _nothing_stored(rt, tenant_id) -> bool:
    with rt.session(tenant_id) as s:
        customers = s.scalar(select(func.count()).select_from(Customer))
    return customers == 0 and _events(rt, tenant_id) == []


def _basic(user: str, password: str = "") -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _utc(*args) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


# -- sample payloads, as each platform sends them ----------------------------------------

SEGMENT_BATCH = {"batch": [
    {"type": "identify", "userId": "ada", "messageId": "seg-1", "timestamp": "2026-10-30T08:00:00.000Z",
     "traits": {"name": "Ada Lovelace", "email": "ada@example.com", "role": "CTO", "plan": "pro",
                "company": {"name": "Analytical Engines", "employee_count": 12}}},
    {"type": "track", "userId": "ada", "event": "Created Project", "messageId": "seg-2",
     "timestamp": "2026-10-30T09:00:00+01:00", "properties": {"template": "blank"}},
    {"type": "page", "userId": "ada", "name": "Pricing", "messageId": "seg-3",
     "timestamp": "2026-10-30T09:30:00Z", "properties": {"path": "/pricing"}},
    {"type": "group", "userId": "ada", "groupId": "g1", "traits": {"name": "Analytical"}, "messageId": "seg-4"},
    {"type": "track", "anonymousId": "anon-7", "event": "Visited", "messageId": "seg-5"},
]}

MIXPANEL_RECORDS = [
    {"$distinct_id": "grace", "$token": "will-be-replaced", "$time": 1793347200000,
     "$set": {"$name": "Grace Hopper", "$email": "grace@example.com", "company": "Navy", "team_size": "40"}},
    {"event": "Compiled", "properties": {"distinct_id": "grace", "time": 1793350800,
                                         "$insert_id": "mp-1", "token": "will-be-replaced",
                                         "language": "COBOL", "mp_lib": "python"}},
]

AMPLITUDE_PAYLOAD = {"api_key": "will-be-replaced", "events": [
    {"user_id": "linus", "event_type": "$identify", "time": 1793347200000, "insert_id": "amp-1",
     "user_properties": {"$set": {"name": "Linus", "email": "linus@example.com", "team_size": 3}}},
    {"user_id": "linus", "event_type": "Pushed Commit", "time": 1793350800123, "insert_id": "amp-2",
     "event_properties": {"branch": "main"}, "user_properties": {"plan": "free"}},
    {"device_id": "device-9", "event_type": "Opened App", "insert_id": "amp-3"},
]}


def _mixpanel(key: str) -> list[dict]:
    records = json.loads(json.dumps(MIXPANEL_RECORDS))
    records[0]["$token"] = key
    records[1]["properties"]["token"] = key
    return records


def _amplitude(key: str) -> dict:
    return {**AMPLITUDE_PAYLOAD, "api_key": key}


# -- the spec paths -----------------------------------------------------------------------

def test_segment_batch_creates_the_user_with_traits_and_its_events(client, tenant, rt):
    resp = client.post(A, headers=auth(tenant.key), json=SEGMENT_BATCH)
    assert resp.status_code == 200, resp.json
    assert resp.json == {"accepted": 5, "users_upserted": 2}
    ada = _customer(client, tenant.key, "ada")
    assert (ada["name"], ada["email"], ada["company"], ada["role"], ada["team_size"]) == (
        "Ada Lovelace", "ada@example.com", "Analytical Engines", "CTO", 12)
    assert ada["traits"] == {"plan": "pro"}
    events = {e.idempotency_key: e for e in _events(rt, tenant.id)}
    assert {k: e.event for k, e in events.items()} == {
        "seg-1": "$identify", "seg-2": "Created Project", "seg-3": "$page", "seg-4": "$group", "seg-5": "Visited"}
    assert all(e.source == "connector-a" for e in events.values())
    assert events["seg-2"].timestamp == _utc(2026, 10, 30, 8, 0)  # +01:00 normalised to UTC
    assert events["seg-2"].properties == {"template": "blank"}
    assert events["seg-3"].properties == {"path": "/pricing", "name": "Pricing"}
    assert events["seg-4"].properties == {"group_id": "g1", "traits": {"name": "Analytical"}}
    assert events["seg-5"].user_id == "anon-7"


def test_mixpanel_records_create_the_user_and_never_store_the_token(client, tenant, rt):
    resp = client.post(B, headers=auth(tenant.key), json=_mixpanel(tenant.key))
    assert resp.status_code == 200, resp.json
    assert resp.json == {"accepted": 2, "users_upserted": 1}
    grace = _customer(client, tenant.key, "grace")
    assert (grace["name"], grace["email"], grace["company"], grace["team_size"]) == (
        "Grace Hopper", "grace@example.com", "Navy", 40)
    identify, compiled = _events(rt, tenant.id)
    assert identify.event == "$identify" and identify.timestamp == _utc(2026, 10, 30, 8, 0)  # ms
    assert compiled.event == "Compiled" and compiled.timestamp == _utc(2026, 10, 30, 9, 0)  # seconds
    assert compiled.idempotency_key == "mp-1" and compiled.source == "connector-b"
    assert compiled.properties == {"language": "COBOL", "mp_lib": "python"}
    assert tenant.key not in json.dumps([identify.properties, compiled.properties])


def test_amplitude_events_create_users_and_fill_traits(client, tenant, rt):
    resp = client.post(C, headers=auth(tenant.key), json=_amplitude(tenant.key))
    assert resp.status_code == 200, resp.json
    # the pushed commit carries user properties: an $identify is stored before it, and the
    # answer counts the caller's three events
    assert resp.json == {"accepted": 3, "users_upserted": 2}
    assert len(_events(rt, tenant.id)) == 4
    linus = _customer(client, tenant.key, "linus")
    assert (linus["name"], linus["email"], linus["team_size"]) == ("Linus", "linus@example.com", 3)
    assert linus["traits"] == {"plan": "free"}
    events = {e.idempotency_key: e for e in _events(rt, tenant.id)}
    assert events["amp-2"].event == "Pushed Commit"
    assert events["amp-2"].timestamp == _utc(2026, 10, 30, 9, 0, 0, 123000)
    assert events["amp-2"].properties == {"branch": "main"}
    assert events["amp-3"].user_id == "device-9" and events["amp-3"].source == "connector-c"


@pytest.mark.parametrize("path, payload, sent", [
    (A, lambda key: SEGMENT_BATCH, 5),
    (B, _mixpanel, 2),
    (C, _amplitude, 3),
])
def test_the_platform_event_id_makes_a_repeat_a_duplicate(client, tenant, rt, path, payload, sent):
    body = payload(tenant.key)
    first = client.post(path, headers=auth(tenant.key), json=body).json
    stored = len(_events(rt, tenant.id))
    again = client.post(path, headers=auth(tenant.key), json=body)
    assert again.status_code == 200
    assert first["accepted"] == sent and stored >= sent
    assert again.json == {"accepted": 0, "users_upserted": 0}
    assert len(_events(rt, tenant.id)) == stored


@pytest.mark.parametrize("insert_id", [None, "amp-9"])
def test_an_amplitude_event_with_user_properties_is_one_accepted_event(client, tenant, rt, clock, insert_id):
    event = {"user_id": "linus", "event_type": "Pushed Commit", "event_properties": {"branch": "main"},
             "user_properties": {"plan": "pro"}, **({"insert_id": insert_id} if insert_id else {})}
    resp = client.post(C, headers=auth(tenant.key), json={"api_key": tenant.key, "events": [event]})
    assert resp.json == {"accepted": 1, "users_upserted": 1}
    assert sorted(e.event for e in _events(rt, tenant.id)) == ["$identify", "Pushed Commit"]   # stored as two
    native = client.post(f"{C}/2/httpapi", json={"api_key": tenant.key, "events": [{**event, "insert_id": "n-1"}]})
    assert native.json["events_ingested"] == 1
    assert len(_events(rt, tenant.id)) == 4
    if insert_id:   # a repeat is a duplicate of one event, not two
        assert client.post(C, headers=auth(tenant.key), json={"api_key": tenant.key, "events": [event]}).json == {
            "accepted": 0, "users_upserted": 0}


def test_a_platform_event_with_a_reserved_name_does_not_touch_the_customer(client, tenant, rt):
    resp = client.post(B, headers=auth(tenant.key), json={"event": "$identify", "properties": {
        "distinct_id": "u1", "email": "nobody@example.com", "$insert_id": "x1"}})
    assert resp.status_code == 200
    [event] = _events(rt, tenant.id)
    assert event.event == "mixpanel:$identify"
    assert _customer(client, tenant.key, "u1")["email"] is None


@pytest.mark.parametrize("path, payload, field", [
    (A, {"batch": [{"type": "track", "userId": "u", "event": "ok", "messageId": "m1"},
                   {"type": "track", "event": "no user"}]}, "batch[1].userId"),
    (A, {"type": "launch", "userId": "u"}, "type"),
    (A, {"type": "track", "userId": "u", "event": "x", "timestamp": "last tuesday"}, "timestamp"),
    (A, {"type": "identify", "userId": "u", "traits": ["not", "an", "object"]}, "traits"),
    (A, {"batch": "nope"}, "batch"),
    (B, [{"event": "ok", "properties": {"distinct_id": "u"}}, {"event": "x", "properties": {}}],
     "[1].properties.distinct_id"),
    (B, {"properties": {"distinct_id": "u"}}, "event"),
    (B, {"event": "x" * 256, "properties": {"distinct_id": "u"}}, "event"),
    (C, {"api_key": "k", "events": [{"user_id": "u1", "event_type": "ok"},
                                    {"user_id": "u2", "event_type": "bad", "time": "soon"}]}, "events[1].time"),
    (C, {"api_key": "k"}, "events"),
    (C, {"events": [{"event_type": "no user"}]}, "events[0].user_id"),
])
def test_a_bad_payload_is_refused_and_nothing_is_stored(client, tenant, rt, path, payload, field):
    resp = client.post(path, headers=auth(tenant.key), json=payload)
    assert resp.status_code == 400
    assert resp.json["code"] == "validation_failed"
    assert field in [d["field"] for d in resp.json["details"]], resp.json
    assert _nothing_stored(rt, tenant.id)


@pytest.mark.parametrize("path", [A, B, C, f"{A}/v1/track", f"{B}/track", f"{C}/2/httpapi"])
def test_a_body_that_is_not_json_is_refused(client, tenant, rt, path):
    resp = client.post(path, headers={**auth(tenant.key), "Content-Type": "application/json"}, data="{nope")
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert _nothing_stored(rt, tenant.id)


@pytest.mark.parametrize("path", [A, B, C, f"{A}/v1/track", f"{C}/2/httpapi"])
@pytest.mark.parametrize("number", ["NaN", "1e400"])
def test_a_body_with_numbers_no_json_column_takes_is_refused(client, tenant, rt, path, number):
    body = '{"type": "track", "userId": "u", "event": "x", "properties": {"v": %s}}' % number
    resp = client.post(path, headers={**auth(tenant.key), "Content-Type": "application/json"}, data=body)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed", resp.json
    assert resp.json["error"].startswith("the request body holds what cannot be stored: ")
    assert number in resp.json["details"][0]["message"]
    assert _nothing_stored(rt, tenant.id)


def test_connectors_need_the_ingest_permission(client, tenant):
    ingest_only = tenant.issue("editor", ["ingest"])
    read_only = tenant.issue("viewer", ["read"])
    body = {"type": "track", "userId": "u", "event": "e"}
    assert client.post(A, headers=auth(ingest_only), json=body).status_code == 200
    assert client.post(A, headers=auth(read_only), json=body).status_code == 403
    assert client.post(A, json=body).status_code == 401


def test_a_test_key_marks_connector_events_test(client, tenant, rt):
    key = tenant.issue("editor", ["ingest"], test=True)
    assert client.post(A, headers=auth(key), json={"type": "track", "userId": "t", "event": "e"}).status_code == 200
    [event] = _events(rt, tenant.id)
    assert event.test is True


# -- native routes: Segment -------------------------------------------------------------

@pytest.mark.parametrize("credentials", ["basic", "basic-password", "bearer"])
def test_segment_native_track_takes_basic_or_bearer(client, tenant, rt, credentials):
    headers = {"basic": _basic(tenant.key), "basic-password": _basic("", tenant.key),
               "bearer": auth(tenant.key)}[credentials]
    resp = client.post(f"{A}/v1/track", headers=headers,
                       json={"userId": "u1", "event": "Signed Up", "messageId": "m-1"})
    assert resp.status_code == 200
    assert resp.json == {"success": True}
    [event] = _events(rt, tenant.id)
    assert (event.event, event.user_id, event.idempotency_key) == ("Signed Up", "u1", "m-1")


def test_segment_native_identify_batch_and_gzip(client, tenant, rt):
    resp = client.post(f"{A}/v1/identify", headers=_basic(tenant.key),
                       json={"userId": "u1", "traits": {"email": "u1@example.com"}})
    assert resp.json == {"success": True}
    body = gzip.compress(json.dumps({"batch": [
        {"type": "screen", "userId": "u1", "name": "Home", "messageId": "s1"},
        {"type": "alias", "userId": "u1", "previousId": "anon-1", "messageId": "a1"}],
        "writeKey": tenant.key}).encode())
    resp = client.post(f"{A}/v1/batch", data=body, headers={
        **_basic(tenant.key), "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert resp.status_code == 200 and resp.json == {"success": True}
    assert _customer(client, tenant.key, "u1")["email"] == "u1@example.com"
    by_key = {e.idempotency_key: e for e in _events(rt, tenant.id)}
    assert by_key["s1"].event == "$screen" and by_key["s1"].properties == {"name": "Home"}
    assert by_key["a1"].event == "$alias" and by_key["a1"].properties == {"previous_id": "anon-1"}


def test_segment_native_batch_needs_a_batch(client, tenant, rt):
    resp = client.post(f"{A}/v1/batch", headers=_basic(tenant.key),
                       json={"type": "track", "userId": "u", "event": "e"})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "batch"


def test_segment_native_wrong_key_is_401(client, tenant, rt):
    wrong = "rt_live_" + "x" * 32
    for headers in (_basic(wrong), auth(wrong), {}):
        resp = client.post(f"{A}/v1/track", headers=headers, json={"userId": "u", "event": "e"})
        assert resp.status_code == 401 and resp.json["code"] == "unauthorized"
    assert _nothing_stored(rt, tenant.id)


# -- native routes: Mixpanel ------------------------------------------------------------

def _form(records) -> dict:
    return {"data": json.dumps(records), "verbose": "1", "ip": "0"}


def test_mixpanel_native_track_with_the_token_in_a_base64_form_field(client, tenant, rt):
    records = [_mixpanel(tenant.key)[1]]
    data = base64.b64encode(json.dumps(records).encode()).decode()
    resp = client.post(f"{B}/track", data={"data": data, "verbose": "1"})
    assert resp.status_code == 200
    assert resp.json == {"status": 1, "error": None}
    [event] = _events(rt, tenant.id)
    assert event.event == "Compiled" and event.source == "connector-b"


def test_mixpanel_native_engage_with_the_token_in_a_plain_form_field(client, tenant):
    resp = client.post(f"{B}/engage", data=_form([_mixpanel(tenant.key)[0]]))
    assert resp.json == {"status": 1, "error": None}
    assert _customer(client, tenant.key, "grace")["email"] == "grace@example.com"


@pytest.mark.parametrize("credentials", ["basic", "bearer"])
def test_mixpanel_native_import_with_basic_or_bearer_and_a_json_body(client, tenant, rt, credentials):
    records = [{"event": "Old Thing", "properties": {"distinct_id": "u1", "time": 1700000000000, "$insert_id": "i1"}}]
    headers = _basic(tenant.key) if credentials == "basic" else auth(tenant.key)
    resp = client.post(f"{B}/import", headers=headers, json=records)
    assert resp.json == {"status": 1, "error": None}
    [event] = _events(rt, tenant.id)
    assert event.timestamp == datetime.fromtimestamp(1700000000, tz=timezone.utc)


def test_mixpanel_native_refusals_say_status_0(client, tenant, rt):
    wrong = _mixpanel("rt_live_" + "y" * 32)
    resp = client.post(f"{B}/track", data=_form([wrong[1]]))
    assert resp.status_code == 401
    assert resp.json["status"] == 0 and resp.json["code"] == "unauthorized"
    mixed = [_mixpanel(tenant.key)[1], _mixpanel("rt_live_" + "z" * 32)[1]]
    assert client.post(f"{B}/track", data=_form(mixed)).status_code == 401
    assert client.post(f"{B}/track", data={"verbose": "1"}).status_code == 401  # no credential at all
    resp = client.post(f"{B}/track", headers=auth(tenant.key), data={"data": "%%% not json"})
    assert resp.status_code == 400 and resp.json["status"] == 0 and resp.json["details"][0]["field"] == "data"
    record = json.dumps([_mixpanel(tenant.key)[1]]).replace("}", ', "ratio": NaN}', 1)
    for data in (record, base64.b64encode(record.encode()).decode()):
        resp = client.post(f"{B}/track", headers=auth(tenant.key), data={"data": data})
        assert resp.status_code == 400 and resp.json["status"] == 0
        assert resp.json["details"] == [{"field": "data", "message": "NaN is not a JSON value"}]
    assert _nothing_stored(rt, tenant.id)


# -- native routes: Amplitude -----------------------------------------------------------

@pytest.mark.parametrize("path", ["/2/httpapi", "/batch"])
def test_amplitude_native_routes_with_the_api_key_in_the_body(client, tenant, rt, clock, path):
    body = _amplitude(tenant.key)
    resp = client.post(f"{C}{path}", json=body)
    assert resp.status_code == 200
    assert resp.json == {"code": 200, "events_ingested": 3,
                         "payload_size_bytes": len(json.dumps(body).encode()),
                         "server_upload_time": int(clock.now().timestamp() * 1000)}
    assert len(_events(rt, tenant.id)) == 4


def test_amplitude_native_with_bearer_and_a_wrong_key(client, tenant, rt):
    events = {"events": [{"user_id": "u1", "event_type": "e", "insert_id": "z1"}]}
    assert client.post(f"{C}/2/httpapi", headers=auth(tenant.key), json=events).json["events_ingested"] == 1
    wrong = client.post(f"{C}/2/httpapi", json={"api_key": "rt_live_" + "q" * 32, **events})
    assert wrong.status_code == 401 and wrong.json["code"] == "unauthorized"
    assert client.post(f"{C}/2/httpapi", json=events).status_code == 401
    assert len(_events(rt, tenant.id)) == 1


def test_connector_routes_are_in_the_openapi_document(client):
    paths = client.get("/api/openapi.json").json["paths"]
    for path in (A, B, C, f"{A}/v1/batch", f"{B}/engage", f"{C}/2/httpapi", f"{C}/batch"):
        assert "post" in paths[path]
