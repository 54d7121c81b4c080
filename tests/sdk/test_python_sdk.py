"""The Python SDK against the real service on loopback (docs/sdk.md, the client-side
batching convention). A scripted proxy in front of the service stands in for a failing
network or server where a test needs one; time moves only through the SDK's ManualClock."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from cs_sdk import Client, ClientClosed, Dropped, ManualClock, NotIdentified
from tests.conftest import auth
from tests.support.processes import PYTHON
from tests.support.scripted_proxy import ScriptedProxy
from tests.support.sse import AppServer

from .conftest import SDK

START = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)  # the service's FakeClock too
finite = lambda deadline: deadline is not None  # noqa: E731 - a sleeper with a deadline


@pytest.fixture
def server(app):
    s = AppServer(app)
    yield s
    s.close()


@pytest.fixture
def proxy(server):
    p = ScriptedProxy(server.url)
    yield p
    p.close()


@pytest.fixture
def sdk_clock():
    return ManualClock(start=START)


@pytest.fixture
def reports():
    return []


@pytest.fixture
def make_sdk(proxy, tenant, sdk_clock, reports):
    made = []

    def make(**options) -> Client:
        options.setdefault("clock", sdk_clock)
        options.setdefault("on_error", reports.append)
        c = Client(tenant.key, proxy.url, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown(timeout=0.5)


@pytest.fixture
def sdk(make_sdk):
    return make_sdk()


def stored(client, tenant, user_id: str) -> list[dict]:
    """The user's events as the API lists them, oldest first (by time, not by its text:
    a time on a whole second has no fraction, `...:01Z`, and sorts after `...:01.005Z`)."""
    r = client.get(f"/api/customers/{user_id}", headers=auth(tenant.key))
    assert r.status_code == 200, r.json
    return sorted(r.json["events"], key=lambda e: (datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")),
                                                  e["properties"].get("i", -1)))


def numbers(events: list[dict]) -> list[int]:
    return [e["properties"]["i"] for e in events if e["event"] == "report_created"]


def backoff_deadline(clock: ManualClock) -> float:
    """Where the sender sleeps now, after a failure: it must be a backoff step."""
    deadline = clock.wait_for_sleeper(finite)
    assert 0.5 <= deadline - clock.monotonic() <= 1.0  # the first step, 1 s with equal jitter
    return deadline


def test_25_tracks_make_3_posts_of_10_10_and_5_after_the_interval(sdk, proxy, sdk_clock, client, tenant):
    sdk.identify("ada", {"name": "Ada Lovelace", "email": "ada@example.com"})
    assert sdk.flush(10)
    start = sdk_clock.monotonic()
    for i in range(25):
        sdk.track("ada", "report_created", {"i": i})
    seen = proxy.wait_requests(3)
    assert sdk_clock.wait_for_sleeper(finite) == start + 1.0  # the 5 left wait for the interval
    assert [len(s.events) for s in seen[1:]] == [10, 10]

    sdk_clock.advance(0.5)
    assert sdk_clock.wait_for_sleeper(finite) == start + 1.0
    assert len(proxy.seen) == 3
    sdk_clock.advance(0.5)
    seen = proxy.wait_requests(4)
    assert [len(s.events) for s in seen] == [1, 10, 10, 5]
    assert [s.events[0]["properties"].get("i") for s in seen[1:]] == [0, 10, 20]
    assert all(s.status == 200 and s.path == "/api/track" for s in seen)
    assert seen[0].headers["Authorization"] == f"Bearer {tenant.key}"

    events = [e for s in seen for e in s.events]
    assert {e["timestamp"] for e in events} == {"2026-11-02T09:30:00.000Z"}  # stamped when queued
    keys = [uuid.UUID(e["idempotency_key"]) for e in events]
    assert len(set(keys)) == 26 and {k.version for k in keys} == {4}
    assert numbers(stored(client, tenant, "ada")) == list(range(25))
    assert sdk.flush(10)
    assert sdk.stats().accepted == 26 and sdk.stats().batches == 4


def test_a_lost_answer_then_200_delivers_every_event_once(sdk, proxy, sdk_clock, client, tenant, reports):
    proxy.then(("lost", 500))
    sdk.identify("ada")
    for i in range(9):
        sdk.track("ada", "report_created", {"i": i})
    proxy.wait_requests(1)
    deadline = backoff_deadline(sdk_clock)
    sdk_clock.advance(deadline - sdk_clock.monotonic())
    first, retried = proxy.wait_requests(2)
    assert sdk.flush(10)

    assert retried.body == first.body  # the same events, with the same idempotency keys
    assert first.upstream == {"accepted": 10, "duplicates": 0, "over_limit": 0} and first.status == 500
    assert retried.upstream == {"accepted": 0, "duplicates": 10, "over_limit": 0}
    stats = sdk.stats()
    assert (stats.retries, stats.duplicates, stats.delivered) == (1, 10, 10)
    events = stored(client, tenant, "ada")
    assert numbers(events) == list(range(9)) and len(events) == 10
    assert reports == []


def test_dropped_connections_are_retried_and_nothing_is_counted_twice(sdk, proxy, sdk_clock, client, tenant):
    sdk.identify("ada")
    assert sdk.flush(10)  # the SDK now holds a kept-alive connection to the proxy
    proxy.then("hangup", "hangup")
    for i in range(10):
        sdk.track("ada", "report_created", {"i": i})
    # the kept-alive connection looked closed: tried again at once on a new one, which
    # fails too: then a backoff
    proxy.wait_requests(3)
    deadline = backoff_deadline(sdk_clock)
    sdk_clock.advance(deadline - sdk_clock.monotonic())
    seen = proxy.wait_requests(4)
    assert sdk.flush(10)
    assert [s.upstream["duplicates"] for s in seen[1:]] == [0, 10, 10]
    assert seen[3].status == 200 and sdk.stats().retries == 1
    assert numbers(stored(client, tenant, "ada")) == list(range(10))


def test_429_with_retry_after_2_waits_exactly_2_seconds(sdk, proxy, sdk_clock, client, tenant, reports):
    proxy.then((429, {"Retry-After": "2"}))
    sdk.identify("ada")
    for i in range(9):
        sdk.track("ada", "report_created", {"i": i})
    proxy.wait_requests(1)
    at = sdk_clock.monotonic()
    assert sdk_clock.wait_for_sleeper(finite) == at + 2.0

    sdk_clock.advance(1.5)
    assert sdk_clock.wait_for_sleeper(finite) == at + 2.0
    assert len(proxy.seen) == 1
    sdk_clock.advance(0.5)
    seen = proxy.wait_requests(2)
    assert sdk.flush(10)
    assert [s.status for s in seen] == [429, 200] and seen[1].body == seen[0].body
    assert numbers(stored(client, tenant, "ada")) == list(range(9))
    assert sdk.stats().retries == 1 and reports == []


def test_a_400_drops_the_batch_and_reports_it(sdk, proxy, client, tenant, reports):
    sdk.identify("ada")
    sdk.track("ada", "report_created", {"note": "\x00"})  # the service stores no NUL character
    sdk.track("ada", "report_created", {"i": 0})
    assert sdk.flush(10)
    sdk.track("ada", "report_created", {"i": 1})
    assert sdk.flush(10)

    assert [s.status for s in proxy.seen] == [400, 200]  # never retried
    [report] = reports
    assert isinstance(report, Dropped)
    assert (report.reason, report.count, report.status) == ("rejected", 3, 400)
    assert report.code == report.error["code"] == "validation_failed"
    assert [e["event"] for e in report.events] == ["$identify", "report_created", "report_created"]
    assert report.events == tuple(proxy.seen[0].events)
    assert sdk.stats().rejected == 3
    assert numbers(stored(client, tenant, "ada")) == [1]


def test_track_before_identify_is_refused(sdk, proxy, client, tenant):
    with pytest.raises(NotIdentified, match="identify"):
        sdk.track("ada", "report_created")
    with pytest.raises(NotIdentified):
        sdk.set_locale("ada", "fr-FR")
    assert sdk.stats().queued == 0 and sdk.flush(10) and proxy.seen == []

    sdk.identify("ada", {"name": "Ada"})
    sdk.set_locale("ada", "fr-FR")
    sdk.track("ada", "report_created", {"i": 0})
    assert sdk.flush(10)
    assert [e["event"] for e in stored(client, tenant, "ada")] == ["$identify", "$locale", "report_created"]
    r = client.get("/api/customers/ada", headers=auth(tenant.key))
    assert (r.json["customer"]["name"], r.json["customer"]["locale"]) == ("Ada", "fr-FR")


@pytest.mark.parametrize("bad", [
    lambda c: c.identify("", {}),
    lambda c: c.identify("ada", ["not", "a", "dict"]),
    lambda c: c.track("ada", ""),
    lambda c: c.track("ada", "x", {"when": object()}),
    lambda c: c.identify("u" * 256),
    lambda c: c.track("ada", "x" * 256),
    lambda c: c.track("ada", "x", {"ratio": float("nan")}),
])
def test_bad_arguments_raise_in_the_caller_and_queue_nothing(sdk, bad):
    sdk.identify("ada")
    with pytest.raises((ValueError, TypeError)):
        bad(sdk)
    assert sdk.stats().queued == 1


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), Decimal("NaN"), [float("inf")]])
def test_nan_and_infinity_raise_type_error_and_queue_nothing(sdk, value):
    sdk.identify("ada")
    with pytest.raises(TypeError, match="cannot be sent as JSON"):
        sdk.track("ada", "x", {"ratio": value})
    assert sdk.stats().queued == 1


def test_names_of_255_characters_are_stored_and_longer_ones_raise(sdk, client, tenant):
    longest = "u" * 255
    sdk.identify(longest)
    sdk.track(longest, "e" * 255)
    with pytest.raises(ValueError, match="user_id must be at most 255 characters"):
        sdk.identify("u" * 256)
    with pytest.raises(ValueError, match="event must be at most 255 characters"):
        sdk.track(longest, "e" * 256)
    assert sdk.stats().queued == 2
    assert sdk.flush(10)
    assert [e["event"] for e in stored(client, tenant, longest)] == ["$identify", "e" * 255]


def test_the_queue_bound_drops_the_oldest_and_counts(make_sdk, proxy, sdk_clock, client, tenant, reports):
    sdk = make_sdk(max_queue_size=20)
    proxy.default = 503
    sdk.identify("ada")
    for i in range(9):
        sdk.track("ada", "report_created", {"i": i})
    proxy.wait_requests(1)
    deadline = backoff_deadline(sdk_clock)  # the first batch is held, retrying
    for i in range(9, 34):
        sdk.track("ada", "report_created", {"i": i})
    stats = sdk.stats()
    assert (stats.queued, stats.in_flight, stats.dropped) == (20, 10, 5)

    proxy.default = "pass"
    sdk_clock.advance(deadline - sdk_clock.monotonic())
    assert sdk.flush(10)
    assert numbers(stored(client, tenant, "ada")) == list(range(9)) + list(range(14, 34))
    assert [(r.reason, r.count) for r in reports] == [("overflow", 5)]
    assert sdk.stats().dropped == 5


def test_shutdown_flushes_and_then_refuses_events(sdk, proxy, client, tenant):
    sdk.identify("ada")
    for i in range(3):
        sdk.track("ada", "report_created", {"i": i})
    assert sdk.shutdown(timeout=10) is True
    assert [len(s.events) for s in proxy.seen] == [4]
    assert numbers(stored(client, tenant, "ada")) == [0, 1, 2]
    with pytest.raises(ClientClosed):
        sdk.track("ada", "report_created")


def test_shutdown_that_cannot_deliver_reports_what_it_dropped(sdk, proxy, sdk_clock, reports):
    proxy.default = 503
    sdk.identify("ada")
    sdk.track("ada", "report_created", {"i": 0})
    assert sdk.shutdown(timeout=0.3) is False
    assert [(r.reason, r.count) for r in reports] == [("shutdown", 2)]
    assert [e["event"] for e in reports[0].events] == ["$identify", "report_created"]
    assert sdk.stats().abandoned == 2


@pytest.fixture
def silent():
    """A server that reads one request and never answers it (until the test ends)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    got, connections = threading.Event(), []

    def serve() -> None:
        connection, _ = listener.accept()
        connections.append(connection)
        connection.recv(65536)
        got.set()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", got
    for connection in connections:
        connection.close()
    listener.close()


