"""How many in-app streams one API process lets the process, each tenant and each stream
token hold at once (docs/channels.md, Capacity), so one token or one tenant cannot take
every slot.

Plain bookkeeping with no lock, thread or I/O: the threaded server wraps it in a lock
(in_app_stream.StreamSlots) and a single-threaded asyncio server can use it as it is.
Counts are per process: N API processes let a tenant hold N times its share.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

PROCESS_RETRY_AFTER = 5     # a slot frees as soon as any stream of the process ends
HOLDER_RETRY_AFTER = 30     # a tenant's or token's own stream must end first


@dataclass(frozen=True)
class Caps:
    process: int | None     # None: the process itself is not capped (the embedded server)
    tenant: int
    token: int

    @classmethod
    def of(cls, *, slots: int, tenant_share: int, per_token: int, capped: bool) -> "Caps":
        """The caps of a process of `slots` slots; a tenant may hold `tenant_share` percent
        of them (at least one)."""
        return cls(slots if capped else None, max(1, math.floor(slots * tenant_share / 100)), per_token)


class StreamsFull(Exception):
    """A stream refused: the process, its tenant or its token holds as many as it may."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Holder:
    """Who holds an open stream: what `take` counted, for `give_back`."""

    tenant_id: str
    token_id: str


class Counts:
    def __init__(self, caps: Caps):
        self.caps = caps
        self.open = 0
        self.by_tenant: Counter[str] = Counter()
        self.by_token: Counter[str] = Counter()

    def take(self, tenant_id: str, token_id: str) -> Holder:
        """Count one more stream of this tenant and token, or StreamsFull saying which cap
        stopped it (nothing is counted then)."""
        caps = self.caps
        if caps.process is not None and self.open >= caps.process:
            raise StreamsFull(f"this server holds its maximum of {caps.process} in-app streams; "
                              f"retry in {PROCESS_RETRY_AFTER} s", PROCESS_RETRY_AFTER)
        if self.by_token[token_id] >= caps.token:
            raise StreamsFull(f"this stream token already has {caps.token} open in-app streams on this server, "
                              f"its maximum; close one (or retry in {HOLDER_RETRY_AFTER} s)", HOLDER_RETRY_AFTER)
        if self.by_tenant[tenant_id] >= caps.tenant:
            raise StreamsFull(f"this tenant already has {caps.tenant} open in-app streams on this server, "
                              f"its maximum; retry in {HOLDER_RETRY_AFTER} s", HOLDER_RETRY_AFTER)
        self.open += 1
        self.by_tenant[tenant_id] += 1
        self.by_token[token_id] += 1
        return Holder(tenant_id, token_id)

    def give_back(self, holder: Holder) -> None:
        self.open -= 1
        for counter, key in ((self.by_tenant, holder.tenant_id), (self.by_token, holder.token_id)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]
