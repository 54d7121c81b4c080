"""State changes happen exactly once under concurrency (docs/api.md, "Concurrent
changes"): ten requests sent at once, from threads, to the app on a real threaded HTTP
server, on both databases; and a pause or rollback committed while a delivery attempt is
in flight wins over what that attempt finds."""

from __future__ import annotations

import re
import threading
from contextlib import nullcontext
import time
from typing import Callable

import pytest
import requests
from sqlalchemy import func, select

from cs_daemon.auth.models import ApiKey
from cs_daemon.delivery import service as delivery
from cs_daemon.db import get_engine
from cs_daemon.delivery.models import Delivery
from cs_daemon.external.models import ExternalAction
from cs_daemon.interventions.models import Intervention
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.playbooks.models import Playbook
from cs_daemon.runtime import Runtime
from cs_daemon.team.models import Invitation, Member
from tests.conftest import auth
from tests.support.processes import Deadline
from tests.support.sql import Watching
from tests.support.sse import AppServer, SseClient

RACERS = 10


@pytest.fixture
def rt(settings, clock, mailbox):
    return Runtime(settings.model_copy(update={"smtp_url": mailbox.url}), clock)


@pytest.fixture
def server(app):
    s = AppServer(app)
    yield s
    s.close()


@pytest.fixture
def world(client, make_tenant, receiver):
    """A growth tenant with one user (with an email address), a playbook and one webhook
    endpoint (the webhook channel's receiver)."""
    tenant = make_tenant("Crew", plan_tier="growth")
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "ada@x.io", "name": "Ada"}}]})
    resp = client.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url, "events": ["webhook.test"]})
    assert resp.status_code == 201, resp.json
    pid = client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]
    return tenant, pid


class Gate:
    """Holds, from a transaction of the test's own, what the racing requests must take to
    write: on SQLite the database's write lock, on PostgreSQL the rows or tables named by
    `pg_locks` (SQL run in that transaction). It opens once every racing request is about
    to write or lock (seen on the app's engine, which runs in this process), so each of
    them has read what it checks before any of them can write: the widest race there is,
    every time, instead of whatever the thread scheduling gives."""

    WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|BEGIN IMMEDIATE)\b|\bFOR UPDATE\b", re.IGNORECASE)

    def __init__(self, rt, *pg_locks: str):
        self.engine, self.settings = get_engine(rt.settings), rt.settings
        self.pg_locks = pg_locks
        self.arrived: set[int] = set()
        self.changed = threading.Condition()
        self.conn = None

    def __enter__(self) -> "Gate":
        self.conn = self.engine.connect()
        if self.engine.dialect.name == "sqlite":
            self.conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            self.conn.begin()
            for sql in self.pg_locks:
                self.conn.exec_driver_sql(sql)
        self.holder = threading.get_ident()
        self.watching = Watching(self.settings, self._note).__enter__()
        return self

    def _note(self, conn, cursor, statement, *args) -> None:
        if threading.get_ident() != self.holder and self.WRITE.search(statement):
            with self.changed:
                self.arrived.add(threading.get_ident())
                self.changed.notify_all()

    def open_when(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.arrived) >= count, 30), len(self.arrived)
        self.__exit__()

    def __exit__(self, *exc) -> None:
        if self.conn is not None:
            self.watching.__exit__()
            self.conn.exec_driver_sql("ROLLBACK") if self.engine.dialect.name == "sqlite" else self.conn.rollback()
            self.conn.close()
            self.conn = None


