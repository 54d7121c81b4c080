"""The bounded in-memory queue between the callers and the sender thread.

A batch is ready when `max_batch_size` events wait, when the oldest has waited
`flush_interval` seconds on the clock, or when a flush was asked for. Past
`max_queue_size` waiting events the oldest is dropped and counted. The batch being sent is
out of the queue (`in_flight`) until its request ends delivered or rejected (`end_post`)."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Optional

from .events import _ENVELOPE, MAX_BODY_BYTES, Queued


class BatchQueue:
    def __init__(self, clock, max_batch_size: int, flush_interval: float, max_queue_size: int):
        self.clock = clock
        self.max_batch_size = max_batch_size
        self.flush_interval = flush_interval
        self.max_queue_size = max_queue_size
        self.cond = threading.Condition()
        self._items: deque[Queued] = deque()
        self._batch: list[Queued] = []  # taken by the sender, until done
        self._posting = False           # a request of that batch is under way
        self._flush_asked = False
        self.stopping = False
        self.dropped = 0            # oldest events dropped for room, ever
        self.unreported_drops = 0   # of which not yet given to on_error

    # --- callers' side (hold `cond`) -------------------------------------------------

    def put(self, data: bytes) -> None:
        if len(self._items) >= self.max_queue_size:
            self._items.popleft()
            self.dropped += 1
            self.unreported_drops += 1
        self._items.append(Queued(self.clock.monotonic(), data))
        # the sender's plan changes only at the first event (a deadline) and at a full batch
        if len(self._items) in (1, self.max_batch_size):
            self.cond.notify_all()

    @property
    def waiting(self) -> int:
        return len(self._items)

    @property
    def in_flight(self) -> int:
        return len(self._batch)

    def empty(self) -> bool:
        return not self._items and not self.in_flight

    def wait_empty(self, timeout: Optional[float]) -> bool:
        """Ask for a flush and block (real time) until nothing waits or is in flight."""
        if self.empty():
            return True
        self._flush_asked = True
        self.cond.notify_all()
        end = None if timeout is None else time.monotonic() + timeout
        while not self.empty() and not self.stopping:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                break
            self.cond.wait(left)
        return self.empty()

    # --- the sender's side -----------------------------------------------------------

    def next_batch(self) -> Optional[list[Queued]]:
        """Block until a batch is ready and take it; None once stopping."""
        with self.cond:
            while not self.stopping:
                if self._ready():
                    return self._take()
                deadline = self._items[0].queued_at + self.flush_interval if self._items else None
                self.clock.wait_until(self.cond, deadline)
            return None

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` on the clock; False if the client stopped meanwhile."""
        with self.cond:
            deadline = self.clock.monotonic() + seconds
            while not self.stopping and self.clock.monotonic() < deadline:
                self.clock.wait_until(self.cond, deadline)
            return not self.stopping

    def begin_post(self) -> bool:
        """Mark the batch's request as under way; False if the client stopped (then
        `stop` has taken the batch and none goes)."""
        with self.cond:
            self._posting = not self.stopping
            return self._posting

    def end_post(self, done: bool) -> None:
        """The request is over; `done` when the batch was delivered or rejected (in the
        same step, so that `stop` cannot report a delivered batch as dropped)."""
        with self.cond:
            self._posting = False
            if done:
                self._batch = []
            self.cond.notify_all()

    def take_drops(self) -> int:
        with self.cond:
            count, self.unreported_drops = self.unreported_drops, 0
            return count

    def drain(self) -> list[Queued]:
        """Everything not in a request now (the sender's batch first): it will not be sent."""
        with self.cond:
            items = ([] if self._posting else self._batch) + list(self._items)
            self._items.clear()
            if not self._posting:
                self._batch = []
            self.cond.notify_all()
            return items

    def stop(self) -> list[Queued]:
        """Stop the sender and take what it will never send (see drain)."""
        with self.cond:
            self.stopping = True
            return self.drain()

    def _ready(self) -> bool:
        if not self._items:
            return False
        return (len(self._items) >= self.max_batch_size or self._flush_asked
                or self.clock.monotonic() >= self._items[0].queued_at + self.flush_interval)

    def _take(self) -> list[Queued]:
        batch: list[Queued] = []
        size = _ENVELOPE
        while self._items and len(batch) < self.max_batch_size:
            grown = size + len(self._items[0].data) + (1 if batch else 0)
            if batch and grown > MAX_BODY_BYTES:
                break
            batch.append(self._items.popleft())
            size = grown
        if not self._items:
            self._flush_asked = False
        self._batch = batch
        return batch
