"""Deliveries survive a killed worker and lost broker messages (production mode).

A batch of signed webhook deliveries is in flight from a real `cs worker` (Dramatiq on
Redis, PostgreSQL) to a slow loopback receiver when the whole worker tree is SIGKILLed;
the Redis keys of the Dramatiq namespace are then deleted, so every queued, prefetched or
delayed message is gone and only the `deliveries` rows remain. A second `cs worker`
must bring every delivery to `delivered` by itself: its periodic sweep re-enqueues the
due rows, and the rows that were leased at the kill once their lease (service.LEASE)
has run out. Nothing is shortened or mocked: the real lease and sweep period apply.

Delivery is at-least-once: a POST that reached the receiver but whose worker died before
recording it is sent again (same webhook-id). The test counts those duplicates, requires
that they come only from rows leased (claimed, not recorded) at the kill - at most
processes x threads - and that no row delivered before the kill was sent or attempted
again.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import pytest
import redis
from sqlalchemy import func, select

from cs_daemon.config import Settings
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.actors import SWEEP_EVERY_SECONDS
from cs_daemon.delivery.models import Delivery, DeliveryAttempt
from cs_daemon.jobs import broker as jobs_broker
from cs_daemon.jobs.heartbeat import last_beat_age
from cs_daemon.outbox import service as outbox
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from cs_daemon.webhooks import service as webhooks
from tests.conftest import REDIS, clean
from tests.support.processes import CS, Deadline, Service, Tree, service_env, still_running
from tests.support.receiver import Receiver

PROCESSES, THREADS = 1, 4
BATCH = 200              # deliveries in the batch
ANSWER_AFTER = 0.3       # seconds the receiver takes per request: ~13 deliveries/s with 4 threads
KILL_AT = 40             # SIGKILL once this many are delivered (well before the batch ends)
SECRET = "recovery-test-secret"


@dataclass
class SlowReceiver(Receiver):
    """The loopback receiver of the webhook tests, answering 200 after a pause."""

    pause: float = ANSWER_AFTER

    def __post_init__(self):
        super().__post_init__()
        default = self.server.handle_error

        def handle_error(request, client_address):  # a killed worker resets its connections
            if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                default(request, client_address)

        self.server.handle_error = handle_error

    def answer(self, handler) -> None:
        time.sleep(self.pause)
        super().answer(handler)


# --- fixtures ------------------------------------------------------------------------


@pytest.fixture
def redis_client():
    client = redis.Redis.from_url(REDIS)
    yield client
    client.close()


@pytest.fixture
def prefix(redis_client):
    value = f"csrecovery-{uuid.uuid4().hex[:8]}"
    yield value
    keys = list(redis_client.scan_iter(f"{value}:*"))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def receiver():
    r = SlowReceiver()
    yield r
    r.close()


@pytest.fixture
def workers():
    """Started worker trees; every process in them is SIGKILLed at teardown."""
    started: list[Tree] = []
    yield started
    for tree in started:
        tree.kill()


@pytest.fixture
def rt(pg_url, prefix, tmp_path):
    """The session's migrated PostgreSQL database (conftest `pg_url`), emptied before and
    after, and Redis under a prefix of this test."""
    settings = Settings(cs_data_dir=tmp_path / "data", database_url=pg_url, redis_url=REDIS,
                        cs_redis_prefix=prefix, cs_secret_key=SECRET, allow_private_webhook_urls=True)
    clean(settings)
    runtime = Runtime(settings)
    runtime.install_broker()  # deliveries are enqueued on Redis when their transaction commits
    yield runtime
    # Later tests of this process expect the embedded broker again.
    jobs_broker.install(Settings(cs_data_dir=tmp_path / "data", database_url=None, redis_url=None,
                                 cs_secret_key="t"))
    clean(settings)


# --- helpers -------------------------------------------------------------------------


def start_worker(rt: Runtime, tmp_path, name: str, workers: list[Tree]) -> Tree:
    s = rt.settings
    env = service_env(DATABASE_URL=s.database_url, REDIS_URL=s.redis_url, CS_REDIS_PREFIX=s.cs_redis_prefix,
                      CS_SECRET_KEY=SECRET, ALLOW_PRIVATE_WEBHOOK_URLS="1", CS_DATA_DIR=str(tmp_path / "data"))
    svc = Service([CS, "worker", "--processes", str(PROCESSES), "--threads", str(THREADS)], env=env,
                  cwd=tmp_path, log=tmp_path / f"{name}.err", new_session=True)
    tree = Tree(svc)
    workers.append(tree)
    return tree


def sigkill_tree(tree: Tree) -> None:
    """SIGKILL every process of a `cs worker`: the Dramatiq process groups first (they do the
    work), then the supervisor's (so it cannot restart them), and wait until none lives."""
    tree.record()
    for sid in tree.sessions:
        try:
            os.killpg(sid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    tree.kill()
    deadline = Deadline(10)
    while left := still_running(tree.known, tree.sessions):
        assert deadline, f"still running after SIGKILL: {[(p.pid, p.cmdline) for p in left]}"
        time.sleep(0.05)


def rows(rt: Runtime) -> dict[str, Delivery]:
    with rt.session() as s:
        return {d.id: d for d in s.scalars(select(Delivery))}


def delivered_count(rt: Runtime) -> int:
    with rt.session() as s:
        return s.scalar(select(func.count()).select_from(Delivery).where(Delivery.status == "delivered"))


def wait_delivered(rt: Runtime, at_least: int, timeout: float, tree: Tree) -> float:
    deadline = Deadline(timeout)
    start = time.monotonic()
    while (count := delivered_count(rt)) < at_least:
        tree.record()
        assert tree.root.proc.poll() is None, f"cs worker exited\n{tree.root.describe()}"
        assert deadline, (f"{count}/{at_least} delivered after {timeout:.0f} s\n"
                          f"{tree.root.describe()}")
        time.sleep(0.05)
    return time.monotonic() - start


# --- the test ------------------------------------------------------------------------


def test_a_killed_worker_and_lost_messages_only_delay_deliveries(rt, receiver, workers, redis_client,
                                                                  prefix, tmp_path):
    began = time.monotonic()
    with rt.session() as s:
        tenant = tenants.create(s, name="Recovery", owner_email="owner@recovery.example", now=rt.now(),
                                plan_tier="growth").tenant.id
    with rt.session(tenant) as s:
        webhooks.register(s, tenant, url=receiver.url, description="slow receiver", events=None,
                          now=rt.now(), secret_key=SECRET, allow_private=True)

    first = start_worker(rt, tmp_path, "worker1", workers)
    deadline = Deadline(30)
    while last_beat_age(rt.cache) is None:
        assert first.root.proc.poll() is None and deadline, f"worker not up\n{first.root.describe()}"
        time.sleep(0.05)

    # The batch: one transaction records the events, fans them out to the endpoint and,
    # once committed, enqueues one message per delivery on Redis.
    with rt.session(tenant) as s:
        outbox.record_many(s, tenant, [("user.risk_changed", {"user_id": f"u{i}", "previous_risk": "low",
                                                              "new_risk": "high", "changed_at": "t"})
                                       for i in range(BATCH)], now=rt.now())
    assert len(rows(rt)) == BATCH

    wait_delivered(rt, KILL_AT, 30, first)
    sigkill_tree(first)
    killed_at = rt.now()
    time.sleep(0.3)  # let the receiver take in whatever reached its socket before the kill

    before = rows(rt)
    sent_before = Counter(r.headers["webhook-id"] for r in list(receiver.requests))
    delivered_before = {i: d.delivered_at for i, d in before.items() if d.status == "delivered"}
    leased = {i: d.locked_until for i, d in before.items() if d.status != "delivered"
              and d.locked_until is not None and d.locked_until > killed_at}
    in_flight = set(sent_before) - set(delivered_before)
    assert KILL_AT <= len(delivered_before) < BATCH, "the kill did not land in the middle of the batch"
    assert set(delivered_before) <= set(sent_before)
    assert in_flight <= set(leased), "a POST sent but not recorded is on a leased row"
    assert len(leased) <= PROCESSES * THREADS, "more claims in flight than worker threads"

    # Lose every broker message: queue, prefetched (unacked) and delayed ones alike.
    queue_keys = list(redis_client.scan_iter(f"{prefix}:dramatiq*"))
    queued = redis_client.hlen(f"{prefix}:dramatiq:default.msgs")
    assert queued > 0, "no message was left to lose"
    redis_client.delete(*queue_keys)
    assert not list(redis_client.scan_iter(f"{prefix}:dramatiq*"))

    second = start_worker(rt, tmp_path, "worker2", workers)
    remaining = BATCH - len(delivered_before)
    budget = (delivery.LEASE.total_seconds() + 2 * SWEEP_EVERY_SECONDS
              + remaining * ANSWER_AFTER / (PROCESSES * THREADS) + 20)
    recovered_in = wait_delivered(rt, BATCH, budget, second)
    sigkill_tree(second)

    after = rows(rt)
    sent = Counter(r.headers["webhook-id"] for r in list(receiver.requests))
    duplicates = {i: n - 1 for i, n in sent.items() if n > 1}
    with rt.session() as s:
        attempts = Counter(s.scalars(select(DeliveryAttempt.delivery_id)))
        codes = set(s.scalars(select(DeliveryAttempt.status_code)))

    # Every delivery is delivered, was received at least once and has exactly one
    # recorded attempt (the 200 that was recorded; a killed attempt leaves no record).
    assert {d.status for d in after.values()} == {"delivered"}
    assert set(sent) == set(after)
    assert all(d.attempts == 1 for d in after.values()), Counter(d.attempts for d in after.values())
    assert attempts == Counter({i: 1 for i in after}) and codes == {200}
    assert all(d.locked_until is None and d.next_attempt_at is None for d in after.values())

    # Nothing delivered before the kill was sent, attempted or changed again.
    for i, at in delivered_before.items():
        assert sent[i] == 1 and after[i].delivered_at == at, i
    # Only rows claimed at the kill were sent twice (once each), every POST that had reached
    # the receiver unrecorded was sent again (at-least-once), and not before its lease ran
    # out: a lease is never taken over early.
    assert set(duplicates) <= set(leased) and all(n == 1 for n in duplicates.values()), duplicates
    assert in_flight <= set(duplicates), in_flight - set(duplicates)
    for i, until in leased.items():
        assert after[i].delivered_at >= until, (i, after[i].delivered_at, until)

    print(f"\n[delivery recovery] batch {BATCH}; delivered before the kill {len(delivered_before)}; "
          f"leased at the kill {len(leased)} (POST already received {len(in_flight)}); broker messages lost {queued}; "
          f"sent twice {sum(duplicates.values())} (all of them leased at the kill); "
          f"recovered in {recovered_in:.1f} s; test body {time.monotonic() - began:.1f} s")