def at_once(count: int, send: Callable[[int], requests.Response], gate: Gate | None = None) -> list[requests.Response]:
    """`send(i)` from `count` threads released together, through `gate` when given; the
    answers in thread order."""
    barrier = threading.Barrier(count)
    answers: list = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        try:
            answers[i] = send(i)
        except Exception as exc:    # shown by the assertion below, not lost in a thread
            answers[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    with gate or nullcontext():
        for t in threads:
            t.start()
        if gate is not None:
            gate.open_when(count)
    for t in threads:
        t.join(60)
    assert all(isinstance(a, requests.Response) for a in answers), answers
    return answers


def row_gate(rt, table: str, column: str, value: str, *tables: str) -> Gate:
    """A gate holding one row (and, on PostgreSQL, `tables` against inserts)."""
    return Gate(rt, f"SELECT 1 FROM {table} WHERE {column} = '{value}' FOR UPDATE",
                *(f"LOCK TABLE {t} IN SHARE MODE" for t in tables))


def statuses(answers: list[requests.Response]) -> list[int]:
    return sorted(a.status_code for a in answers)


def _create(client, tenant, pid, channel: str) -> str:
    resp = client.post("/api/interventions", headers=auth(tenant.key), json={
        "user_id": "u1", "playbook_id": pid, "channel": channel, "message_body": "Hello Ada"})
    assert resp.status_code == 201, resp.json
    return resp.json["id"]


def _put(server, tenant, path: str, body: dict | None = None) -> requests.Response:
    return requests.put(f"{server.url}{path}", headers=auth(tenant.key), json=body or {}, timeout=60)


def _deliveries(rt, tenant, iv: str) -> list[Delivery]:
    with rt.session(tenant.id) as s:
        rows = list(s.scalars(select(Delivery).where(Delivery.subject_id == iv, Delivery.kind == "channel")))
        s.expunge_all()
    return rows


def _run_due(rt, tenant) -> None:
    with rt.session(tenant.id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.status.in_(delivery.OPEN)))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


def _intervention(rt, tenant, iv: str) -> Intervention:
    with rt.session(tenant.id) as s:
        row = s.get(Intervention, iv)
        s.expunge_all()
    return row


def _events(rt, tenant, *kinds: str) -> list[str]:
    with rt.session(tenant.id) as s:
        return list(s.scalars(select(OutboxEvent.event_type).where(OutboxEvent.event_type.in_(kinds))))


def _channel_posts(receiver) -> list:
    return [r for r in receiver.requests if r.headers.get("X-Service-Channel") == "webhook"]


def _refused(answers, status: int, code: str) -> None:
    refused = [a for a in answers if a.status_code != 200]
    assert len(refused) == RACERS - 1, [(a.status_code, a.text) for a in answers]
    assert {(a.status_code, a.json()["code"]) for a in refused} == {(status, code)}


# --- interventions: one approval, one delivery, one message ----------------------------------


def test_ten_concurrent_approvals_make_one_delivery_and_one_webhook(client, world, rt, server, receiver):
    tenant, pid = world
    iv = _create(client, tenant, pid, "webhook")
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/interventions/{iv}/approve"),
                      row_gate(rt, "interventions", "id", iv))
    assert statuses(answers).count(200) == 1
    _refused(answers, 404, "invalid_state")
    assert len(_deliveries(rt, tenant, iv)) == 1
    _run_due(rt, tenant)
    _run_due(rt, tenant)
    assert len(_channel_posts(receiver)) == 1
    assert _intervention(rt, tenant, iv).status == "delivered"
    assert _events(rt, tenant, "intervention.delivered") == ["intervention.delivered"]


def test_ten_concurrent_approvals_of_an_email_send_one_mail(client, world, rt, server, mailbox):
    tenant, pid = world
    iv = _create(client, tenant, pid, "email")
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/interventions/{iv}/approve"),
                      row_gate(rt, "interventions", "id", iv))
    assert statuses(answers).count(200) == 1
    _refused(answers, 404, "invalid_state")
    assert len(_deliveries(rt, tenant, iv)) == 1
    _run_due(rt, tenant)
    _run_due(rt, tenant)
    assert [m.rcpt_tos for m in mailbox.received] == [["ada@x.io"]]


def test_ten_concurrent_rejects_make_one_rejection(client, world, rt, server):
    tenant, pid = world
    iv = _create(client, tenant, pid, "webhook")
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/interventions/{iv}/reject",
                                             {"reason": f"reason {i}"}), row_gate(rt, "interventions", "id", iv))
    assert statuses(answers).count(200) == 1
    _refused(answers, 404, "invalid_state")
    [won] = [i for i, a in enumerate(answers) if a.status_code == 200]
    assert _intervention(rt, tenant, iv).reason == f"reason {won}"


def test_concurrent_approvals_and_rejects_leave_one_decision(client, world, rt, server):
    tenant, pid = world
    iv = _create(client, tenant, pid, "webhook")
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/interventions/{iv}/{('approve', 'reject')[i % 2]}",
                                             {"reason": "no"}), row_gate(rt, "interventions", "id", iv))
    assert statuses(answers).count(200) == 1
    [won] = [i for i, a in enumerate(answers) if a.status_code == 200]
    assert _intervention(rt, tenant, iv).status == ("approved", "rejected")[won % 2]
    assert len(_deliveries(rt, tenant, iv)) == (1 if won % 2 == 0 else 0)


