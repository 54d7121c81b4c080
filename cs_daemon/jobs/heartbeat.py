"""Workers prove they are alive by writing a heartbeat to the cache store; health reads it."""

from __future__ import annotations

import logging
import threading
import time

from dramatiq.middleware import Middleware

from ..cache import Cache

log = logging.getLogger(__name__)
KEY = "jobs:heartbeat"
INTERVAL = 10
FRESH_FOR = 60


def beat(cache: Cache) -> None:
    cache.set(KEY, str(time.time()), ttl=FRESH_FOR * 2)


def last_beat_age(cache: Cache) -> float | None:
    value = cache.get(KEY)
    return None if value is None else max(0.0, time.time() - float(value))


class WorkerHeartbeat(Middleware):
    """Beats every few seconds while a worker runs, from a thread of the worker process."""

    def __init__(self, cache: Cache):
        self.cache = cache
        self._stop = threading.Event()

    def after_worker_boot(self, broker, worker) -> None:
        self._stop.clear()
        threading.Thread(target=self._run, name="cs-heartbeat", daemon=True).start()

    def before_worker_shutdown(self, broker, worker) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                beat(self.cache)
            except Exception as exc:
                log.warning("heartbeat not written: %s", exc)
            self._stop.wait(INTERVAL)
