"""Admitting an API request: who is calling, and whether the key's rate limit lets it in.

The request is counted while its key is looked up, in one cache round trip that also
reads the key memo's tokens (auth/memo.py): a key this process has seen and whose tenant
has not changed needs no database read at all."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Callable

from sqlalchemy.orm import Session

from .. import ratelimit
from ..cache import Cache, new_token
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
        got = _read(answers)        # the tokens before the database: see auth/memo.py
        tokens = _tokens(cache, tenant_id, got[1]) if got else None
        caller = memo.recall(session, digest, tokens, now) if tokens else None
        if caller is None:
            caller = _from_database(session, raw, digest, memo, tokens, now)
    else:
        try:
            caller = _from_database(session, raw, digest, memo, None, now)
        finally:
            got = _read(answers)
    count = got[0] if got else 0
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


def _send(cache: Cache, ops: list[tuple]) -> Callable[[], list] | None:
    try:
        return cache.later(ops)
    except Exception as exc:   # the cache being down must not take the API down
        log.warning("rate limit not applied, cache unreachable: %s", exc)
        return None


def _read(answers: Callable[[], list] | None) -> list | None:
    if answers is None:
        return None
    try:
        return answers()
    except Exception as exc:
        log.warning("rate limit not applied, cache unreachable: %s", exc)
        return None
