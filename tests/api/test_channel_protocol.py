"""The channel interface (docs/architecture.md, "The channel interface"): a channel the
service has never heard of, registered with the call the composition root makes for
every channel (`channels.register`), carries an intervention through the execute
pipeline and the delivery mechanism like a built-in one: its deliveries are the rows it
plans, its `send` makes each attempt, `delivered_on_attempt` says whether an attempt
delivers or only queues, a rollback is its `withdraw`, and test-mode work goes to the
sink instead."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from sqlalchemy import select, text

from cs_daemon import migrate

from cs_daemon.channels import base as channels
from cs_daemon.config import Settings
from cs_daemon.db import get_engine
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.integrations.http import Outcome
from cs_daemon.interventions import service as interventions
from cs_daemon.interventions.models import Intervention
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.webhooks import service as webhooks
from tests.conftest import NO_HOLDOUT, PG, _pg_conninfo, auth


class Pigeon:
    """A throw-away channel: one delivery per intervention to the user's loft, recorded
    here instead of flown."""

    name = "pigeon"

    def __init__(self, *, delivered_on_attempt: bool = True, undeliverable: str | None = None):
        self.delivered_on_attempt = delivered_on_attempt
        self.undeliverable = undeliverable
        self.flown: list[dict] = []
        self.withdrawn: list[tuple[str, str]] = []

    def deliveries_for(self, session, iv) -> list[channels.Planned]:
        if self.undeliverable:
            raise channels.Undeliverable(self.undeliverable)
        return [channels.Planned(url=f"loft:{iv.user_id}", body={"intervention_id": iv.id, "note": iv.message_body})]

    def send(self, claimed, secret, rt, now) -> Outcome:
        self.flown.append({"url": claimed.url, "body": json.loads(claimed.body), "channel": claimed.channel})
        return Outcome(200, "landed", None, 1.0)

    def withdraw(self, session, iv, *, was, now) -> None:
        self.withdrawn.append((iv.id, was))


@pytest.fixture
def register():
    """Register a channel as the composition root does, and forget it after the test."""
    added = []

    def add(channel):
        channels.register(channel)
        added.append(channel.name)
        return channel

    yield add
    for name in added:
        channels.unregister(name)


@pytest.fixture
def world(client, make_tenant):
    tenant = make_tenant("Loft", plan_tier="growth", config=dict(NO_HOLDOUT))
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "$identify",
                                                           "properties": {"email": "u1@x.io", "name": "Ada"}}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    return tenant, pid


def _planned(rt, tenant, pid, *, test=False) -> str:
    with rt.session(tenant.id) as s:
        return interventions.create(s, tenant.id, user_id="u1", playbook_id=pid, channel="pigeon",
                                    message_body="Coo", now=rt.now(), test=test).id


def _approve(client, tenant, iv_id) -> None:
    resp = client.put(f"/api/interventions/{iv_id}/approve", headers=auth(tenant.key))
    assert resp.status_code == 200, resp.json


def _deliveries(rt, tenant, iv_id) -> list[Delivery]:
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(Delivery).where(Delivery.subject_id == iv_id)))


def _run(rt, tenant, iv_id) -> None:
    for made in _deliveries(rt, tenant, iv_id):
        delivery.attempt(rt, made.id)


def _status(rt, tenant, iv_id) -> str:
    with rt.session(tenant.id) as s:
        return s.get(Intervention, iv_id).status


def _events(rt, tenant, kind) -> list[dict]:
    with rt.session(tenant.id) as s:
        return [o.payload for o in s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == kind))]


def test_a_channel_registered_like_the_built_in_ones_delivers_an_intervention(client, world, rt, register):
    tenant, pid = world
    pigeon = register(Pigeon())
    iv = _planned(rt, tenant, pid)
    _approve(client, tenant, iv)
    [made] = _deliveries(rt, tenant, iv)
    assert (made.channel, made.url, made.status) == ("pigeon", "loft:u1", "pending")
    _run(rt, tenant, iv)
    assert pigeon.flown == [{"url": "loft:u1", "body": {"intervention_id": iv, "note": "Coo"}, "channel": "pigeon"}]
    assert _status(rt, tenant, iv) == "delivered"
    [event] = _events(rt, tenant, "intervention.delivered")
    assert event["intervention_id"] == iv and event["channel"] == "pigeon"
    with rt.session(tenant.id) as s:      # not a webhook: the webhook log does not list it
        assert webhooks.delivery_log(s, tenant.id) == []


def test_a_channel_that_only_queues_leaves_the_intervention_sent_and_a_rollback_is_its_withdraw(
        client, world, rt, register):
    tenant, pid = world
    pigeon = register(Pigeon(delivered_on_attempt=False))
    iv = _planned(rt, tenant, pid)
    _approve(client, tenant, iv)
    _run(rt, tenant, iv)
    assert len(pigeon.flown) == 1 and _status(rt, tenant, iv) == "sent"
    resp = client.put(f"/api/interventions/{iv}/rollback", headers=auth(tenant.key), json={"reason": "wrong"})
    assert resp.status_code == 200, resp.json
    assert pigeon.withdrawn == [(iv, "sent")]


def test_an_intervention_its_channel_cannot_deliver_fails_at_once_without_a_delivery(client, world, rt, register):
    tenant, pid = world
    register(Pigeon(undeliverable="the user keeps no loft"))
    iv = _planned(rt, tenant, pid)
    _approve(client, tenant, iv)
    assert _deliveries(rt, tenant, iv) == [] and _status(rt, tenant, iv) == "failed"
    [event] = _events(rt, tenant, "intervention.failed")
    assert event["intervention_id"] == iv and event["error"]["message"] == "the user keeps no loft"


def test_test_mode_work_goes_to_the_sink_not_to_its_channel(client, world, rt, register):
    tenant, pid = world
    pigeon = register(Pigeon())
    iv = _planned(rt, tenant, pid, test=True)
    _approve(client, tenant, iv)
    [made] = _deliveries(rt, tenant, iv)
    assert (made.channel, made.url) == ("sink", "sink:test-mode")
    _run(rt, tenant, iv)
    assert pigeon.flown == [] and _status(rt, tenant, iv) == "delivered"


@pytest.fixture
def empty_db(backend, tmp_path):
    """Settings of an empty database (no migration run yet) of this backend."""
    if backend == "embedded":
        yield Settings(cs_data_dir=tmp_path, database_url=None, redis_url=None, cs_secret_key="migration-key")
        return
    name = f"cs_test_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    settings = Settings(database_url=f"{PG}/{name}", redis_url=None, cs_secret_key="migration-key")
    yield settings
    get_engine(settings).dispose()
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
def test_migration_0024_names_the_channel_of_every_existing_delivery(empty_db, backend):
    migrate.upgrade(empty_db, "0023")
    engine = get_engine(empty_db)
    rows = {"d-sink": ("channel", "sink:test-mode", ""), "d-mail": ("invitation", "mailto:ed@x.io", "enc"),
            "d-inapp": ("channel", "inapp:u1", ""), "d-none": ("channel", "none:", ""),
            "d-crm": ("channel", "https://crm.example/h", "ref:crm"), "d-hook": ("event", "https://h.example/", "enc"),
            "d-platform": ("dispatch", "platform:abc:https://x", "enc")}
    with engine.begin() as conn:
        # rows of no tenant: this test is about the deliveries alone
        conn.execute(text("SET session_replication_role = replica" if backend == "postgres"
                          else "PRAGMA foreign_keys = OFF"))
        for did, (kind, url, secret) in rows.items():
            conn.execute(text("INSERT INTO deliveries (id, tenant_id, kind, event_type, url, body, headers, secret_enc, "
                              "status, attempts, max_attempts, test, created_at, updated_at) VALUES (:id, 't', :kind, "
                              "'x', :url, '{}', '{}', :secret, 'failed', 1, 6, false, :at, :at)"),
                         {"id": did, "kind": kind, "url": url, "secret": secret, "at": "2026-11-01 00:00:00"})
    migrate.upgrade(empty_db)
    with engine.connect() as conn:
        found = dict(conn.execute(text("SELECT id, channel FROM deliveries")).all())
    assert found == {"d-sink": "sink", "d-mail": "email", "d-inapp": "in_app", "d-none": "none", "d-crm": "crm",
                     "d-hook": "webhook", "d-platform": "webhook"}
