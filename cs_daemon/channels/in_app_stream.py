"""One user's in-app stream: server-sent events, written as the messages come.

    retry: 3000                              (first: the stream is listening)

    id: 42
    event: intervention
    data: {"interventionId": "…", "type": "in_app", "body": "…", "playbookName": "…", "timestamp": "…"}

    event: withdrawn
    data: {"interventionId": "…"}

    : heartbeat                              (a comment, every 15 s of silence)

On connect the stream sends every message of the user that was never delivered (or,
with Last-Event-ID, every message after that id as well), then waits for wake-ups and
sends what is new. Each read is short and commits by itself: an open stream holds
no database connection. A message counts as delivered once its bytes were handed to the
connection (the server asks for the next chunk only after writing the previous one).
Withdrawals are announced for messages this connection sent, and on a resume for those
up to Last-Event-ID withdrawn in the last 7 days; they carry no id, so they never move
the client's Last-Event-ID. The stream ends when its token expires (the client
reconnects with a fresh one). While the tenant's kill switch is on it sends nothing new
(it looks again at every heartbeat); to a user who opted out of in_app (or all) it sends
no more messages.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass, field
from typing import Iterator

from .. import metrics
from ..config import Settings
from ..tenants.models import Tenant
from . import in_app, in_app_wakeups, stream_caps
from .in_app_tokens import StreamGrant

HEARTBEAT_SECONDS = 15.0
RETRY_MS = 3000
BATCH = 100
SLOT_RETRY_AFTER = stream_caps.PROCESS_RETRY_AFTER


def frame(event: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"


@dataclass
class Cursor:
    """What the client has: messages up to `last` (its Last-Event-ID, or what this
    connection sent), and the withdrawals already looked at."""

    resumed_from: int | None
    last: int = -1
    sent: set[int] = field(default_factory=set)
    withdrawals_seen: set[int] = field(default_factory=set)

    def knows(self, seq: int) -> bool:
        return seq in self.sent or (self.resumed_from is not None and seq <= self.resumed_from)


@dataclass
class Batch:
    text: str = ""
    sent: dict[int, str] = field(default_factory=dict)      # seq -> intervention id
    full: bool = False
    held: bool = False       # the kill switch kept messages back


def next_batch(rt, grant: StreamGrant, cursor: Cursor) -> Batch:
    """What to write next: a few reads, each committed by itself (no BEGIN and COMMIT
    round trips; under READ COMMITTED each statement had its own snapshot anyway)."""
    with rt.session(grant.tenant_id, atomic=False) as session:
        if cursor.last < 0:
            cursor.last = cursor.resumed_from if cursor.resumed_from is not None else \
                in_app.high_water(session, grant.user_id)
        tenant = session.get(Tenant, grant.tenant_id)
        batch = Batch(held=bool(tenant and tenant.kill_switch_active))
        silent = batch.held or in_app.opted_out(session, grant.tenant_id, grant.user_id)
        live = [] if silent else in_app.unsent(session, grant.user_id, after=cursor.last, limit=BATCH)
        # withdrawals matter only for messages the client has (a fresh stream has none yet)
        gone = in_app.withdrawn(session, grant.user_id, upto=cursor.last, now=rt.now()) \
            if cursor.sent or cursor.resumed_from is not None else []
    for seq, intervention_id in gone:
        _withdrawal(batch, cursor, seq, intervention_id)
    for row in live:
        if row.seq not in cursor.sent:
            batch.text += frame("intervention", row.body, row.seq)
            batch.sent[row.seq] = row.intervention_id
            cursor.sent.add(row.seq)
            cursor.last = max(cursor.last, row.seq)
    batch.full = len(batch.sent) == BATCH
    return batch


def _withdrawal(batch: Batch, cursor: Cursor, seq: int, intervention_id: str) -> None:
    if seq in cursor.withdrawals_seen:
        return
    cursor.withdrawals_seen.add(seq)
    if cursor.knows(seq):
        batch.text += frame("withdrawn", {"interventionId": intervention_id})


def settle(rt, tenant_id: str, written: dict[int, str]) -> None:
    """The messages were written to the connection: mark them and their interventions
    delivered."""
    if written:
        with rt.session(tenant_id) as session:
            in_app.mark_delivered(session, written, rt.now())


ENDING = threading.Event()     # set when this process stops: every stream ends (clients reconnect)


def end_all() -> None:
    """End every stream of this process now (a graceful stop of an API process)."""
    ENDING.set()
    in_app_wakeups.wake_everyone()


def heartbeat_seconds(rt) -> float:
    """Seconds of silence before a heartbeat: CS_STREAM_HEARTBEAT_SECONDS when set (the
    bench lowers it), else HEARTBEAT_SECONDS."""
    return rt.settings.cs_stream_heartbeat_seconds or HEARTBEAT_SECONDS


def events(rt, grant: StreamGrant, cursor: Cursor, waiter: in_app_wakeups.Waiter) -> Iterator[str]:
    """The stream written by a thread of the server (a server that cannot hand its socket
    over, such as a test client); in_app_loop.py runs the same steps on the event loop."""
    yield f"retry: {RETRY_MS}\n\n"
    read = True
    held = False
    while rt.now() < grant.expires_at and not ENDING.is_set():
        if read:
            batch = next_batch(rt, grant, cursor)
            held = batch.held
            if batch.text:
                yield batch.text
                settle(rt, grant.tenant_id, batch.sent)
            if batch.full:
                continue
        woken = waiter.wait(heartbeat_seconds(rt))
        if not woken:
            yield ": heartbeat\n\n"
        read = woken or held


class StreamSlots:
    """The streams this process holds, capped per process, tenant and token
    (stream_caps.py). In production an API process holds at most CS_STREAM_SLOTS (its
    event loop holds them, in_app_loop.py: the cap bounds its memory and sockets); the
    embedded server caps only tenants and tokens."""

    def __init__(self, settings: Settings):
        self.counts = stream_caps.Counts(stream_caps.Caps.of(
            slots=settings.cs_stream_slots, tenant_share=settings.cs_stream_tenant_share,
            per_token=settings.cs_streams_per_token, capped=settings.production))
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        return self.counts.open

    def take(self, grant: StreamGrant) -> stream_caps.Holder:
        with self._lock:
            holder = self.counts.take(grant.tenant_id, grant.token_id)
        metrics.STREAMS.inc()
        return holder

    def give_back(self, holder: stream_caps.Holder) -> None:
        with self._lock:
            self.counts.give_back(holder)
        metrics.STREAMS.dec()


_slots: "weakref.WeakKeyDictionary[object, StreamSlots]" = weakref.WeakKeyDictionary()
_slots_lock = threading.Lock()


def slots_of(rt) -> StreamSlots:
    """The stream count of one runtime (one per process in production)."""
    with _slots_lock:
        if rt not in _slots:
            _slots[rt] = StreamSlots(rt.settings)
        return _slots[rt]


class OpenStream:
    """The body of one stream response. Opening it takes a slot (or raises
    stream_caps.StreamsFull) and subscribes to the user's wake-ups (so nothing published
    afterwards is missed). Then either the process's event loop holds it
    (in_app_loop.py, through webapp/stream_handoff.py), or a server that keeps the
    socket iterates it in a thread; either closes it when the client is gone or the
    stream ends, which lets both go."""

    def __init__(self, rt, grant: StreamGrant, last_event_id: int | None):
        self.slots = slots_of(rt)
        self.holder = self.slots.take(grant)
        try:
            self.waiter = in_app_wakeups.for_settings(rt.settings).waiter(grant.tenant_id, grant.user_id)
        except BaseException:
            self.slots.give_back(self.holder)
            raise
        self.rt, self.grant, self.cursor = rt, grant, Cursor(last_event_id)
        self._events = events(rt, grant, self.cursor, self.waiter)
        self._closed = False

    def __iter__(self) -> Iterator[str]:
        return self._events

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._events.close()
        finally:
            self.waiter.close()
            self.slots.give_back(self.holder)
