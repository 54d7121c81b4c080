"""The background thread: takes ready batches and posts them until each is delivered,
rejected, or the client stops."""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, replace
from typing import Callable, Optional

from . import retry
from .batch_queue import BatchQueue
from .errors import OVERFLOW, REJECTED, SHUTDOWN, Dropped
from .events import Queued, batch_body, decode
from .transport import Answer, NetworkError, Transport

log = logging.getLogger("cs_sdk")


@dataclass(frozen=True)
class Stats:
    """Counters since the client was made. `accepted`, `duplicates` and `over_limit` are
    the service's own counts from its answers."""

    queued: int = 0               # events waiting now
    in_flight: int = 0            # events of the batch being sent now
    batches: int = 0              # requests that were answered 2xx
    delivered: int = 0            # events in those requests
    accepted: int = 0
    duplicates: int = 0
    over_limit: int = 0
    retries: int = 0              # requests tried again (network error, 429, 5xx)
    dropped: int = 0              # oldest events dropped from a full queue
    rejected: int = 0             # events of batches refused with a 4xx other than 429
    abandoned: int = 0            # events still unsent when shutdown() gave up


class Sender:
    def __init__(self, queue: BatchQueue, transport: Transport, on_error: Optional[Callable[[Dropped], None]],
                 retry_delays: tuple[float, float]):
        self.queue = queue
        self.retry_delays = retry_delays
        self.transport = transport
        self.on_error = on_error
        self.rng = random.Random()
        self.lock = threading.Lock()
        self.counts = Stats()
        self.thread = threading.Thread(target=self._run, name="cs-sdk-sender", daemon=True)

    def stats(self) -> Stats:
        with self.lock:
            counts = self.counts
        return replace(counts, queued=self.queue.waiting, in_flight=self.queue.in_flight,
                       dropped=self.queue.dropped)

    def _count(self, **more: int) -> None:
        with self.lock:
            self.counts = replace(self.counts, **{k: getattr(self.counts, k) + v for k, v in more.items()})

    def abandon(self, items: list[Queued]) -> None:
        """Count and report events that will never be sent (the client stopped)."""
        if items:
            self._count(abandoned=len(items))
            self._report(Dropped(SHUTDOWN, len(items), events=decode(items)))

    def _run(self) -> None:
        try:
            while True:
                batch = self.queue.next_batch()
                if batch is None or not self._deliver(batch):
                    break
                self._report_queue_drops()
        finally:
            self._report_queue_drops()
            self.abandon(self.queue.drain())
            self.transport.close()

    def _deliver(self, batch: list[Queued]) -> bool:
        """Post until answered 2xx or a final 4xx; False if the client stopped first."""
        body = batch_body(batch)
        failures = 0
        while self.queue.begin_post():
            done = False
            try:
                delay = self._attempt(body, batch, failures + 1)
                done = delay is None
            finally:
                self.queue.end_post(done)
            if done:
                return True
            failures += 1
            self._count(retries=1)
            if not self.queue.pause(delay):
                return False
        return False

    def _attempt(self, body: bytes, batch: list[Queued], failures: int) -> Optional[float]:
        """One request; the seconds to wait before the next, or None when done."""
        try:
            answer = self.transport.post_track(body)
        except NetworkError as exc:
            delay = retry.backoff(failures, self.rng, *self.retry_delays)
            log.info("cs_sdk: %s; retrying %d events in %.2f s", exc, len(batch), delay)
            return delay
        if 200 <= answer.status < 300:
            self._delivered(answer, len(batch))
            return None
        if not retry.retryable(answer.status):
            self._count(rejected=len(batch))
            error = answer.body if isinstance(answer.body, dict) else None
            self._report(Dropped(REJECTED, len(batch), status=answer.status, error=error, events=decode(batch)))
            return None
        waited = retry.retry_after(answer.headers.get("retry-after"), self.queue.clock.now())
        delay = waited if waited is not None else retry.backoff(failures, self.rng, *self.retry_delays)
        log.info("cs_sdk: HTTP %d; retrying %d events in %.2f s", answer.status, len(batch), delay)
        return delay

    def _delivered(self, answer: Answer, count: int) -> None:
        body = answer.body if isinstance(answer.body, dict) else {}
        self._count(batches=1, delivered=count, accepted=_int(body.get("accepted")),
                    duplicates=_int(body.get("duplicates")), over_limit=_int(body.get("over_limit")))

    def _report_queue_drops(self) -> None:
        dropped = self.queue.take_drops()
        if dropped:
            self._report(Dropped(OVERFLOW, dropped))

    def _report(self, dropped: Dropped) -> None:
        if self.on_error is None:
            log.warning("cs_sdk: %s", dropped)
            return
        try:
            self.on_error(dropped)
        except Exception:  # the caller's callback must not stop the sender
            log.exception("cs_sdk: on_error raised")


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