def test_ten_concurrent_rollbacks_tell_the_receiver_once(client, world, rt, server, receiver):
    tenant, pid = world
    iv = _create(client, tenant, pid, "webhook")
    client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key))
    _run_due(rt, tenant)
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/interventions/{iv}/rollback", {"reason": "oops"}),
                      row_gate(rt, "interventions", "id", iv))
    assert statuses(answers).count(200) == 1
    _refused(answers, 404, "invalid_state")
    assert _events(rt, tenant, "intervention.rolled_back") == ["intervention.rolled_back"]


def test_ten_concurrent_handles_and_delegations_of_an_escalation_count_once(client, world, rt, server):
    tenant, pid = world
    h = auth(tenant.key)

    def escalate() -> str:
        return client.post("/api/escalations", headers=h, json={"user_id": "u1", "playbook_id": pid,
                                                                "severity": "High", "reason": "refund"}).json["id"]

    handled = escalate()
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/escalations/{handled}/handle",
                                             {"action_taken": f"call {i}", "outcome": "positive"}),
                      row_gate(rt, "interventions", "id", handled))
    assert statuses(answers).count(200) == 1
    _refused(answers, 404, "invalid_state")
    assert _events(rt, tenant, "outcome.recorded") == ["outcome.recorded"]

    delegated = escalate()
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/escalations/{delegated}/delegate",
                                             {"channel": "email"}), row_gate(rt, "interventions", "id", delegated))
    assert statuses(answers).count(200) == 1
    _refused(answers, 404, "invalid_state")
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(Intervention).where(Intervention.source == "delegated")) == 1
    # a delegated escalation may still be handled, once, to record what was done
    assert _put(server, tenant, f"/api/escalations/{delegated}/handle", {"action_taken": "mailed"}).status_code == 200
    again = _put(server, tenant, f"/api/escalations/{delegated}/handle", {"action_taken": "mailed"})
    assert again.status_code == 404 and again.json()["code"] == "invalid_state"


# --- a pause or rollback committed during a delivery attempt wins ---------------------------


@pytest.mark.parametrize("answer", [200, 500])
@pytest.mark.parametrize("action, final", [("pause", "planned"), ("rollback", "rolled_back")])
def test_a_pause_or_rollback_during_an_attempt_wins_over_its_result(client, world, rt, server, receiver, clock,
                                                                     action, final, answer):
    tenant, pid = world
    release = threading.Event()
    receiver.script = [("hold", release, answer)]
    iv = _create(client, tenant, pid, "webhook")
    assert client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key)).status_code == 200
    [made] = _deliveries(rt, tenant, iv)
    recorded: list = []
    worker = threading.Thread(target=lambda: recorded.append(delivery.attempt(rt, made.id)))
    worker.start()
    try:
        deadline = Deadline(10)
        while not receiver.requests:
            assert deadline, "the attempt never reached the receiver"
            time.sleep(0.01)
        resp = _put(server, tenant, f"/api/interventions/{iv}/{action}", {"reason": "stop"})
        assert resp.status_code == 200 and resp.json()["status"] == final
    finally:
        release.set()
        worker.join(30)
    assert recorded == [None]               # the attempt's result moved nothing
    [after] = _deliveries(rt, tenant, iv)
    assert after.status == "canceled" and after.next_attempt_at is None
    assert _intervention(rt, tenant, iv).status == final
    clock.advance(hours=3)                  # past every retry delay: nothing is due, nothing is sent
    with rt.session() as s:
        assert made.id not in delivery.due(s, clock.now())
    _run_due(rt, tenant)
    assert len(_channel_posts(receiver)) == 1
    assert _events(rt, tenant, "intervention.delivered", "intervention.failed") == []
    replay = requests.post(f"{server.url}/api/webhooks/deliveries/{made.id}/replay", headers=auth(tenant.key),
                           timeout=30)
    assert replay.status_code == 409 and replay.json()["code"] == "invalid_state"
    assert len(_channel_posts(receiver)) == 1


