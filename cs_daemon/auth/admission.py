"""Admitting an API request: who is calling, and whether the key's rate limit lets it in
(or, for the keyless endpoints, the limit of the client's address).

The request is counted in one cache round trip that also reads the key memo's tokens and
whether the key was refused a moment ago (auth/memo.py): a key this process has seen and
whose tenant has not changed needs no database read at all, and neither does a key the
database refused in the last minute.

While the shared cache (Redis) is unreachable the API keeps serving: each request is
counted in this process's memory instead, so a key still meets its plan's limit in each
API process (at most that many times the limit in all), and every key is read from the
database (docs/deploy.md, "When Redis is unreachable")."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Callable

from sqlalchemy.orm import Session

from .. import ratelimit
from ..cache import Cache, MemoryCache, new_token
from ..errors import Unauthorized
from ..plans import plan
from ..uow import uow_of
from . import keys
from .memo import TOKEN_TTL, KeyMemo, refusal_key, remember_refusal, token_keys
from .service import Caller, identify

log = logging.getLogger(__name__)


def admit(session: Session, raw: str, *, cache: Cache, memo: KeyMemo | None,
          now: datetime) -> tuple[Caller, ratelimit.Verdict]:
    """The caller of a well-formed key and the rate-limit verdict on this request;
    Unauthorized for an unknown, revoked or orphaned key (one refused in the last
    REFUSAL_TTL seconds is refused again without reading the database)."""
    digest = keys.digest(raw)
    tenant_id = memo.tenant_of(digest) if memo else None
    ops = [("incr", *ratelimit.counter(digest[:32], now)),
           ("get", [refusal_key(digest), *(token_keys(tenant_id) if tenant_id else [])])]
    count, found = _read(_send(cache, ops), ops)      # before the database: see auth/memo.py
    if found and found[0] is not None:
        raise Unauthorized(found[0])
    tokens = _tokens(cache, tenant_id, found[1:]) if tenant_id and found else None
    caller = memo.recall(session, digest, tokens, now) if tokens else None
    if caller is None:
        caller = _from_database(session, raw, digest, memo, tokens, now, cache)
    return caller, ratelimit.judge(count, plan(caller.plan_tier).requests_per_minute, now)


def _from_database(session: Session, raw: str, digest: str, memo: KeyMemo | None,
                   tokens: tuple[str, ...] | None, now: datetime, cache: Cache) -> Caller:
    try:
        caller, last_used_at = identify(session, raw, now=now)
    except Unauthorized as exc:
        remember_refusal(cache, digest, exc.message)
        raise
    if memo is not None:
        memo.remember(digest, caller, uow_of(session).tenant, last_used_at, tokens)
    return caller


def admit_address(cache: Cache, endpoint: str, address: str, limit: int, now: datetime) -> ratelimit.Verdict:
    """The verdict on a keyless request from `address` to `endpoint` (docs/api.md, Rate
    limits); counted in this process while the cache cannot be reached, as for keys."""
    ops = [("incr", *ratelimit.counter(f"ip:{endpoint}:{address}", now))]
    count, _ = _read(_send(cache, ops), ops)
    return ratelimit.judge(count, limit, now)


def _tokens(cache: Cache, tenant_id: str, found: list[str | None]) -> tuple[str, ...] | None:
    """The memo tokens of the tenant, made first where the cache has none (a new tenant,
    or a cache that restarted empty)."""
    if None not in found:
        return tuple(found)
    try:
        for key, value in zip(token_keys(tenant_id), found):
            if value is None:
                cache.add(key, new_token(), TOKEN_TTL)
        made = [cache.get(key) for key in token_keys(tenant_id)]
    except Exception as exc:
        log.warning("key memo not used, cache unreachable: %s", exc)
        return None
    return None if None in made else tuple(made)


_LOCAL = MemoryCache()    # the counts of this process while the shared cache is unreachable


def _send(cache: Cache, ops: list[tuple]) -> Callable[[], list] | None:
    try:
        return cache.later(ops)
    except Exception as exc:   # the cache being down must not take the API down
        log.warning("cache unreachable, the rate limit is counted in this process: %s", exc)
        return None


def _read(answers: Callable[[], list] | None, ops: list[tuple]) -> tuple[int, list | None]:
    """The request's count (the first op is its `incr`) and what the other op read from the
    shared cache; when it is unreachable, this process's count and None (what only the
    shared cache knows: refusals and the memo's tokens)."""
    if answers is not None:
        try:
            got = answers()
            return got[0], (got[1] if len(got) > 1 else None)
        except Exception as exc:
            log.warning("cache unreachable, the rate limit is counted in this process: %s", exc)
    return _LOCAL.later([ops[0]])()[0], None