def test_shutdown_returns_within_its_timeout_while_a_request_hangs(silent, sdk_clock, reports):
    url, got = silent
    sdk = Client("rt_test_" + "k" * 32, url, clock=sdk_clock, on_error=reports.append)  # timeout=10
    sdk.identify("ada")
    assert sdk.flush(0) is False  # the $identify goes out, and is never answered
    assert got.wait(10)
    sdk.track("ada", "report_created", {"i": 0})

    started = time.monotonic()
    assert sdk.shutdown(timeout=0.2) is False
    assert time.monotonic() - started < 2  # not the request's 10 s time-out
    [report] = reports  # what waited is reported now; the request under way is left to itself
    assert (report.reason, report.count, report.events[0]["properties"]) == ("shutdown", 1, {"i": 0})
    assert sdk.stats().abandoned == 1 and sdk.stats().in_flight == 1


def test_threads_share_one_client_and_every_event_arrives_once(sdk, proxy, client, tenant):
    def user(n: int) -> None:
        sdk.identify(f"user-{n}")
        for i in range(40):
            sdk.track(f"user-{n}", "report_created", {"i": i})

    threads = [threading.Thread(target=user, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sdk.flush(10)
    for n in range(5):
        assert numbers(stored(client, tenant, f"user-{n}")) == list(range(40))
    assert sum(len(s.events) for s in proxy.seen) == 205
    assert all(len(s.events) <= 10 for s in proxy.seen)


def test_a_script_that_exits_without_flushing_still_delivers(server, client, tenant):
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from cs_sdk import Client\n"
        "c = Client(sys.argv[2], sys.argv[3], flush_interval=60)\n"
        "c.identify('ada', {'name': 'Ada'})\n"
        "c.track('ada', 'report_created', {'i': 0})\n"
    )
    done = subprocess.run([PYTHON, "-c", script, str(SDK), tenant.key, server.url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [e["event"] for e in stored(client, tenant, "ada")] == ["$identify", "report_created"]


def test_a_client_made_before_a_fork_works_in_the_child(proxy, tenant, client):
    """As under gunicorn --preload: the parent made and used the client, then forked."""
    import multiprocessing

    parent = Client(tenant.key, proxy.url)
    parent.identify("parent")
    assert parent.flush(10)

    def child() -> None:
        parent.identify("child")
        parent.track("child", "report_created", {"i": 0})
        raise SystemExit(0 if parent.flush(10) else 1)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    assert process.exitcode == 0
    assert [e["event"] for e in stored(client, tenant, "child")] == ["$identify", "report_created"]
    parent.track("parent", "report_created", {"i": 1})
    assert parent.shutdown(10)
    assert numbers(stored(client, tenant, "parent")) == [1]


def test_backoff_doubles_with_jitter_up_to_the_cap():
    import random

    from cs_sdk import retry

    rng = random.Random(7)
    for failures, step in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 30.0), (40, 30.0)]:
        delays = [retry.backoff(failures, rng, 1.0, 30.0) for _ in range(200)]
        assert step / 2 <= min(delays) and max(delays) <= step
        assert max(delays) - min(delays) > step / 4  # jittered, not fixed


def test_retry_after_reads_seconds_and_http_dates():
    from cs_sdk import retry

    now = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)
    assert retry.retry_after("2", now) == 2.0
    assert retry.retry_after("Mon, 02 Nov 2026 09:30:05 GMT", now) == 5.0
    assert retry.retry_after("Mon, 02 Nov 2026 09:00:00 GMT", now) == 0.0
    assert [retry.retry_after(v, now) for v in (None, "", "soon", "inf")] == [None] * 4
    assert [retry.retryable(s) for s in (429, 500, 503, 400, 401, 404, 408, 413, 302)] == [True] * 3 + [False] * 6
