"""An attempt whose answer comes while PostgreSQL is down is still recorded once it is
back (found by the fault campaign, tests/chaos/): the receiver is not sent it twice.

A private PostgreSQL cluster (tests/support/stores.py) is crashed while a real receiver
on loopback holds the attempt's request; the receiver answers 200 while the database is
down; the database comes back after a pause. The attempt must end `delivered`, with one
logged attempt, and the receiver must have had exactly one request."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from sqlalchemy import select

from cs_daemon import migrate
from cs_daemon.config import Settings
from cs_daemon.db import dispose_engines
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery, DeliveryAttempt
from cs_daemon.outbox import service as outbox
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from cs_daemon.webhooks import service as webhooks
from tests.support.processes import Deadline
from tests.support.receiver import Receiver
from tests.support.stores import PrivatePostgres

SECRET = "record-restart-secret"


@pytest.fixture
def pg():
    cluster = PrivatePostgres()
    try:
        cluster.start()
        with psycopg.connect(cluster.url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute("CREATE DATABASE cs")
        yield cluster
    finally:
        dispose_engines()
        cluster.close()


@pytest.fixture
def rt(pg, tmp_path):
    settings = Settings(database_url=pg.url.rsplit("/", 1)[0] + "/cs", redis_url=None, cs_secret_key=SECRET,
                        cs_data_dir=tmp_path, allow_private_webhook_urls=True)
    migrate.upgrade(settings)
    return Runtime(settings)


def test_an_answer_that_comes_while_the_database_is_down_is_recorded_once_it_is_back(rt, pg):
    answer = threading.Event()
    receiver = Receiver(script=[("hold", answer, 200)])
    try:
        with rt.session() as s:
            tenant = tenants.create(s, name="Restart", owner_email="o@restart.example", now=rt.now(),
                                    plan_tier="growth").tenant.id
        with rt.session(tenant) as s:
            webhooks.register(s, tenant, url=receiver.url, description="held", events=None, now=rt.now(),
                              secret_key=SECRET, allow_private=True)
            outbox.record(s, tenant, "user.risk_changed", {"user_id": "u1", "previous_risk": "low",
                                                            "new_risk": "high", "changed_at": "t"}, now=rt.now())
        with rt.session(tenant) as s:
            [made] = s.scalars(select(Delivery)).all()

        outcome: list = []
        worker = threading.Thread(target=lambda: outcome.append(delivery.attempt(rt, made.id)), daemon=True)
        worker.start()
        deadline = Deadline(10)
        while not receiver.requests:
            assert deadline, "the attempt never reached the receiver"
            time.sleep(0.02)
        pg.stop("immediate")          # the database crashes while the attempt is out
        answer.set()                  # the receiver takes it: 200
        time.sleep(2.0)               # the attempt's record meets a database that is down
        pg.start()
        worker.join(delivery.RECORD_PATIENCE)
        assert not worker.is_alive() and outcome == ["delivered"], outcome

        with rt.session(tenant) as s:
            row = s.get(Delivery, made.id)
            attempts = s.scalars(select(DeliveryAttempt).where(DeliveryAttempt.delivery_id == made.id)).all()
        assert row.status == "delivered" and row.attempts == 1 and row.locked_until is None
        assert [(a.number, a.status_code) for a in attempts] == [(1, 200)]
        assert delivery.attempt(rt, made.id) is None        # nothing left to send
        assert len(receiver.requests) == 1
    finally:
        answer.set()
        receiver.close()
