"""Every transition of the delivery and decision-request state machines, walked through
the services: from each status, each change either moves the row to the status of the
table (delivery/states.py and decisions/request_states.py, FROM and TO) or is refused and
changes nothing (docs/webhooks.md, "Delivery and retry"; docs/decisions.md, "Owed
decisions")."""

from __future__ import annotations

from datetime import timedelta

from cs_daemon.db import new_id
from cs_daemon.decisions import request_states, requests
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery import states
from cs_daemon.delivery.models import Delivery
from cs_daemon.errors import InvalidState
from cs_daemon.integrations.http import Outcome

KIND = "walk"      # a kind with no listener, guard or lock: only the delivery moves


def _attempted(outcome):
    def attempt(rt, session, delivery_id):
        claimed = delivery.claim(session.connection(), delivery_id, rt.now())
        return claimed is not None and delivery.record(session, claimed, outcome, at=rt.now(),
                                                       now=rt.now()) is not None
    return attempt


def _cancel(rt, session, delivery_id):
    return delivery.cancel(session, subject_id=session.get(Delivery, delivery_id).subject_id, kind=KIND,
                           now=rt.now()) == 1


def _replay(rt, session, delivery_id):
    try:
        delivery.reopen(session, delivery_id, rt.now())
    except InvalidState:
        return False
    return True


DELIVERY_CHANGES = {   # change -> the service call that makes it; True when it moved the row
    "deliver": _attempted(Outcome(200, "ok", None, 1.0)),
    "retry": _attempted(Outcome(500, "no", "HTTP 500", 1.0)),
    "fail": _attempted(Outcome(None, None, "refused for good", 1.0, permanent=True)),
    "cancel": _cancel,
    "replay": _replay,
}


def _delivery(rt, tenant, status):
    with rt.session(tenant.id) as s:
        d = Delivery(tenant_id=tenant.id, kind=KIND, channel="sink", url="sink:walk", body="{}", secret_enc="",
                     event_type="walk", subject_id=new_id(), status=status, attempts=1,
                     next_attempt_at=rt.now() if status in states.OPEN else None,
                     created_at=rt.now(), updated_at=rt.now())
        s.add(d)
        s.flush()
        return d.id


def test_every_change_of_a_delivery_from_every_status(rt, tenant):
    walked = []
    for change, make in DELIVERY_CHANGES.items():
        for status in states.STATUSES:
            delivery_id = _delivery(rt, tenant, status)
            with rt.session() as s:
                moved = make(rt, s, delivery_id)
            with rt.session() as s:
                now_status = s.get(Delivery, delivery_id).status
            allowed = status in states.FROM[change]
            expected = (states.reopened(1) if change == "replay" else states.TO[change]) if allowed else status
            assert (moved, now_status) == (allowed, expected), (change, status)
            walked.append((change, status))
    assert len(walked) == len(DELIVERY_CHANGES) * len(states.STATUSES)


def test_a_replay_of_a_delivery_never_attempted_leaves_it_pending(rt, tenant):
    delivery_id = _delivery(rt, tenant, states.FAILED)
    with rt.session() as s:
        s.get(Delivery, delivery_id).attempts = 0
    with rt.session() as s:
        assert delivery.reopen(s, delivery_id, rt.now()).status == states.PENDING == states.reopened(0)


def test_the_delivery_table_names_only_known_statuses():
    assert set(states.FROM) == set(states.TO) == set(DELIVERY_CHANGES)
    assert {s for allowed in states.FROM.values() for s in allowed} <= set(states.STATUSES)
    assert set(states.TO.values()) <= set(states.STATUSES)
    assert set(states.OPEN) <= set(states.STATUSES)


REQUEST_CHANGES = {   # change -> the service call that makes it
    "claim": lambda rt, rid, tenant: _in(rt, lambda s: requests.claim(s, rid, rt.now())),
    "decide": lambda rt, rid, tenant: requests.decide_for(rt, tenant.id, "u1", request_id=rid),
    "back_off": lambda rt, rid, tenant: requests.failed(rt, rid, 1, "it broke"),
    "give_up": lambda rt, rid, tenant: requests.failed(rt, rid, requests.MAX_ATTEMPTS, "it broke"),
}


def _in(rt, fn):
    with rt.session() as s:
        return fn(s)


def _request(rt, tenant, status):
    now = rt.now()
    with rt.session(tenant.id) as s:
        r = DecisionRequest(tenant_id=tenant.id, user_id="u1", events=["x"], created_at=now - timedelta(minutes=5),
                            attempts=1, claimed_until=now + requests.LEASE if status == request_states.LEASED else None,
                            done_at=now if status == request_states.DONE else None,
                            failed_at=now if status == request_states.FAILED else None)
        s.add(r)
        s.flush()
        assert request_states.status_of(r, now) == status
        return r.id


def _columns(rt, request_id):
    with rt.session() as s:
        r = s.get(DecisionRequest, request_id)
        return request_states.status_of(r, rt.now()), (r.done_at, r.failed_at, r.claimed_until, r.attempts,
                                                       r.last_error)


def test_every_change_of_a_decision_request_from_every_status(rt, tenant, clock):
    walked = []
    for change, make in REQUEST_CHANGES.items():
        for status in request_states.STATUSES:
            request_id = _request(rt, tenant, status)
            clock.advance(seconds=1)
            _, before = _columns(rt, request_id)
            make(rt, request_id, tenant)
            now_status, after = _columns(rt, request_id)
            allowed = status in request_states.FROM[change]
            expected = request_states.TO[change] if allowed else status
            assert (now_status, after != before) == (expected, allowed), (change, status)
            walked.append((change, status))
    assert len(walked) == len(REQUEST_CHANGES) * len(request_states.STATUSES)


def test_a_lease_or_a_backoff_that_ran_out_leaves_the_request_open_again(rt, tenant, clock):
    request_id = _request(rt, tenant, request_states.LEASED)
    clock.advance(seconds=requests.LEASE.total_seconds())
    assert _columns(rt, request_id)[0] == request_states.OPEN
    requests.failed(rt, request_id, 1, "it broke")
    assert _columns(rt, request_id)[0] == request_states.LEASED
    clock.advance(seconds=requests.backoff(1).total_seconds())
    assert _columns(rt, request_id)[0] == request_states.OPEN
    assert _in(rt, lambda s: requests.claim(s, request_id, rt.now())) is not None


def test_the_request_table_names_only_known_statuses():
    assert set(request_states.FROM) == set(request_states.TO) == set(REQUEST_CHANGES)
    assert {s for allowed in request_states.FROM.values() for s in allowed} <= set(request_states.STATUSES)
    assert set(request_states.TO.values()) <= set(request_states.STATUSES)
