"""A thread of this process that does one step every few seconds until it is stopped:
the heartbeats (jobs/heartbeat.py) and the periodic-job scheduler (jobs/scheduler.py)."""

from __future__ import annotations

import threading

from dramatiq.middleware import Middleware


class Repeating:
    """Calls `step()` in a daemon thread named `thread_name`, then waits `interval` seconds,
    until `stop()`."""

    def __init__(self, thread_name: str, interval: float):
        self.thread_name, self.interval = thread_name, interval
        self._stop = threading.Event()

    def step(self) -> None:
        raise NotImplementedError

    def start(self) -> "Repeating":
        self._stop.clear()
        threading.Thread(target=self._run, name=self.thread_name, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.interval)


class WhileWorkerRuns(Repeating, Middleware):
    """Repeating from the boot of a Dramatiq worker process to its shutdown."""

    def after_worker_boot(self, broker, worker) -> None:
        self.start()

    def before_worker_shutdown(self, broker, worker) -> None:
        self.stop()
