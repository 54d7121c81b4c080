"""The key memo: what an API process remembers of the keys it has authenticated, so that
a request with a known key finds its caller and tenant without reading the database.

An entry is trusted only while two tokens in the shared cache are what they were when
the entry was read from the database: its tenant's token and the global one. Both are
read in the round trip that counts the request for the rate limit, so checking them
costs no extra trip; and on a miss they are read before the database is, so an entry can
never hold data older than its tokens. Every committed change to a tenant, an API key or
a team member sets a fresh token for its tenant (the global token when the change does
not say which tenant), and the next request of that tenant, in any process, reads the
database again. Entries also expire after `TTL_SECONDS`: that bounds how long a change
stays unseen if its token could not be set (the cache unreachable at that instant).

Only the production mode remembers: the embedded mode's cache lives in each process,
and a `cs` command run beside `cs serve` could not change the server's tokens.

Keys the database refused (unknown, revoked, or of a removed member) are remembered too,
for REFUSAL_TTL seconds in the shared cache (in both modes), so a client repeating a bad
key costs no database read each time. A refusal never turns into an admission on its
own: a revoked key stays revoked. The one exception is a key issued after its refusal
was remembered, which only a client guessing 32 random characters could meet; issuing a
key still forgets its refusal once the key is committed. (In the embedded mode a `cs`
command cannot reach the server's in-process cache; there the guess stays refused for
at most a minute.)

Two columns change without new tokens and are never served from the memo: a tenant's
`tracked_users` (counted by every ingest; loaded when read) and a key's `last_used_at`
(stamped once a minute; the memo only uses it to decide when to stamp again).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import chain
from types import MappingProxyType
from typing import Any, Callable, Mapping

from sqlalchemy import event, inspect
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.util import identity_key

from ..cache import Cache, make_cache, new_token
from ..db import on_commit_each
from ..team.models import Member
from ..tenants.models import Tenant
from ..uow import uow_of
from .models import ApiKey
from .service import LAST_USED_RESOLUTION, Caller, touch

log = logging.getLogger(__name__)

TTL_SECONDS = 5.0
REFUSAL_TTL = 60
TOKEN_TTL = 7 * 24 * 3600
SIZE = 10_000
ALL = "*"

_UNKEPT = frozenset({"tracked_users", "last_used_at"})
_TENANT_OF = {Tenant: "id", ApiKey: "tenant_id", Member: "tenant_id"}
_TABLES = frozenset(model.__tablename__ for model in _TENANT_OF)
_KEPT_COLUMNS = tuple(c.key for c in Tenant.__table__.columns if c.key not in _UNKEPT)
_TENANT_CLASS = inspect(Tenant).class_manager


def token_keys(tenant_id: str) -> list[str]:
    """The cache keys whose values an entry of this tenant must match: global, tenant."""
    return [f"keys:{ALL}", f"keys:{tenant_id}"]


def refusal_key(digest: str) -> str:
    """The cache key of a refused key's refusal (the message to answer it with)."""
    return f"nokey:{digest[:32]}"


def remember_refusal(cache: Cache, digest: str, message: str) -> None:
    try:
        cache.set(refusal_key(digest), message, REFUSAL_TTL)
    except Exception as exc:
        log.warning("refused key not remembered, cache unreachable: %s", exc)


def _forget_refusals(changes: list[tuple[Cache, str]]) -> None:
    for cache, digest in dict.fromkeys(changes):
        try:
            cache.delete(refusal_key(digest))
        except Exception as exc:
            log.warning("refusal of a new key not forgotten (cache unreachable): %s", exc)


@dataclass
class Entry:
    tenant_id: str
    tokens: tuple[str, ...] | None
    caller: Caller | None
    tenant: Mapping[str, Any]
    last_used_at: datetime | None
    expires: float


