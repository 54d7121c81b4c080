"""One tenant's slow receivers cannot take every worker thread (docs/webhooks.md, "Slow
receivers").

An attempt holds its worker thread until the receiver answers or the attempt times out
(10 s). A tenant whose receiver hangs, with a few hundred deliveries due, would otherwise
fill every thread of every worker for minutes, and every other tenant's deliveries (and
jobs) would wait behind it. A tenant is slow once one of its attempts has been in flight
SLOW_AFTER seconds, and stays slow SLOW_FOR seconds after the last such attempt ends.
While it is slow a process runs at most SLOW_TENANT_SENDS of its attempts at once; the
others are deferred: released without an attempt (no try of the delivery's six is used)
and due again a few seconds later, for the sweep to pick up. A tenant whose receivers
answer in time is never held back. Kept per process, like the DNS look-ups' places."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Callable

SLOW_AFTER = 2.0            # seconds an attempt in flight takes to mark its tenant slow
SLOW_FOR = 60.0             # seconds a tenant stays slow after its last slow attempt
SLOW_TENANT_SENDS = 2       # attempts of a slow tenant in flight at once, per process


class SlowReceivers:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._flying: dict[str, dict[object, float]] = defaultdict(dict)   # tenant -> {attempt: started}
        self._slow_until: dict[str, float] = {}

    def enter(self, tenant_id: str, *, always: bool = False) -> object | None:
        """A token for an attempt of this tenant, or None when it must be deferred;
        `always`: an attempt that counts, but is never deferred."""
        with self._lock:
            now = self.clock()
            flying = self._flying[tenant_id]
            if not always and len(flying) >= SLOW_TENANT_SENDS and self._slow(tenant_id, flying, now):
                return None
            token = object()
            flying[token] = now
            return token

    def leave(self, tenant_id: str, token: object) -> None:
        with self._lock:
            now = self.clock()
            flying = self._flying[tenant_id]
            started = flying.pop(token)
            if now - started >= SLOW_AFTER:
                self._slow_until[tenant_id] = now + SLOW_FOR
            if not flying:
                del self._flying[tenant_id]
            if self._slow_until.get(tenant_id, now) < now:
                del self._slow_until[tenant_id]

    def _slow(self, tenant_id: str, flying: dict[object, float], now: float) -> bool:
        return self._slow_until.get(tenant_id, 0.0) > now or any(now - t >= SLOW_AFTER for t in flying.values())
