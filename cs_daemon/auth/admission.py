"""Admitting an API request: who is calling, and whether the key's rate limit lets it in
(or, for the keyless endpoints, the limit of the client's address).

The request is counted in one cache round trip that also reads the key memo's tokens and
whether the key was refused a moment ago (auth/memo.py): a key this process has seen and
whose tenant has not changed needs no database read at all, and neither does a key the
database refused in the last minute."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Callable

from sqlalchemy.orm import Session

from .. import ratelimit
from ..cache import Cache, new_token
from ..errors import Unauthorized
from ..plans import plan
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
    got = _read(_send(cache, ops))      # before the database: see auth/memo.py
    if got and got[1][0] is not None:
        raise Unauthorized(got[1][0])
    tokens = _tokens(cache, tenant_id, got[1][1:]) if tenant_id and got else None
    caller = memo.recall(session, digest, tokens, now) if tokens else None
    if caller is None:
        caller = _from_database(session, raw, digest, memo, tokens, now, cache)
    count = got[0] if got else 0
    return caller, ratelimit.judge(count, plan(caller.plan_tier).requests_per_minute, now)


def _from_database(session: Session, raw: str, digest: str, memo: KeyMemo | None,
                   tokens: tuple[str, ...] | None, now: datetime, cache: Cache) -> Caller:
    try:
        caller, last_used_at = identify(session, raw, now=now)
    except Unauthorized as exc:
        remember_refusal(cache, digest, exc.message)
        raise
    if memo is not None:
        memo.remember(digest, caller, session.info["tenant"], last_used_at, tokens)
    return caller


def admit_address(cache: Cache, endpoint: str, address: str, limit: int, now: datetime) -> ratelimit.Verdict:
    """The verdict on a keyless request from `address` to `endpoint` (docs/api.md, Rate
    limits); allowed when the cache cannot be reached, as for keys."""
    got = _read(_send(cache, [("incr", *ratelimit.counter(f"ip:{endpoint}:{address}", now))]))
    return ratelimit.judge(got[0] if got else 0, limit, now)


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
