"""The client a tenant's backend uses: `identify`, `set_locale`, `track`, `flush`,
`shutdown`. Calls only queue; a background thread sends (see batch_queue and sender)."""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Any, Callable, Mapping, Optional

from .batch_queue import BatchQueue
from .clock import SystemClock
from .errors import ClientClosed, Dropped, NotIdentified
from .events import require_mapping, require_name, require_text, stamp
from .sender import Sender, Stats
from .transport import Transport

MAX_BATCH_SIZE = 100  # the service takes 1 to 100 events a request

# Clients not shut down yet: flushed at exit (held strongly, so that a client nobody
# references any more still delivers what it queued).
_live: "set[Client]" = set()


class Client:
    """One client per process is enough, shared by all threads.

    `track` and `set_locale` are refused (NotIdentified) for a user this client has not
    identified: call `identify(user_id, traits)` first, e.g. when the user signs in."""

    def __init__(self, api_key: str, base_url: str, *, max_batch_size: int = 10,
                 flush_interval: float = 1.0, max_queue_size: int = 10_000, timeout: float = 10.0,
                 retry_base_delay: float = 1.0, retry_max_delay: float = 30.0,
                 shutdown_timeout: float = 10.0, clock: Any = None,
                 on_error: Optional[Callable[[Dropped], None]] = None):
        require_text("api_key", api_key)
        if not 1 <= max_batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"max_batch_size must be 1 to {MAX_BATCH_SIZE}")
        if min(flush_interval, timeout, retry_base_delay, retry_max_delay) <= 0:
            raise ValueError("flush_interval, timeout and the retry delays must be positive")
        if max_queue_size < max_batch_size:
            raise ValueError("max_queue_size must be at least max_batch_size")
        self._clock = clock or SystemClock()
        self._settings = (api_key, base_url, timeout)
        Transport(base_url, api_key, timeout)  # a bad base_url fails here, not in the thread
        self._queue = BatchQueue(self._clock, max_batch_size, flush_interval, max_queue_size)
        self._on_error = on_error
        self._retry_delays = (retry_base_delay, max(retry_base_delay, retry_max_delay))
        self._shutdown_timeout = shutdown_timeout
        self._identified: set[str] = set()
        self._closed = False
        self._sender = self._new_sender()
        _live.add(self)

    # --- events ------------------------------------------------------------------------

    def identify(self, user_id: str, traits: Optional[Mapping[str, Any]] = None) -> None:
        """Queue `$identify` with the user's traits (name, email, company, role,
        team_size, locale and any others) and allow `track` for this user."""
        self._queue_event(user_id, "$identify", require_mapping("traits", traits), identifies=True)

    def set_locale(self, user_id: str, locale: str) -> None:
        """Queue `$locale` for an identified user."""
        self._queue_event(user_id, "$locale", {"locale": require_text("locale", locale)})

    def track(self, user_id: str, event: str, properties: Optional[Mapping[str, Any]] = None) -> None:
        """Queue one event of an identified user; names are snake_case and matched exactly."""
        self._queue_event(user_id, require_name("event", event), require_mapping("properties", properties))

    def _queue_event(self, user_id: str, event: str, properties, identifies: bool = False) -> None:
        require_name("user_id", user_id)
        if not identifies and user_id not in self._identified:
            raise NotIdentified(f"user {user_id!r} is not identified: call identify() before track()")
        data = stamp(user_id, event, properties, self._clock.now())
        with self._queue.cond:
            if self._closed:
                raise ClientClosed("the client was shut down")
            if identifies:
                self._identified.add(user_id)
            self._queue.put(data)
            if not self._sender.thread.is_alive():
                self._start_sender()

    # --- delivery ----------------------------------------------------------------------

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Send everything queued now, and return once nothing is queued or in flight
        (True), or after `timeout` real seconds (False)."""
        if threading.current_thread() is self._sender.thread:
            raise RuntimeError("flush() from on_error would wait for itself")
        with self._queue.cond:
            return self._queue.wait_empty(timeout)

    def shutdown(self, timeout: Optional[float] = None) -> bool:
        """Refuse new events, flush for at most `timeout` seconds (default: the client's
        `shutdown_timeout`), stop the thread, and return within `timeout`. Events still
        unsent are reported to `on_error` as dropped ("shutdown"), except a batch whose
        request is under way then: it may still be stored. True if everything was sent."""
        with self._queue.cond:
            if self._closed:
                return self._queue.empty()
            self._closed = True
        timeout = self._shutdown_timeout if timeout is None else timeout
        end = None if timeout is None else time.monotonic() + timeout
        flushed = self.flush(timeout)
        self._sender.abandon(self._queue.stop())
        if self._sender.thread.is_alive():
            # A request still under way at the deadline is left to the daemon thread.
            self._sender.thread.join(None if end is None else max(0.0, end - time.monotonic()))
        _live.discard(self)
        return flushed

    def stats(self) -> Stats:
        return self._sender.stats()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # --- the thread ----------------------------------------------------------------------

    def _new_sender(self) -> Sender:
        api_key, base_url, timeout = self._settings
        return Sender(self._queue, Transport(base_url, api_key, timeout), self._on_error, self._retry_delays)

    def _start_sender(self) -> None:
        """Started at the first event (not at construction), so a client made before a
        fork (gunicorn --preload, Celery) gets its thread in the process that uses it."""
        if self._sender.thread.ident is not None:  # ended (or inherited through a fork)
            counts = self._sender.counts
            self._sender = self._new_sender()
            self._sender.counts = counts
        self._sender.thread.start()

    def _after_fork(self) -> None:
        """In a forked child: the parent's thread, lock and connection are not ours, and
        the parent sends what it queued."""
        self._queue = BatchQueue(self._clock, self._queue.max_batch_size, self._queue.flush_interval,
                                 self._queue.max_queue_size)
        self._sender = self._new_sender()


@atexit.register
def _flush_at_exit() -> None:
    for client in list(_live):
        client.shutdown()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: [client._after_fork() for client in list(_live)])
