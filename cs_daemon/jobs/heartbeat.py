"""Workers prove they are alive by writing a heartbeat to the cache store; health reads it.
Each process (API or worker) also writes its own heartbeat record, which `cs status`
shows per process kind (cs_daemon/ops_state.py, docs/operations.md)."""

from __future__ import annotations

import logging
import os
import socket
import time

from .. import ops_state
from ..cache import Cache
from ..channels import in_app_stream
from .repeating import Repeating, WhileWorkerRuns

log = logging.getLogger(__name__)
KEY = "jobs:heartbeat"
INTERVAL = 10
FRESH_FOR = 60


def beat(cache: Cache) -> None:
    cache.set(KEY, str(time.time()), ttl=FRESH_FOR * 2)


def last_beat_age(cache: Cache) -> float | None:
    value = cache.get(KEY)
    return None if value is None else max(0.0, time.time() - float(value))


def process_beat(rt, kind: str, started: float, **extra) -> None:
    """This process's heartbeat record: kind (api, worker), host, pid, when it last beat."""
    host, pid = socket.gethostname(), os.getpid()
    ops_state.put(rt, ops_state.HEARTBEATS, f"{kind}:{host}:{pid}",
                  {"kind": kind, "host": host, "pid": pid, "at": time.time(), "started": started, **extra})


def _streams_open(rt) -> int:
    return in_app_stream.slots_of(rt).open


class ProcessHeartbeat(Repeating):
    """An API process's heartbeat thread (a worker's is WorkerHeartbeat's)."""

    def __init__(self, rt, kind: str):
        super().__init__(f"cs-{kind}-heartbeat", INTERVAL)
        self.rt, self.kind, self.started = rt, kind, time.time()

    def step(self) -> None:
        try:
            process_beat(self.rt, self.kind, self.started, streams_open=_streams_open(self.rt))
        except Exception as exc:
            log.warning("%s heartbeat not written: %s", self.kind, exc)


class WorkerHeartbeat(WhileWorkerRuns):
    """Beats every few seconds while a worker runs, from a thread of the worker process."""

    def __init__(self, cache: Cache, rt=None):
        super().__init__("cs-heartbeat", INTERVAL)
        self.cache = cache
        self.rt = rt
        self.started = time.time()

    def step(self) -> None:
        try:
            beat(self.cache)
            if self.rt is not None:
                process_beat(self.rt, "worker", self.started)
        except Exception as exc:
            log.warning("heartbeat not written: %s", exc)
