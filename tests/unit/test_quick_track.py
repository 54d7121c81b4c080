"""The track body read without the model (cs_daemon/customers/schemas.py, quick_track):
where it reads a body, TrackRequest reads the same values; what it declines, the model
validates (and refuses with its own errors)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cs_daemon.customers.schemas import TrackRequest, quick_track

EVENT = {"user_id": "u1", "event": "clicked"}
BODIES = [
    {"events": [EVENT]},
    {"events": [EVENT] * 100},
    {"events": [{**EVENT, "properties": {"a": [1, {"b": None}], "c": 1.5}, "idempotency_key": "k" * 255,
                 "extra": "ignored"}]},
    *({"events": [{**EVENT, "timestamp": t}]} for t in (
        "2026-11-26T10:00:00Z", "2026-11-26T10:00:00.123Z", "2026-11-26T10:00:00.123456+05:30",
        "2026-11-26T10:00:00", "2026-11-26T10:00:00-08:00", "2026-02-30T10:00:00Z", "2026-11-26T24:00:00Z",
        "2026-11-26T10:00:00+24:00", "0000-01-01T00:00:00Z", "2026-11-26 10:00:00Z", "2026-11-26T10:00:00.1Z",
        "2026-11-26", 1764151200, None, "yesterday", "")),
    {"events": []}, {"events": [EVENT] * 101}, {}, {"events": {}}, {"events": [1]}, {"events": [None]},
    {"events": [{**EVENT, "user_id": ""}]}, {"events": [{**EVENT, "user_id": "x" * 256}]},
    {"events": [{**EVENT, "user_id": 7}]}, {"events": [{**EVENT, "event": True}]}, {"events": [{"event": "x"}]},
    {"events": [{**EVENT, "properties": None}]}, {"events": [{**EVENT, "properties": [1]}]},
    {"events": [{**EVENT, "idempotency_key": ""}]}, {"events": [{**EVENT, "idempotency_key": 5}]},
    {"events": [{**EVENT, "idempotency_key": None}]},
]


@pytest.mark.parametrize("body", BODIES)
def test_a_body_read_quickly_reads_as_the_model_reads_it(body):
    quick = quick_track(body)
    try:
        model = TrackRequest.model_validate(body)
    except ValidationError:
        assert quick is None
        return
    if quick is not None:
        assert [tuple(e) for e in quick.events] == [
            (e.user_id, e.event, e.properties, e.timestamp, e.idempotency_key) for e in model.events]
        assert all(e.timestamp is None or e.timestamp.utcoffset() is not None for e in quick.events)


def test_the_plain_bodies_of_the_sdks_are_read_quickly():
    assert quick_track({"events": [{**EVENT, "properties": {"plan": "pro"}, "timestamp": "2026-11-26T10:00:00.123Z",
                                    "idempotency_key": "6b1f0e2c"}] * 50}) is not None
