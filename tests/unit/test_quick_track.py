"""The track body read without the model (cs_daemon/customers/schemas.py, quick_track and
quick_track_json on the raw body):
where it reads a body, TrackRequest reads the same values; what it declines, the model
validates (and refuses with its own errors)."""

from __future__ import annotations

import json
import random
from datetime import timezone

import pytest
from pydantic import ValidationError

from cs_daemon.customers.schemas import TrackRequest, quick_track, quick_track_json

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


# --- quick_track_json: the same, on the raw body

TEXTS = [
    b'{"events":[{"user_id":"a","event":"b","properties":{"x":NaN}}]}',
    b'{"events":[{"user_id":"a","event":"b","properties":{"x":-Infinity}}]}',
    b'{"events":[{"user_id":"a","event":"b","properties":{"x":1e400}}]}',
    b'{"events":[{"user_id":"a","event":"b","properties":{"x":' + b"9" * 4301 + b'}}]}',
    b'{"events":[{"user_id":"a\\u0000","event":"b"}]}',
    b'{"events":[{"user_id":"a\\ud800","event":"b"}]}',
    b'{"events":[{"user_id":"a","event":"b","properties":{"x":"\\ud83d\\ude00"}}]}',
    b'{"events":[{"user_id":"a","event":"b"}],"extra":NaN}',
    b'{"events":[{"user_id":"a","event":"b","extra":1e999}]}',
    b'{"events":[{"user_id":"a","event":"b","properties":{"x":[[[[1]]]]}}]}',
    b'{"events":[{"user_id":"a","event":"b"}]}x',
    b'\xef\xbb\xbf{"events":[{"user_id":"a","event":"b"}]}',
    '{"events":[{"user_id":"a","event":"b"}]}'.encode("utf-16"),
    b'{"events":[{"user_id":"a","user_id":"c","event":"b","properties":{"x":1,"y":2,"x":3}}]}',
    b'{"events":[{"user_id":"a\\u00e9\\n","event":"b","properties":{"f":1.0,"g":-0.0,"h":1E2,"i":123456789012345678901,'
    b'"j":[1,2.5,"s",null,false],"k":{"a":true},"l":0.1,"m":5e-324}}]} \n',
    b'{"events":[{"user_id":"a","event":"b\tc"}]}', b'', b'[]', b'{}', b'null',
    # times near the edges of the plain form and of the calendar in UTC
    *(b'{"events":[{"user_id":"a","event":"b","timestamp":"%s"}]}' % t.encode() for t in (
        "0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00-01:00", "9999-12-31T23:59:59-01:00",
        "9999-12-31T23:59:59+01:00", "2026-11-26T10:00:00+23:59", "2026-11-26T10:00:00-23:59",
        "2026-11-26T10:00:00+00:00", "2026-11-26T10:00:00-00:00", "2026-11-26T10:00:00.000000Z",
        "2026-11-26T10:00:00Z\\n", "2026-11-26T10:00:00Zx", "x2026-11-26T10:00:00Z", "2026-11-26T10:00:60Z",
        "2026-11-26T10:00:00.1234Z", "2026-11-26T10:00:00+0530", "\\u0662026-11-26T10:00:00Z")),
]


def _slow(raw: bytes):
    """What the route reads without quick_track_json: jsontext.loads, then quick_track or the model."""
    from cs_daemon import jsontext

    try:
        data = jsontext.loads(raw)
        quick = quick_track(data) if isinstance(data, dict) else None
        return quick or TrackRequest.model_validate(data)
    except (ValueError, UnicodeDecodeError):
        return None


@pytest.mark.parametrize("raw", TEXTS + [json.dumps(b).encode() for b in BODIES])
def test_a_raw_body_read_quickly_reads_as_the_usual_way_reads_it(raw):
    quick, slow = quick_track_json(raw), _slow(raw)
    if quick is None:
        return
    assert slow is not None
    got = [(e.user_id, e.event, e.properties, e.timestamp, e.idempotency_key) for e in slow.events]
    read = [(e["user_id"], e["event"], e.get("properties", {}), e.get("timestamp"), e.get("idempotency_key"))
            for e in quick.events]
    assert read == got
    assert [[type(v) for v in e[2].values()] for e in read] == [[type(v) for v in e[2].values()] for e in got]
    assert all(e[3] is None or e[3].utcoffset() is not None for e in read)
    assert [e[3] and e[3].tzinfo for e in read] == [e[3] and e[3].tzinfo for e in got]   # timezone.utc


