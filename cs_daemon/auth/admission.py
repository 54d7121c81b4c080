"""Admitting an API request: who is calling, and whether the key's rate limit lets it in.

The request is counted while its key is looked up, in one cache round trip that also
reads the key memo's tokens (auth/memo.py): a key this process has seen and whose tenant
has not changed needs no database read at all.

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
from ..plans import plan
from . import keys
from .memo import TOKEN_TTL, KeyMemo, token_keys
from .service import Caller, identify

log = logging.getLogger(__name__)


def admit(session: Session, raw: str, *, cache: Cache, memo: KeyMemo | None,
          now: datetime) -> tuple[Caller, ratelimit.Verdict]:
    """The caller of a well-formed key and the rate-limit verdict on this request;
    Unauthorized for an unknown, revoked or orphaned key."""
    digest = keys.digest(raw)
    tenant_id = memo.tenant_of(digest) if memo else None
    ops = [("incr", *ratelimit.counter(digest[:32], now))]
    if tenant_id:
        ops.append(("get", token_keys(tenant_id)))
    answers = _send(cache, ops)
    if tenant_id:
        got = _read(answers, ops)   # the tokens before the database: see auth/memo.py
        tokens = _tokens(cache, tenant_id, got[1]) if got[1] is not None else None
        caller = memo.recall(session, digest, tokens, now) if tokens else None
        if caller is None:
            caller = _from_database(session, raw, digest, memo, tokens, now)
    else:
        try:
            caller = _from_database(session, raw, digest, memo, None, now)
        finally:
            got = _read(answers, ops)
    count = got[0]
    return caller, ratelimit.judge(count, plan(caller.plan_tier).requests_per_minute, now)


def _from_database(session: Session, raw: str, digest: str, memo: KeyMemo | None,
                   tokens: tuple[str, ...] | None, now: datetime) -> Caller:
    caller, last_used_at = identify(session, raw, now=now)
    if memo is not None:
        memo.remember(digest, caller, session.info["tenant"], last_used_at, tokens)
    return caller


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


def _read(answers: Callable[[], list] | None, ops: list[tuple]) -> list:
    """The answers of the shared cache; when it is unreachable, this process's counts
    (and None for what only the shared cache knows: the memo's tokens)."""
    if answers is not None:
        try:
            return answers()
        except Exception as exc:
            log.warning("cache unreachable, the rate limit is counted in this process: %s", exc)
    return [_LOCAL.later([op])()[0] if op[0] == "incr" else None for op in ops]