def test_mail_of_an_intervention_rolled_back_after_its_attempt_was_claimed_is_not_sent(
        client, world, rt, clock, mailbox):
    """The email transport's check right before sending: the attempt was claimed (a worker
    took it), the rollback committed, then the worker reaches the send."""
    tenant, pid = world
    iv = _create(client, tenant, pid, "email")
    client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key))
    [made] = _deliveries(rt, tenant, iv)
    with rt.session(atomic=False) as s:
        claimed = delivery.claim(s.connection(), made.id, clock.now())
    assert claimed is not None
    assert client.put(f"/api/interventions/{iv}/rollback", headers=auth(tenant.key), json={}).status_code == 200
    outcome = delivery.send(rt, claimed, clock.now())
    assert not outcome.ok and outcome.permanent and "rolled_back" in outcome.error
    assert mailbox.received == []
    with rt.session() as s:
        assert delivery.record(s, claimed, outcome, at=clock.now(), now=clock.now()) is None
    assert _deliveries(rt, tenant, iv)[0].status == "canceled"


# --- in-app: a message rolled back or paused before its user connects -----------------------


def _queue_then(client, rt, tenant, pid, clock, action: str) -> str:
    """An in_app intervention whose delivery queued its message on the stream, then the
    pause or rollback committed before that attempt was recorded."""
    iv = _create(client, tenant, pid, "in_app")
    client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key))
    [made] = _deliveries(rt, tenant, iv)
    with rt.session(atomic=False) as s:
        claimed = delivery.claim(s.connection(), made.id, clock.now())
    outcome = delivery.send(rt, claimed, clock.now())
    assert outcome.ok, outcome
    assert client.put(f"/api/interventions/{iv}/{action}", headers=auth(tenant.key), json={}).status_code == 200
    with rt.session() as s:
        delivery.record(s, claimed, outcome, at=clock.now(), now=clock.now())
    return iv


def _stream(client, server, tenant) -> SseClient:
    token = client.post("/api/in-app/tokens", headers=auth(tenant.key), json={"user_id": "u1"}).json["token"]
    return SseClient(f"{server.url}/api/in-app/stream?token={token}").wait_listening()


def _marker(client, rt, tenant, pid) -> str:
    iv = _create(client, tenant, pid, "in_app")
    client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key))
    _run_due(rt, tenant)
    return iv


def test_an_in_app_message_rolled_back_before_its_user_connects_is_never_sent(client, world, rt, server, clock):
    tenant, pid = world
    iv = _queue_then(client, rt, tenant, pid, clock, "rollback")
    stream = _stream(client, server, tenant)
    try:
        marker = _marker(client, rt, tenant, pid)
        first = stream.next()
        assert first.event == "intervention" and first.json["interventionId"] == marker
    finally:
        stream.close()
    assert _intervention(rt, tenant, iv).status == "rolled_back"


def test_an_in_app_delivery_racing_a_rollback_never_reaches_a_later_connect(client, world, rt, server, clock):
    """The embedded-mode defect: the delivery job read the intervention as approved, the
    rollback committed (nothing queued yet to withdraw), then the job queued the message,
    which the user's next connect sent. Here the job and the rollback request run at once
    and reach their writes together (the gate); whichever goes first, nothing is sent."""
    tenant, pid = world
    iv = _create(client, tenant, pid, "in_app")
    client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key))
    [made] = _deliveries(rt, tenant, iv)
    with rt.session(atomic=False) as s:
        claimed = delivery.claim(s.connection(), made.id, clock.now())

    def job():
        outcome = delivery.send(rt, claimed, clock.now())
        with rt.session() as s:
            delivery.record(s, claimed, outcome, at=clock.now(), now=clock.now())

    rolled: list = []
    threads = [threading.Thread(target=job),
               threading.Thread(target=lambda: rolled.append(_put(server, tenant, f"/api/interventions/{iv}/rollback")))]
    with row_gate(rt, "interventions", "id", iv) as gate:
        for t in threads:
            t.start()
        gate.open_when(2)
    for t in threads:
        t.join(60)
    assert rolled[0].status_code == 200
    stream = _stream(client, server, tenant)
    try:
        marker = _marker(client, rt, tenant, pid)
        assert stream.next().json["interventionId"] == marker
    finally:
        stream.close()