class KeyMemo:
    def __init__(self, *, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 size: int = SIZE):
        self.ttl, self.clock, self.size = ttl, clock, size
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def tenant_of(self, digest: str) -> str | None:
        """The tenant of a key this process has seen (a key never changes tenant)."""
        entry = self._entries.get(digest)
        return entry.tenant_id if entry else None

    def recall(self, session: Session, digest: str, tokens: tuple[str, ...], now: datetime) -> Caller | None:
        """The remembered caller when its tokens still hold, with its tenant given to the
        session's unit of work, to join the session as authentication would have loaded it
        once something needs it as a row (uow.UnitOfWork.tenant); None when the database
        must be read."""
        entry = self._entries.get(digest)
        if entry is None or entry.caller is None or entry.tokens != tokens or entry.expires <= self.clock():
            return None
        uow_of(session).remember(entry.tenant, partial(_attach, session, entry.tenant))
        if entry.last_used_at is None or now - entry.last_used_at >= LAST_USED_RESOLUTION:
            touch(session, entry.caller.key_id, entry.caller.tenant_id, now)
            entry.last_used_at = now
        return entry.caller

    def remember(self, digest: str, caller: Caller, tenant: Tenant, last_used_at: datetime | None,
                 tokens: tuple[str, ...] | None) -> None:
        """Keep what the database said of this key, read after `tokens` were (None: not
        known yet; the entry then only names the tenant, for the next request)."""
        entry = Entry(caller.tenant_id, tokens, caller if tokens else None,
                      MappingProxyType({k: _copy(getattr(tenant, k)) for k in _KEPT_COLUMNS}), last_used_at,
                      self.clock() + self.ttl)
        with self._lock:
            if len(self._entries) >= self.size and digest not in self._entries:
                self._entries.pop(next(iter(self._entries)))    # the oldest remembered
            self._entries[digest] = entry


def _copy(value):
    return copy.deepcopy(value) if isinstance(value, (dict, list)) else value


def _attach(session: Session, values: Mapping[str, Any]) -> Tenant:
    """A persistent Tenant in this session from the remembered columns, without a query;
    each request gets its own copy, so a handler changing it changes nobody else's. One the
    session has already read (a query since authentication) stays the row."""
    present = session.identity_map.get(identity_key(Tenant, values["id"]))
    if present is not None:
        return present
    tenant = _TENANT_CLASS.new_instance()      # no constructor: nothing to validate or default
    tenant.__dict__.update({k: _copy(v) for k, v in values.items()})
    make_transient_to_detached(tenant)         # the values count as loaded, the rest expired
    session.add(tenant)
    return tenant


# --- new tokens on every committed change -------------------------------------------------


def changed(session: Session, tenant_id: str | None) -> None:
    """The credentials of this tenant (None: of some tenant) change if this session
    commits: set a new token once it has (only where the cache is shared: Redis)."""
    settings = uow_of(session).settings
    if settings is not None and settings.redis_url:
        on_commit_each(session, _new_tokens, (make_cache(settings), tenant_id or ALL))


def _new_tokens(changes: list[tuple[Cache, str]]) -> None:
    for cache, tenant_id in dict.fromkeys(changes):
        try:
            cache.set(token_keys(tenant_id)[-1], new_token(), TOKEN_TTL)
        except Exception as exc:
            log.warning("key memo token of %s not renewed (cache unreachable; entries expire in %s s): %s",
                        tenant_id, TTL_SECONDS, exc)


@event.listens_for(Session, "after_flush")
def _note_flushed(session: Session, _ctx) -> None:
    for obj in chain(session.new, session.deleted, (o for o in session.dirty if _kept_change(o))):
        attr = _TENANT_OF.get(type(obj))
        if attr is not None:
            changed(session, getattr(obj, attr))
    settings = uow_of(session).settings
    for obj in session.new:
        if isinstance(obj, ApiKey) and settings is not None:
            on_commit_each(session, _forget_refusals, (make_cache(settings), obj.digest))


def _kept_change(obj) -> bool:
    if type(obj) not in _TENANT_OF:
        return False
    return any(a.key not in _UNKEPT and a.history.has_changes() for a in inspect(obj).attrs)


@event.listens_for(Session, "do_orm_execute")
def _note_statement(state) -> None:
    # statements that change only columns the memo does not keep say so:
    # .execution_options(keeps_credentials=True)
    if not (state.is_update or state.is_delete) or state.execution_options.get("keeps_credentials"):
        return
    table = getattr(state.statement, "table", None)
    if getattr(table, "name", None) in _TABLES:
        changed(state.session, uow_of(state.session).tenant_id)
