"""The connectors' pure normalisers: times, traits and platform specifics."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pytest

from cs_daemon.connectors import BadPayload, amplitude, mixpanel, segment
from cs_daemon.connectors.common import derived_key, moment, person_traits

UTC = timezone.utc


@pytest.mark.parametrize("value, expected", [
    ("2026-10-30T09:00:00Z", datetime(2026, 10, 30, 9, tzinfo=UTC)),
    ("2026-10-30T10:00:00+01:00", datetime(2026, 10, 30, 9, tzinfo=UTC)),
    ("2026-10-30 09:00:00.250000", datetime(2026, 10, 30, 9, 0, 0, 250000, tzinfo=UTC)),  # no zone: UTC
    (1793350800, datetime(2026, 10, 30, 9, tzinfo=UTC)),  # seconds
    (1793350800.5, datetime(2026, 10, 30, 9, 0, 0, 500000, tzinfo=UTC)),
    (1793350800000, datetime(2026, 10, 30, 9, tzinfo=UTC)),  # milliseconds
    ("1793350800000", datetime(2026, 10, 30, 9, tzinfo=UTC)),
    (None, None),
])
def test_times_become_aware_utc(value, expected):
    got = moment(value, "time")
    assert got == expected
    assert got is None or got.utcoffset().total_seconds() == 0


@pytest.mark.parametrize("value", ["soon", True, [1], {"t": 1}, 1e30])
def test_bad_times_name_the_field(value):
    with pytest.raises(BadPayload) as caught:
        moment(value, "properties.time")
    assert caught.value.details[0]["field"] == "properties.time"


def test_person_traits_flatten_a_company_and_build_a_name():
    assert person_traits({"firstName": "Ada", "lastName": "Lovelace",
                          "company": {"name": "Engines", "employee_count": 12, "plan": "pro"}}) == {
        "firstName": "Ada", "lastName": "Lovelace", "name": "Ada Lovelace", "company": "Engines", "team_size": 12}
    assert person_traits({"name": "Ada", "first_name": "A"})["name"] == "Ada"


def test_a_derived_key_stays_within_255_characters():
    assert derived_key("k1", "identify") == "k1#identify"
    assert len(derived_key("x" * 255, "identify")) <= 255
    assert derived_key(None, "identify") is None


def test_segment_native_kind_wins_over_the_message_type():
    [event] = segment.normalise({"userId": 42, "event": "Paid", "type": "page"}, "track")
    assert (event.user_id, event.event) == ("42", "Paid")


def test_segment_batch_problems_are_all_reported():
    with pytest.raises(BadPayload) as caught:
        segment.normalise({"batch": [{"type": "track"}, {"type": "alias", "userId": "u"}]})
    fields = [d["field"] for d in caught.value.details]
    assert fields == ["batch[0].userId", "batch[1].previousId"]


@pytest.mark.parametrize("encode", [
    lambda s: s,
    lambda s: base64.b64encode(s.encode()).decode(),
    lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
])
def test_mixpanel_data_is_json_or_base64(encode):
    records = [{"event": "é?>", "properties": {"distinct_id": "u"}}]
    assert mixpanel.decode_data(encode(json.dumps(records))) == records


def test_mixpanel_profile_without_set_stores_nothing_and_a_retry_has_the_same_key():
    assert mixpanel.normalise({"$distinct_id": "u", "$add": {"n": 1}}) == []
    update = {"$distinct_id": "u", "$time": 1793350800.25, "$set": {"$email": "u@example.com"}}
    [first] = mixpanel.normalise(update)
    [again] = mixpanel.normalise(json.loads(json.dumps(update)))
    assert first.properties == {"email": "u@example.com"}
    assert first.idempotency_key == again.idempotency_key is not None


def test_amplitude_user_properties_ignore_other_operations():
    events = amplitude.normalise({"events": [{"user_id": "u", "event_type": "x", "insert_id": "i",
                                              "user_properties": {"plan": "pro", "$set": {"seats": 3},
                                                                  "$add": {"logins": 1}}}]})
    assert [(e.event, e.properties, e.idempotency_key) for e in events] == [
        ("$identify", {"plan": "pro", "seats": 3}, "i#identify"), ("x", {}, "i")]
