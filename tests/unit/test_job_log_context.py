"""A job's log lines name the request that enqueued it, else the message's own id
(cs_daemon/jobs/logcontext.py), run by a real dramatiq worker."""

from __future__ import annotations

import logging

import dramatiq
from dramatiq.brokers.stub import StubBroker

from cs_daemon import logs
from cs_daemon.jobs.logcontext import JobLogContext


class Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.addFilter(logs.ContextFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_a_job_names_the_request_that_enqueued_it_or_its_message():
    broker = StubBroker()
    broker.add_middleware(JobLogContext())
    keep = Keep()
    job_log = logging.getLogger("tests.job")
    job_log.addHandler(keep)
    job_log.setLevel(logging.INFO)

    @dramatiq.actor(broker=broker, actor_name="say_hello_job")
    def say(n):
        job_log.info("job %s", n)

    worker = dramatiq.Worker(broker, worker_threads=1)
    worker.start()
    try:
        with logs.bind(request_id="req-from-api"):
            say.send(1)
        unbound = say.send(2)
        broker.join(say.queue_name)
        worker.join()
    finally:
        worker.stop()
        job_log.removeHandler(keep)
    by_n = {r.args[0]: r.request_id for r in keep.records}
    assert by_n == {1: "req-from-api", 2: unbound.message_id}