def test_an_in_app_message_paused_after_queueing_waits_for_its_next_approval(client, world, rt, server, clock):
    tenant, pid = world
    iv = _queue_then(client, rt, tenant, pid, clock, "pause")
    stream = _stream(client, server, tenant)
    try:
        marker = _marker(client, rt, tenant, pid)
        assert stream.next().json["interventionId"] == marker
        assert _intervention(rt, tenant, iv).status == "planned"
        client.put(f"/api/interventions/{iv}/approve", headers=auth(tenant.key))
        _run_due(rt, tenant)
        again = stream.next()
        assert again.event == "intervention" and again.json["interventionId"] == iv
    finally:
        stream.close()
    deadline = Deadline(10)
    while _intervention(rt, tenant, iv).status != "delivered":
        assert deadline, _intervention(rt, tenant, iv).status
        time.sleep(0.02)


# --- team: one accept, one member, one key; invitations within the plan ---------------------


def test_ten_concurrent_accepts_of_one_invitation_make_one_member_and_one_key(client, tenant, rt, server):
    resp = client.post("/api/team/invite", headers=auth(tenant.key), json={"email": "ed@acme.example",
                                                                           "role": "editor"})
    assert resp.status_code == 201, resp.json
    token = resp.json["invitation"]["token"]
    answers = at_once(RACERS, lambda i: requests.post(f"{server.url}/api/team/accept", json={"token": token},
                                                      timeout=60), row_gate(rt, "invitations", "tenant_id", tenant.id))
    assert statuses(answers).count(200) == 1
    _refused(answers, 409, "conflict")
    with rt.session(tenant.id) as s:
        [member] = s.scalars(select(Member).where(Member.email == "ed@acme.example")).all()
        assert s.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.member_id == member.id)) == 1
        assert s.scalars(select(Invitation.status)).all() == ["accepted"]


def test_concurrent_accepts_and_revokes_of_an_invitation_leave_one_story(client, tenant, rt, server):
    made = client.post("/api/team/invite", headers=auth(tenant.key), json={"email": "ed@acme.example",
                                                                           "role": "editor"}).json["invitation"]

    def accept_or_revoke(i: int) -> requests.Response:
        if i % 2:
            return requests.delete(f"{server.url}/api/team/invitations/{made['id']}", headers=auth(tenant.key),
                                   timeout=60)
        return requests.post(f"{server.url}/api/team/accept", json={"token": made["token"]}, timeout=60)

    answers = at_once(RACERS, accept_or_revoke, row_gate(rt, "invitations", "tenant_id", tenant.id))
    assert statuses(answers).count(200) == 1
    [won] = [i for i, a in enumerate(answers) if a.status_code == 200]
    with rt.session(tenant.id) as s:
        members = s.scalars(select(Member.email).where(Member.email == "ed@acme.example")).all()
        assert (s.get(Invitation, made["id"]).status, len(members)) == (
            ("revoked", 0) if won % 2 else ("accepted", 1))


def test_the_database_holds_one_live_member_per_email(tenant, rt):
    from sqlalchemy.exc import IntegrityError

    first = tenant.add_member("ed@acme.example", "editor")
    with pytest.raises(IntegrityError):
        tenant.add_member("Ed@Acme.example", "viewer")
    with rt.session(tenant.id) as s:
        s.get(Member, first).removed_at = rt.now()
    tenant.add_member("ed@acme.example", "viewer")      # a removed member may come back


def _stamp(client, tenant) -> None:
    """Use the key once before the race: its first use stamps last_used_at, so that no
    racer has a stamp to write (auth.service.touch) and each one races for what the test
    means."""
    assert client.get("/api/team/members", headers=auth(tenant.key)).status_code == 200


def test_concurrent_invitations_at_the_plan_limit_never_pass_it(client, tenant, rt, server):
    # trial: 2 seats, the owner holds one
    _stamp(client, tenant)
    answers = at_once(RACERS, lambda i: requests.post(
        f"{server.url}/api/team/invite", headers=auth(tenant.key), json={"email": f"m{i}@acme.example",
                                                                         "role": "viewer"}, timeout=60),
                      row_gate(rt, "tenants", "id", tenant.id, "invitations"))
    assert statuses(answers).count(201) == 1
    refused = [a for a in answers if a.status_code != 201]
    assert {(a.status_code, a.json()["code"]) for a in refused} == {(403, "plan_limit")}
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(Invitation)) == 1


