"""The platforms' official Python libraries, pointed at a running service (a real HTTP
server on 127.0.0.1), deliver their events with no error and nothing else changed
(docs/connectors.md)."""

from __future__ import annotations

import threading

import mixpanel
import pytest
from amplitude import Amplitude, BaseEvent, Config, EventOptions, Identify
from segment import analytics
from sqlalchemy import select
from werkzeug.serving import make_server

from cs_daemon.customers.models import Customer, Event

A = "/api/connectors/connector-a"
B = "/api/connectors/connector-b"
C = "/api/connectors/connector-c"
WRONG_KEY = "rt_live_" + "w" * 32


@pytest.fixture
def service_url(app):
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(5)


def _stored(rt, tenant_id) -> list[Event]:
    with rt.session(tenant_id) as s:
        return list(s.scalars(select(Event).order_by(Event.timestamp, Event.event)))


def _customer(rt, tenant_id, user_id) -> Customer:
    with rt.session(tenant_id) as s:
        customer = s.get(Customer, (tenant_id, user_id))
        assert customer is not None, f"no customer {user_id}"
        s.expunge(customer)
        return customer


# -- Segment: analytics-python ----------------------------------------------------------

@pytest.mark.parametrize("compressed", [False, True])
def test_segment_library_in_sync_mode(service_url, tenant, rt, compressed):
    client = analytics.Client(write_key=tenant.key, host=service_url + A, sync_mode=True,
                              gzip=compressed, max_retries=0)
    client.identify("ada", {"name": "Ada Lovelace", "email": "ada@example.com", "company": "Engines"})
    client.track("ada", "Created Project", {"template": "blank"}, message_id="seg-track-1")
    client.page("ada", "Docs", "Pricing", {"path": "/pricing"})
    client.screen("ada", "App", "Home")
    client.group("ada", "g-1", {"name": "Engines"})
    client.alias("anon-1", "ada")
    events = _stored(rt, tenant.id)
    assert sorted(e.event for e in events) == sorted(
        ["$identify", "Created Project", "$page", "$screen", "$group", "$alias"])
    assert all(e.source == "connector-a" and e.user_id == "ada" for e in events)
    assert [e.properties for e in events if e.event == "Created Project"] == [{"template": "blank"}]
    ada = _customer(rt, tenant.id, "ada")
    assert (ada.name, ada.email, ada.company) == ("Ada Lovelace", "ada@example.com", "Engines")


def test_segment_library_batches_in_the_background_and_flushes(service_url, tenant, rt):
    errors = []
    client = analytics.Client(write_key=tenant.key, host=service_url + A, max_retries=0,
                              on_error=lambda error, batch: errors.append(error))
    for i in range(25):
        client.track(f"user-{i % 5}", "Clicked", {"i": i})
    client.flush()
    client.join()
    assert errors == []
    assert len(_stored(rt, tenant.id)) == 25


def test_segment_library_with_a_wrong_key_gets_a_401(service_url, tenant, rt):
    client = analytics.Client(write_key=WRONG_KEY, host=service_url + A, sync_mode=True, max_retries=0)
    with pytest.raises(analytics.request.APIError) as caught:
        client.track("ada", "Created Project")
    assert caught.value.status == 401
    assert _stored(rt, tenant.id) == []


# -- Mixpanel: mixpanel-python ----------------------------------------------------------

def _mixpanel_urls(service_url: str) -> dict:
    """The library builds https://{api_host}/…; the documented per-endpoint URLs take
    any scheme."""
    base = service_url + B
    return {"events_url": f"{base}/track", "people_url": f"{base}/engage",
            "import_url": f"{base}/import"}


def test_mixpanel_library_with_its_consumer(service_url, tenant, rt):
    mp = mixpanel.Mixpanel(tenant.key, consumer=mixpanel.Consumer(**_mixpanel_urls(service_url), retry_limit=0))
    mp.people_set("grace", {"$name": "Grace Hopper", "$email": "grace@example.com", "team_size": 40})
    mp.track("grace", "Compiled", {"language": "COBOL"})
    mp.import_data(None, "grace", "Old Compile", 1700000000, api_secret=tenant.key)  # Basic, key as user
    events = _stored(rt, tenant.id)
    assert [e.event for e in events] == ["Old Compile", "$identify", "Compiled"]
    assert all(e.source == "connector-b" and e.idempotency_key for e in events)
    assert events[2].properties["language"] == "COBOL" and "token" not in events[2].properties
    grace = _customer(rt, tenant.id, "grace")
    assert (grace.name, grace.email, grace.team_size) == ("Grace Hopper", "grace@example.com", 40)


def test_mixpanel_library_with_its_buffered_consumer(service_url, tenant, rt):
    consumer = mixpanel.BufferedConsumer(max_size=10, **_mixpanel_urls(service_url), retry_limit=0)
    mp = mixpanel.Mixpanel(tenant.key, consumer=consumer)
    for i in range(23):
        mp.track(f"user-{i % 4}", "Clicked", {"i": i})
    mp.people_set("user-0", {"$email": "zero@example.com"})
    consumer.flush()
    assert len(_stored(rt, tenant.id)) == 24
    assert _customer(rt, tenant.id, "user-0").email == "zero@example.com"


def test_mixpanel_library_with_a_wrong_token_raises_its_own_exception(service_url, tenant, rt):
    mp = mixpanel.Mixpanel(WRONG_KEY, consumer=mixpanel.Consumer(**_mixpanel_urls(service_url), retry_limit=0))
    with pytest.raises(mixpanel.MixpanelException):
        mp.track("grace", "Compiled")
    assert _stored(rt, tenant.id) == []


# -- Amplitude: amplitude-analytics -----------------------------------------------------

def _amplitude(key: str, url: str, answers: list) -> Amplitude:
    config = Config(server_url=url, flush_max_retries=1,
                    callback=lambda event, code, message: answers.append((event.event_type, code, message)))
    return Amplitude(key, config)


def _flush(client: Amplitude) -> None:
    for future in client.flush():
        if future is not None:
            future.result(timeout=30)
    client.shutdown()


@pytest.mark.parametrize("path", ["/2/httpapi", "/batch"])
def test_amplitude_library(service_url, tenant, rt, path):
    answers: list = []
    client = _amplitude(tenant.key, service_url + C + path, answers)
    client.identify(Identify().set("name", "Linus").set("email", "linus@example.com"),
                    EventOptions(user_id="linus-1"))
    client.track(BaseEvent(event_type="Pushed Commit", user_id="linus-1",
                           event_properties={"branch": "main"}))
    client.track(BaseEvent(event_type="Opened App", device_id="device-9"))
    _flush(client)
    assert sorted(a[:2] for a in answers) == [("$identify", 200), ("Opened App", 200), ("Pushed Commit", 200)]
    events = _stored(rt, tenant.id)
    assert sorted(e.event for e in events) == ["$identify", "Opened App", "Pushed Commit"]
    assert all(e.source == "connector-c" and e.idempotency_key for e in events)
    linus = _customer(rt, tenant.id, "linus-1")
    assert (linus.name, linus.email) == ("Linus", "linus@example.com")


def test_amplitude_library_with_a_wrong_key_is_told_401(service_url, tenant, rt):
    answers: list = []
    client = _amplitude(WRONG_KEY, service_url + C + "/2/httpapi", answers)
    client.track(BaseEvent(event_type="Pushed Commit", user_id="linus-1"))
    _flush(client)
    assert [a[1] for a in answers] == [401]
    assert _stored(rt, tenant.id) == []