def test_numbers_read_from_the_raw_body_are_those_json_reads():
    rng = random.Random(7)
    values = [rng.uniform(-1e6, 1e6) for _ in range(300)] + [rng.random() * 10 ** rng.randint(-320, 308)
                                                            for _ in range(300)]
    texts = [repr(v) for v in values] + [f"{v:.17g}" for v in values] + [f"{v:.3e}" for v in values]
    texts += [str(rng.getrandbits(rng.randint(1, 200))) for _ in range(200)]
    raw = ('{"events":[{"user_id":"a","event":"b","properties":{%s}}]}'
           % ",".join(f'"{i}":{t}' for i, t in enumerate(texts))).encode()
    quick = quick_track_json(raw)
    assert quick is not None
    assert list(quick.events[0]["properties"].values()) == list(json.loads(raw)["events"][0]["properties"].values())


def test_the_plain_bodies_of_the_sdks_are_read_quickly_from_the_raw_body():
    assert quick_track_json(json.dumps({"events": [{**EVENT, "properties": {"plan": "pro", "n": 3, "ok": True},
                                                    "timestamp": "2026-11-26T10:00:00.123Z",
                                                    "idempotency_key": "6b1f0e2c"}] * 50}).encode()) is not None


@pytest.mark.parametrize("at", ["2026-11-26T10:00:00.123Z", "2026-11-26T10:00:00", "2026-11-26T10:00:00.123456+05:30",
                                "2026-11-26T10:00:00-08:00", "0001-01-01T00:00:00-01:00"])
def test_plain_times_are_read_from_the_raw_body_in_utc(at):
    quick = quick_track_json(json.dumps({"events": [{**EVENT, "timestamp": at}]}).encode())
    got = TrackRequest.model_validate({"events": [{**EVENT, "timestamp": at}]}).events[0].timestamp
    assert quick is not None and quick.events[0]["timestamp"] == got and quick.events[0]["timestamp"].tzinfo is timezone.utc


@pytest.mark.parametrize("at", ["0001-01-01T00:00:00+01:00", "2026-02-30T10:00:00Z", "2026-11-26T10:00:00.1Z",
                                "2026-11-26", "2026-11-26T10:00:00Z\n"])
def test_other_times_are_left_to_the_usual_way(at):
    assert quick_track_json(json.dumps({"events": [{**EVENT, "timestamp": at}]}).encode()) is None


def test_every_kind_of_leaf_is_read_from_the_raw_body_as_json_reads_it():
    # an integer is taken by both StrictInt and StrictFloat: it must stay an int
    values = ['"s"', "1", "-0", "1.0", "1.5", "1e2", "true", "false", "null", "12345678901234567890123", '"1"',
              '"true"', "0.0", "-1"]
    raw = ('{"events":[{"user_id":"a","event":"b","properties":{"l":[%s],"d":{%s},%s}}]}'
           % (",".join(values), ",".join(f'"k{i}":{v}' for i, v in enumerate(values)),
              ",".join(f'"v{i}":{v}' for i, v in enumerate(values)))).encode()
    quick = quick_track_json(raw)
    assert quick is not None
    read, want = quick.events[0]["properties"], json.loads(raw)["events"][0]["properties"]

    def kinds(props):
        return ([type(v) for v in props["l"]], [type(v) for v in props["d"].values()],
                [type(v) for k, v in props.items() if k not in ("l", "d")])
    assert read == want and kinds(read) == kinds(want)


def _plainish_times():
    """Times in and around the plain form: any calendar numbers, fractions, offsets."""
    from hypothesis import strategies as st

    two = st.integers(0, 99).map("{:02d}".format)
    fraction = st.sampled_from(["", ".1", ".123", ".1234", ".123456", ".1234567"])
    offset = st.one_of(st.sampled_from(["", "Z", "z", "+00:00", "-00:00"]),
                       st.tuples(st.sampled_from("+-"), two, two).map(lambda t: f"{t[0]}{t[1]}:{t[2]}"))
    return st.builds(lambda y, mo, d, sep, h, mi, s, f, o: f"{y:04d}-{mo}-{d}{sep}{h}:{mi}:{s}{f}{o}",
                     st.integers(0, 9999), two, two, st.sampled_from("T t"), two, two, two, fraction, offset)


def test_any_time_read_quickly_reads_as_the_usual_way_reads_it():
    """The quick path takes a time only in the plain form and reads it with
    datetime.fromisoformat; whatever it takes, the model reads the same instant in UTC,
    and what the model refuses it does not take."""
    from hypothesis import given, settings

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(_plainish_times())
    def check(at):
        raw = json.dumps({"events": [{**EVENT, "timestamp": at}]}).encode()
        quick, slow = quick_track_json(raw), _slow(raw)
        if quick is None:
            return
        assert slow is not None, at
        assert quick.events[0]["timestamp"] == slow.events[0].timestamp, at
        assert quick.events[0]["timestamp"].tzinfo is timezone.utc, at

    check()