def test_concurrent_invitations_of_one_email_make_one(client, make_tenant, rt, server):
    tenant = make_tenant("Big", plan_tier="scale")
    _stamp(client, tenant)
    answers = at_once(RACERS, lambda i: requests.post(
        f"{server.url}/api/team/invite", headers=auth(tenant.key), json={"email": "same@big.example",
                                                                         "role": "viewer"}, timeout=60),
                      row_gate(rt, "tenants", "id", tenant.id, "invitations"))
    assert statuses(answers).count(201) == 1
    assert {a.json()["code"] for a in answers if a.status_code != 201} == {"conflict"}


# --- playbooks within the plan ---------------------------------------------------------------


def test_concurrent_playbooks_at_the_plan_limit_never_pass_it(client, tenant, rt, server):
    client.post("/api/playbooks", headers=auth(tenant.key), json={"name": "first"})     # trial: 3
    answers = at_once(RACERS, lambda i: requests.post(f"{server.url}/api/playbooks", headers=auth(tenant.key),
                                                      json={"name": f"p{i}"}, timeout=60),
                      row_gate(rt, "tenants", "id", tenant.id, "playbooks"))
    assert statuses(answers).count(201) == 2
    refused = [a for a in answers if a.status_code != 201]
    assert {(a.status_code, a.json()["code"], a.json()["limit"]) for a in refused} == {(403, "plan_limit", 3)}
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(Playbook)) == 3


# --- external actions: one outcome ----------------------------------------------------------


def test_ten_concurrent_outcome_reports_record_one(client, tenant, rt, server, receiver):
    key = tenant.issue("editor", ["manage"])
    resp = client.post("/api/external/action-types", headers=auth(key), json={
        "name": "award_points", "description": "points", "provider": "loyaltyco", "delivery_webhook": receiver.url,
        "parameters_schema": {"type": "object"}})
    assert resp.status_code == 201, resp.json
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": "u1", "event": "x"}]})
    action = client.post("/api/external/actions", headers=auth(key), json={
        "action_type": "award_points", "user_id": "u1", "parameters": {}}).json["action"]
    _run_due(rt, tenant)
    outcomes = ("completed", "rejected", "partial", "ignored")
    answers = at_once(RACERS, lambda i: requests.post(
        f"{server.url}/api/external/actions/{action['id']}/outcome", headers=auth(key),
        json={"status": outcomes[i % 4], "result": {"i": i}}, timeout=60),
        row_gate(rt, "external_actions", "id", action["id"]))
    assert statuses(answers).count(200) == 1
    _refused(answers, 409, "conflict")
    [won] = [i for i, a in enumerate(answers) if a.status_code == 200]
    settled = _events(rt, tenant, "external_action.completed", "external_action.failed")
    assert len(settled) == 1
    with rt.session(tenant.id) as s:
        row = s.get(ExternalAction, action["id"])
        assert (row.outcome_status, row.outcome_result) == (outcomes[won % 4], {"i": won})


@pytest.fixture
def unmigrated(backend, tmp_path):
    """Settings of an empty database of this backend, for migrating step by step."""
    import uuid

    import psycopg

    from cs_daemon.config import Settings
    from cs_daemon.db import dispose_engines
    from tests.conftest import PG, _pg_conninfo

    if backend == "embedded":
        yield Settings(cs_data_dir=tmp_path / "fresh", database_url=None, redis_url=None, cs_secret_key="t")
        dispose_engines()
        return
    name = f"cs_mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Settings(cs_data_dir=tmp_path, database_url=f"{PG}/{name}", redis_url=None, cs_secret_key="t")
    finally:
        dispose_engines()
        with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_unique_member_email_migration_stops_on_duplicates_and_names_them(unmigrated, clock):
    from sqlalchemy import MetaData, Table, insert

    from cs_daemon import migrate
    from cs_daemon.db import get_engine, new_id, session_scope

    migrate.upgrade(unmigrated, "0016")
    # rows as the schema of 0016 has them (the models have moved on since)
    tables = MetaData()
    engine = get_engine(unmigrated)
    tenants_t, members_t = (Table(name, tables, autoload_with=engine) for name in ("tenants", "members"))
    tenant_id, owner, twin = new_id(), new_id(), new_id()
    now = clock.now().replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(insert(tenants_t).values(
            id=tenant_id, name="Dup", slug="dup", config={}, plan_tier="trial", plan_status="trialing",
            tracked_users=0, kill_switch_active=False, shadow_mode=False, partner=False, created_at=now))
        conn.execute(insert(members_t), [
            {"tenant_id": tenant_id, "id": owner, "user_id": new_id(), "email": "owner@dup.example",
             "role": "admin", "created_at": now},
            {"tenant_id": tenant_id, "id": twin, "user_id": new_id(), "email": "Owner@Dup.example",
             "role": "viewer", "created_at": now}])
    with pytest.raises(RuntimeError, match=f"tenant {tenant_id}: owner@dup.example \\(2 members\\)"):
        migrate.upgrade(unmigrated)
    with session_scope(unmigrated) as s:
        s.get(Member, twin).removed_at = clock.now()
    assert migrate.pending(unmigrated)
    migrate.upgrade(unmigrated)
    assert not migrate.pending(unmigrated)


