"""Periodic jobs, once per cluster: every worker process runs a scheduler thread, and for
each time slot of a task the first to claim the slot in the shared cache (Redis SET NX in
production) enqueues the job; the others see the claim and do nothing."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from ..cache import Cache
from .repeating import WhileWorkerRuns

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Periodic:
    name: str
    every_seconds: int
    send: Callable[[], object]


def due(cache: Cache, task: Periodic, now: float) -> bool:
    """Claim this task's current slot; True for exactly one caller per slot."""
    slot = int(now // task.every_seconds)
    return cache.add(f"sched:{task.name}:{slot}", "1", ttl=task.every_seconds * 2)


def tick(cache: Cache, tasks: list[Periodic], now: float) -> list[str]:
    sent = []
    for task in tasks:
        try:
            if due(cache, task, now):
                task.send()
                sent.append(task.name)
        except Exception as exc:  # a failing tick is retried by the next one
            log.warning("periodic %s not enqueued: %s", task.name, exc)
    return sent


class Scheduler(WhileWorkerRuns):
    """Runs `tick` every few seconds while a worker runs."""

    def __init__(self, cache: Cache, tasks: Callable[[], list[Periodic]], interval: float = 5.0):
        super().__init__("cs-scheduler", interval)
        self.cache = cache
        self.tasks = tasks

    def step(self) -> None:
        tick(self.cache, self.tasks(), time.time())
