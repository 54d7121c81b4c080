"""The fault campaign (docs/chaos.md): production mode with real processes under faults.

Two API processes (gunicorn, as `cs serve` runs them) and two Dramatiq worker processes
run on a private PostgreSQL cluster and a private redis-server that this test starts in
a temporary folder. A mixed load (tests/support/workload.py: tracked events, approved
email, webhook and in_app interventions, external action dispatches; every tracked
event and delivered intervention fans out to a webhook endpoint) goes to both API
processes, while a driver kill -9s an API or a worker process (and starts it again),
restarts Redis (losing every queued job message) and crashes and restarts PostgreSQL,
in turns. Receivers are real: aiosmtpd and HTTP servers on loopback.

Then, with every fault over, the service must catch up by itself (the real lease and
sweep periods apply) and the test checks: every event acknowledged with 200 is stored
exactly once; every approved intervention and every dispatch reached its receiver;
every delivery row is delivered (none stuck, none failed: every receiver answers 200);
a delivery received twice had a worker killed between its first and its last receipt
(an attempt whose answer came but whose record did not: an attempt answered while the
database is down waits for it to record, see docs/webhooks.md). No request is answered
5xx outside a PostgreSQL outage, and one that overlaps an outage answers 503
`database_unavailable` (docs/deploy.md), never 500.

CS_CHAOS_SECONDS sets how long the faults go on (default 45: the CI run), CS_CHAOS_EVERY
the seconds between two faults (default 4); `just chaos` runs a long campaign.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg
import pytest

from cs_daemon import migrate
from cs_daemon.config import Settings
from cs_daemon.db import dispose_engines
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from tests.chaos.fleet import Fleet, Member
from tests.support.processes import Deadline, service_env
from tests.support.receiver import Receiver
from tests.support.smtp_server import Mailbox
from tests.support.stores import PrivatePostgres, PrivateRedis
from tests.support.workload import Driver, Workload

SECONDS = float(os.environ.get("CS_CHAOS_SECONDS", "45"))
EVERY = float(os.environ.get("CS_CHAOS_EVERY", "4"))
RECOVERY = 150.0          # lease (20 s) + sweep period (15 s) + grace (10 s) + a retry (30 s), with room
THREADS = 4               # threads of each worker process
SECRET = "chaos-secret"
FAULTS = ("kill api", "kill worker", "restart redis", "restart postgres")


@dataclass
class TimedReceiver(Receiver):
    """A loopback receiver answering 200 after a short pause (so kills land mid-attempt),
    quiet about connections a killed worker reset."""

    def __post_init__(self):
        super().__post_init__()
        self.server.handle_error = lambda request, address: None

    def answer(self, handler) -> None:
        time.sleep(0.03)
        super().answer(handler)


@dataclass
class TimedMailbox(Mailbox):
    """The SMTP server, noting when each message came."""

    times: list[float] = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope):
        answer = await super().handle_DATA(server, session, envelope)
        self.times.append(time.monotonic())
        return answer


@dataclass
class Faults:
    """The driver: one fault every `every` seconds, the kinds in a shuffled round so each
    comes once a round; what it did and when (monotonic)."""

    fleet: Fleet
    pg: PrivatePostgres
    redis: PrivateRedis
    every: float
    log: list[tuple[float, str]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self, seconds: float) -> None:
        rng, round_ = random.Random(20), []
        deadline = Deadline(seconds)
        # at least one round, so that each kind of fault came once even on a slow machine
        while (deadline or sum(self.counts().values()) < len(FAULTS)) and not self.stopping.wait(self.every):
            if not round_:
                round_ = rng.sample(FAULTS, len(FAULTS))
            self.inflict(round_.pop(), rng)

    def inflict(self, fault: str, rng: random.Random) -> None:
        if fault in ("kill api", "kill worker"):
            member: Member = rng.choice([m for m in self.fleet.members if m.kind == fault.split()[1]])
            self.log.append((time.monotonic(), f"kill -9 {member.name}"))
            member.kill9()
            time.sleep(rng.uniform(0.2, 1.5))
            member.start()
            member.wait_ready()
        elif fault == "restart redis":
            self.log.append((time.monotonic(), "restart redis"))
            self.redis.restart(down=rng.uniform(0.2, 2.0))
        else:
            self.log.append((time.monotonic(), "restart postgres"))
            self.pg.restart("immediate", down=rng.uniform(0.2, 2.0))
            self.log.append((time.monotonic(), "postgres back"))

    def between(self, start: float, end: float, kinds: tuple[str, ...]) -> bool:
        return any(start <= at <= end and what.startswith(kinds) for at, what in self.log)

    def outages(self) -> list[tuple[float, float]]:
        """When PostgreSQL was down: from its crash until it accepted connections again."""
        downs = [at for at, what in self.log if what == "restart postgres"]
        ups = [at for at, what in self.log if what == "postgres back"]
        return list(zip(downs, ups))

    def during_outage(self, sent: float, answered: float) -> bool:
        return any(sent <= up and answered >= down for down, up in self.outages())

    def counts(self) -> Counter:
        return Counter(what.rstrip("0123456789") for _, what in self.log if what != "postgres back")


# --- the stores and processes --------------------------------------------------------------


@pytest.fixture
def stores(tmp_path):
    pg, redis_ = PrivatePostgres(), PrivateRedis(tmp_path)
    try:
        pg.start()
        redis_.start()
        with psycopg.connect(pg.url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute("CREATE DATABASE cs")
        yield pg, redis_
    finally:
        dispose_engines()
        redis_.close()
        pg.close()


@pytest.fixture
def peers():
    hooks, actions, mailbox = TimedReceiver(), TimedReceiver(), TimedMailbox()
    yield hooks, actions, mailbox
    hooks.close()
    actions.close()
    mailbox.close()


def _settings(pg: PrivatePostgres, redis_: PrivateRedis, tmp_path) -> Settings:
    return Settings(database_url=pg.url.rsplit("/", 1)[0] + "/cs", redis_url=redis_.url, cs_redis_prefix="chaos",
                    cs_secret_key=SECRET, cs_data_dir=tmp_path / "data", cs_web_processes=1, cs_stream_slots=8,
                    allow_private_webhook_urls=True)


@pytest.fixture
def fleet(stores, peers, tmp_path):
    pg, redis_ = stores
    settings = _settings(pg, redis_, tmp_path)
    migrate.upgrade(settings)
    env = service_env(DATABASE_URL=settings.database_url, REDIS_URL=settings.redis_url, CS_REDIS_PREFIX="chaos",
                      CS_SECRET_KEY=SECRET, CS_DATA_DIR=str(tmp_path / "data"), ALLOW_PRIVATE_WEBHOOK_URLS="1",
                      SMTP_URL=peers[2].url, CS_WEB_PROCESSES="1", CS_STREAM_SLOTS="8", PYTHONUNBUFFERED="1")
    made = Fleet.make(settings, env, tmp_path, apis=2, workers=2, threads=THREADS)
    try:
        made.start()
        yield made
    finally:
        made.close()


# --- what the database holds -----------------------------------------------------------------


def _query(pg: PrivatePostgres, sql: str, *args) -> list[tuple]:
    with psycopg.connect(pg.url.rsplit("/", 1)[0].replace("+psycopg", "") + "/cs", autocommit=True,
                         connect_timeout=5) as conn:
        return conn.execute(sql, args).fetchall()


def _settled(pg: PrivatePostgres) -> bool:
    """No delivery open and no owed decision."""
    return not _query(pg, "SELECT 1 FROM deliveries WHERE status IN ('pending', 'retrying') LIMIT 1")


# --- the test ----------------------------------------------------------------------------------


def test_every_acknowledged_piece_of_work_survives_kills_and_restarts(stores, peers, fleet, tmp_path):
    began = time.monotonic()
    pg, redis_ = stores
    hooks, actions, mailbox = peers
    rt = Runtime(_settings(pg, redis_, tmp_path))
    with rt.session() as s:
        key = tenants.create(s, name="Chaos", owner_email="owner@chaos.example", now=rt.now(),
                             plan_tier="scale").key.secret
    dispose_engines()   # this process's pool would not survive the restarts: the checks connect afresh
    load = Workload(fleet.bases, key, timeout=3.0)   # a process still booting holds a request: not for long
    load.setup(hooks_url=hooks.url, actions_url=actions.url)

    faults = Faults(fleet, pg, redis_, EVERY)
    driver = Driver(load, threads=4, pause=0.05).start()
    try:
        faults.run(SECONDS)
    finally:
        driver.stop()
    chaos_ended = time.monotonic()

    # Recovery: every process runs again; the service catches up by itself.
    for member in fleet.members:
        assert member.alive(), f"{member.name} exited\n{member.service.describe()}"
    deadline = Deadline(RECOVERY)
    while not _settled(pg):
        assert deadline, f"deliveries still open {RECOVERY:.0f} s after the faults: " + str(
            _query(pg, "SELECT status, count(*), min(next_attempt_at), max(attempts) FROM deliveries "
                       "WHERE status IN ('pending', 'retrying') GROUP BY status"))
        time.sleep(1)
    recovered_in = time.monotonic() - chaos_ended
    time.sleep(1)   # a receiver's last request is recorded

    acked = load.acked
    # Events: every acknowledged one stored exactly once.
    stored = Counter(dict(_query(pg, "SELECT idempotency_key, count(*) FROM events WHERE idempotency_key "
                                     "LIKE 'ev-%%' GROUP BY idempotency_key")))
    lost_events = sorted(acked.events - set(stored))
    assert not lost_events, f"{len(lost_events)} acknowledged events not stored: {lost_events[:10]}"
    assert all(stored[k] == 1 for k in acked.events)

    # Deliveries: none stuck, none failed (every receiver answers 200).
    statuses = Counter(dict(_query(pg, "SELECT status, count(*) FROM deliveries GROUP BY status")))
    assert set(statuses) == {"delivered"}, statuses

    # Every delivery reached its receiver; duplicates only where an attempt was cut short.
    rows = _query(pg, "SELECT d.id, d.url, d.subject_id, d.kind FROM deliveries d")
    http_rows = {r[0]: r for r in rows if r[1].startswith("http")}
    received = Counter(r.headers.get("webhook-id") for r in [*hooks.requests, *actions.requests])
    times: dict[str, list[float]] = {}
    for r in [*hooks.requests, *actions.requests]:
        times.setdefault(r.headers.get("webhook-id"), []).append(r.at)
    lost_http = sorted(set(http_rows) - set(received))
    mails = Counter()
    mail_times: dict[str, list[float]] = {}
    for got, at in zip(list(mailbox.received), list(mailbox.times)):
        text = got.message.get_body(("plain",)).get_content()
        for iv, marker in acked.markers.items():
            if f"{marker}." in text:
                mails[iv] += 1
                mail_times.setdefault(iv, []).append(at)
    in_app = Counter(dict(_query(pg, "SELECT intervention_id, count(*) FROM in_app_messages GROUP BY intervention_id")))
    hooked = {r[2] for r in http_rows.values() if r[3] == "channel" and received[r[0]]}
    dispatched = {r[2] for r in http_rows.values() if r[3] == "dispatch" and received[r[0]]}
    reached = {iv for iv, ch in acked.interventions.items()
               if (ch == "email" and mails[iv]) or (ch == "in_app" and in_app[iv]) or (ch == "webhook" and iv in hooked)}
    lost_interventions = sorted(set(acked.interventions) - reached)
    lost_actions = sorted(acked.actions - dispatched)
    cut_short = ("kill -9 worker",)
    twice = {d: n - 1 for d, n in received.items() if n > 1}
    twice.update({iv: n - 1 for iv, n in mails.items() if n > 1})
    # a receiver may read a request a little after the worker that wrote it was killed
    unexplained = [d for d in twice if not faults.between(min((times.get(d) or mail_times[d])) - 1.0,
                                                           max((times.get(d) or mail_times[d])), cut_short)]
    kinds = faults.counts()
    print(f"\n[chaos] {SECONDS:.0f} s of faults every {EVERY:.0f} s; events acknowledged {len(acked.events)}; "
          f"interventions approved {len(acked.interventions)} ({dict(Counter(acked.interventions.values()))}); "
          f"dispatches {len(acked.actions)}; deliveries {sum(statuses.values())} ({dict(statuses)}); "
          f"kills {kinds['kill -9 api'] + kinds['kill -9 worker']} (api {kinds['kill -9 api']}, "
          f"worker {kinds['kill -9 worker']}); restarts redis {kinds['restart redis']}, "
          f"postgres {kinds['restart postgres']}; duplicates {sum(twice.values())} (unexplained {len(unexplained)}); "
          f"lost {len(lost_events) + len(lost_http) + len(lost_interventions) + len(lost_actions)}; "
          f"answers {dict(load.answers)}; recovered in {recovered_in:.0f} s; test {time.monotonic() - began:.0f} s")
    print("[chaos] faults: " + ", ".join(f"{at - began:.1f} s {what}" for at, what in faults.log))
    unanswered: Counter = Counter()     # requests with no answer in the 15 s after each kind of fault
    for fault_at, what in faults.log:
        unanswered[what.rstrip("0123456789")] += sum(1 for _, failed, _ in load.dropped
                                                     if fault_at - 1 <= failed <= fault_at + 15)
    print(f"[chaos] requests without an answer within 15 s of a fault, by fault: {dict(unanswered)}")
    after_outage = [what for sent, answered, what in load.failures if not faults.during_outage(sent, answered)]
    print(f"[chaos] 5xx answers: {len(load.failures)}, of them outside a PostgreSQL outage {len(after_outage)}")
    for line in after_outage[:10]:
        print(f"[chaos] 5xx outside an outage: {line}")
    assert not lost_http, f"{len(lost_http)} deliveries never reached their receiver: {lost_http[:5]}"
    assert not lost_interventions, f"approved but never received: {lost_interventions[:5]}"
    assert not lost_actions, f"dispatched but never received: {lost_actions[:5]}"
    assert all(n == 1 for n in in_app.values()), "an in-app message written twice"
    assert not unexplained, (f"received twice with no kill or crash between: "
                             f"{[(d, [round(t - began, 2) for t in times.get(d) or mail_times[d]]) for d in unexplained[:5]]}; "
                             f"faults {[(round(at - began, 2), what) for at, what in faults.log]}")
    assert not after_outage, f"{len(after_outage)} answers 5xx outside a PostgreSQL outage"
    assert {what.split(" -> ")[1][:3] for _, _, what in load.failures} <= {"503"}, "a 5xx other than 503"
    assert kinds["kill -9 api"] and kinds["kill -9 worker"] and kinds["restart redis"] and kinds["restart postgres"]
