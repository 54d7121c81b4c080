"""Every transition of the intervention and escalation state machines, walked through the
services: from each status, each change a person may ask for either moves the row to the
status of the table (interventions/states.py, FROM and TO) or is refused with
invalid_state and changes nothing (docs/interventions.md)."""

from __future__ import annotations

import pytest

from cs_daemon.errors import InvalidState
from cs_daemon.interventions import service, states
from cs_daemon.interventions.models import Intervention
from cs_daemon.uow import uow_of
from tests.conftest import auth

PERSON = {  # change -> the service call that asks for it
    "approve": lambda s, iv, now: service.approve(s, iv, now=now),
    "pause": lambda s, iv, now: service.pause(s, iv, now=now),
    "reject": lambda s, iv, now: service.reject(s, iv, "no", now=now),
    "edit": lambda s, iv, now: service.edit_message(s, iv, "Hello again", now=now),
    "rollback": lambda s, iv, now: service.rollback(s, iv, "oops", now=now),
}
ESCALATION = {
    "handle": lambda s, iv, now: service.handle(s, iv, action_taken="called", outcome=None, handled_by="m",
                                                now=now),
    "delegate": lambda s, iv, now: service.delegate(s, uow_of(s).tenant_id, iv, channel="email", now=now),
}


@pytest.fixture
def world(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io", "name": "Ada"}}]})
    return tenant, client.post("/api/playbooks", headers=h, json={"name": "p"}).json["id"]


def _made(rt, tenant, pid, status: str, channel: str) -> str:
    with rt.session(tenant.id) as s:
        iv = Intervention(tenant_id=tenant.id, user_id="u1", playbook_id=pid, status=status, channel=channel,
                          message_body="Hello Ada", source="manual", planned_at=rt.now(), updated_at=rt.now())
        s.add(iv)
        s.flush()
        return iv.id


def _walk(rt, tenant, pid, statuses, changes, channel):
    walked = []
    for change, ask in changes.items():
        for status in statuses:
            iv_id = _made(rt, tenant, pid, status, channel)
            allowed = status in states.FROM[change]
            try:
                with rt.session(tenant.id) as s:
                    ask(s, iv_id, rt.now())
                refused = False
            except InvalidState:
                refused = True
            with rt.session(tenant.id) as s:
                now_status = s.get(Intervention, iv_id).status
            expected = states.TO[change] if allowed else status
            assert (refused, now_status) == (not allowed, expected), (change, status)
            walked.append((change, status))
    return walked


def test_every_change_of_an_intervention_from_every_status(rt, world):
    tenant, pid = world
    walked = _walk(rt, tenant, pid, service.INTERVENTION_STATUSES, PERSON, "email")
    assert len(walked) == len(PERSON) * len(service.INTERVENTION_STATUSES)


def test_every_change_of_an_escalation_from_every_status(rt, world):
    tenant, pid = world
    walked = _walk(rt, tenant, pid, service.ESCALATION_STATUSES, ESCALATION, service.ESCALATE)
    assert len(walked) == len(ESCALATION) * len(service.ESCALATION_STATUSES)


def test_the_table_names_every_change_and_only_known_statuses():
    assert set(states.FROM) == set(states.TO) == set(PERSON) | set(ESCALATION)
    known = set(service.INTERVENTION_STATUSES) | set(service.ESCALATION_STATUSES)
    assert {s for allowed in states.FROM.values() for s in allowed} <= known
    assert set(states.TO.values()) <= known
