"""What one process needs to serve: settings, clock, cache and the unit-of-work factory.
The composition root (cs_daemon/wiring.py) builds it for the web app, the CLI, the
workers and the tests, which pass it down."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import dramatiq
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from .auth.memo import KeyMemo
from .cache import Cache, make_cache
from .clock import Clock
from .config import Settings
from .db import autocommit_connection, session_scope
from .jobs import broker as jobs_broker
from .jobs import context, registry
from .jobs.heartbeat import WorkerHeartbeat
from .jobs.logcontext import JobLogContext
from .jobs.scheduler import Scheduler


class Runtime:
    def __init__(self, settings: Settings, clock: Clock | None = None):
        self.settings = settings
        self.clock = clock or Clock()
        self.cache: Cache = make_cache(settings)
        # API processes remember authenticated keys only where changes reach them all
        self.key_memo = KeyMemo() if settings.redis_url else None
        self.started = time.monotonic()
        self.worker: dramatiq.Worker | None = None

    @property
    def writer(self):
        """The AI message writer of this process (template-only without a model)."""
        if getattr(self, "_writer", None) is None:
            # start-up cost: the openai client is imported only by a process that writes messages
            from .integrations.llm import MessageWriter

            self._writer = MessageWriter.from_settings(self.settings)
        return self._writer

    def now(self):
        return self.clock.now()

    @contextmanager
    def session(self, tenant_id: str | None = None, *, commit: bool = True,
                atomic: bool = True) -> Iterator[Session]:
        with session_scope(self.settings, tenant_id=tenant_id, commit=commit, atomic=atomic) as s:
            yield s

    def statements(self) -> Iterator[Connection]:
        """A connection outside any unit of work, each statement committing itself: for
        fixed Core statements that need no tenant scope, ORM or domain events (a
        delivery's claim and plain record, cs_daemon/delivery/service.py)."""
        return autocommit_connection(self.settings)

    def install_broker(self) -> dramatiq.Broker:
        """Choose the broker for these settings; jobs of this process use this runtime."""
        if not registry.ACTORS:
            raise RuntimeError("no job is wired: build the runtime with cs_daemon.wiring.bootstrap")
        context.set_runtime(self)
        return jobs_broker.install(
            self.settings, [JobLogContext(), WorkerHeartbeat(self.cache, self), Scheduler(self.cache, registry.periodic)],
            actors=registry.ACTORS,
        )

    def start_worker(self) -> dramatiq.Worker:
        """The in-process worker of the embedded mode (one per process)."""
        broker = self.install_broker()
        self.worker = dramatiq.Worker(broker, worker_threads=self.settings.cs_worker_threads)
        self.worker.start()
        return self.worker

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
