"""How deep the job queues are and how long their oldest ready job has waited, read from
the broker (Redis in production, the StubBroker of this process in the embedded mode).
Read by `GET /metrics` and `cs status` (docs/operations.md)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis
from dramatiq.brokers.stub import StubBroker

from ..cache import Cache
from . import broker as jobs_broker

QUEUES = ("default",)


@dataclass
class Depth:
    queue: str
    ready: int
    delayed: int
    oldest_age_seconds: float | None


def depths(settings, cache: Cache | None = None) -> list[Depth]:
    if settings.redis_url:
        return [_redis_depth(settings, name) for name in QUEUES]
    return [_stub_depth(name) for name in QUEUES]


def _redis_depth(settings, name: str) -> Depth:
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        key = f"{settings.cs_redis_prefix}:dramatiq:{name}"
        ready, delayed, first = client.llen(key), client.llen(key + ".DQ"), client.lindex(key, 0)
        raw = client.hget(key + ".msgs", first) if first is not None else None
    finally:
        client.close()
    return Depth(name, ready, delayed, _age(raw))


def _age(raw: bytes | None) -> float | None:
    if raw is None:
        return None
    try:
        stamp = json.loads(raw)["message_timestamp"] / 1000
    except (ValueError, KeyError, TypeError):
        return None
    return max(0.0, time.time() - stamp)


def _stub_depth(name: str) -> Depth:
    stub = jobs_broker.current()
    held = stub.queues if isinstance(stub, StubBroker) else {}   # this process's queues, when they are here
    ready, delayed = held.get(name), held.get(name + ".DQ")
    return Depth(name, ready.qsize() if ready is not None else 0, delayed.qsize() if delayed is not None else 0, None)