def test_concurrent_batches_over_shared_new_and_old_users_all_land_once(make_tenant, rt, server):
    """Ten batches at once, round after round, each naming users others name too, some
    known and some new to all of them (docs/architecture.md, "From a tracked event to a
    delivered email": a batch takes its users in one id order): every batch is answered
    200, and each user counts exactly the events sent for it, the tenant each user once.
    Before, overlapping batches deadlocked and PostgreSQL failed one of them (a 500)."""
    from cs_daemon.customers.models import Customer
    from cs_daemon.tenants.models import Tenant

    tenant = make_tenant("Busy", plan_tier="growth")
    with rt.session() as s:
        s.get(Tenant, tenant.id).tracked_user_limit = None   # users are created with the events
    sent: dict[str, int] = {}
    rounds = 6
    for r in range(rounds):
        batches = [[f"old-{(i + k) % 7}" for k in range(3)] + [f"new-{r}-{(i * 3 + k) % 11}" for k in range(4)]
                   for i in range(RACERS)]
        for users in batches:
            for u in users:
                sent[u] = sent.get(u, 0) + 1
        answers = at_once(RACERS, lambda i: requests.post(
            f"{server.url}/api/track", headers=auth(tenant.key), timeout=60, json={"events": [
                {"user_id": u, "event": "clicked", "idempotency_key": f"{r}-{i}-{u}"} for u in batches[i]]}))
        assert [a.status_code for a in answers] == [200] * RACERS, [a.text for a in answers if a.status_code != 200]
    with rt.session(tenant.id) as s:
        counts = {c.id: c.state["event_count"] for c in s.scalars(select(Customer))}
    with rt.session() as s:
        tracked = s.get(Tenant, tenant.id).tracked_users
    assert counts == sent
    assert tracked == len(sent)


def test_concurrent_unarchives_at_the_plan_limit_take_the_last_place_once(client, make_tenant, rt, server):
    """A trial tenant (3 playbooks) with 2 live and 2 archived: half the racers take one
    archived playbook out, half the other; one playbook comes back (every request for it
    answers 200, including those that find it done), the other stays archived (403)."""
    tenant = make_tenant("Trial", plan_tier="trial")
    h = auth(tenant.key)
    ids = [client.post("/api/playbooks", headers=h, json={"name": f"p{i}"}).json["id"] for i in range(3)]
    for pid in ids[1:]:
        assert client.delete(f"/api/playbooks/{pid}", headers=h).status_code == 200
    assert client.post("/api/playbooks", headers=h, json={"name": "p3"}).status_code == 201   # 2 live, 2 archived
    wanted = [ids[1], ids[2]]
    answers = at_once(RACERS, lambda i: _put(server, tenant, f"/api/playbooks/{wanted[i % 2]}/status",
                                             {"status": "active"}), row_gate(rt, "tenants", "id", tenant.id))
    by_playbook = {pid: {a.status_code for i, a in enumerate(answers) if wanted[i % 2] == pid} for pid in wanted}
    assert sorted(map(tuple, map(sorted, by_playbook.values()))) == [(200,), (403,)], [a.text for a in answers]
    statuses_now = {p["id"]: p["status"] for p in client.get("/api/playbooks", headers=h).json["playbooks"]}
    assert sum(1 for s in statuses_now.values() if s != "archived") == 3
