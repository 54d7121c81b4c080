"""The cache store: Redis in production, a dict in the embedded mode. Small on purpose:
counters for rate limits, values with a time to live (heartbeats, short-lived state),
tokens that change whenever what they stand for changes (the key memo's), and small
hashes of records every process reads (the sweeps' failures).

`later(ops)` sends several operations in one round trip and reads the answers when the
caller is ready, so the API can count a request while it does other I/O. An operation is
("incr", key, ttl): the count after one more; or ("get", [key, ...]): their values."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Callable, Protocol

import redis

from .config import Settings


class Cache(Protocol):
    def get(self, key: str) -> str | None: ...
    def set(self, key: str, value: str, ttl: int | None = None) -> None: ...
    def later(self, ops: list[tuple]) -> Callable[[], list]: ...
    def add(self, key: str, value: str, ttl: int) -> bool: ...
    def delete(self, key: str) -> None: ...
    def ping(self) -> None: ...
    def hset(self, key: str, field: str, value: str) -> None: ...
    def hdel(self, key: str, *fields: str) -> None: ...
    def hgetall(self, key: str) -> dict[str, str]: ...


class MemoryCache:
    def __init__(self):
        self._data: dict[str, tuple[str, float | None]] = {}
        self._hashes: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def _live(self, key: str):
        item = self._data.get(key)
        if item and item[1] is not None and item[1] <= time.monotonic():
            del self._data[key]
            return None
        return item

    def get(self, key: str) -> str | None:
        with self._lock:
            item = self._live(key)
            return item[0] if item else None

    def set(self, key: str, value: str, ttl: int | None = None) -> None:
        with self._lock:
            self._data[key] = (value, time.monotonic() + ttl if ttl else None)
            if len(self._data) > 100_000:
                self._evict()

    def add(self, key: str, value: str, ttl: int) -> bool:
        """Set only if absent; True when this call set it."""
        with self._lock:
            if self._live(key):
                return False
            self._data[key] = (value, time.monotonic() + ttl)
            return True

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def _incr(self, key: str, ttl: int) -> int:
        with self._lock:
            item = self._live(key)
            value = int(item[0]) + 1 if item else 1
            expires = item[1] if item else time.monotonic() + ttl
            self._data[key] = (str(value), expires)
            return value

    def later(self, ops: list[tuple]) -> Callable[[], list]:
        answers = [self._incr(*args) if op == "incr" else [self.get(k) for k in args[0]] for op, *args in ops]
        return lambda: answers

    def ping(self) -> None:
        return None

    def hset(self, key: str, field: str, value: str) -> None:
        with self._lock:
            self._hashes.setdefault(key, {})[field] = value

    def hdel(self, key: str, *fields: str) -> None:
        with self._lock:
            for field in fields:
                self._hashes.get(key, {}).pop(field, None)

    def hgetall(self, key: str) -> dict[str, str]:
        with self._lock:
            return dict(self._hashes.get(key, {}))

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._hashes.clear()

    def _evict(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, exp) in self._data.items() if exp is not None and exp <= now]:
            del self._data[key]


class RedisCache:
    def __init__(self, url: str, prefix: str):
        self.client = redis.Redis.from_url(
            url, socket_timeout=1.0, socket_connect_timeout=1.0, health_check_interval=30
        )
        self.prefix = prefix + ":"

    def get(self, key: str) -> str | None:
        value = self.client.get(self.prefix + key)
        return value.decode() if value is not None else None

    def set(self, key: str, value: str, ttl: int | None = None) -> None:
        self.client.set(self.prefix + key, value, ex=ttl)

    def add(self, key: str, value: str, ttl: int) -> bool:
        return bool(self.client.set(self.prefix + key, value, ex=ttl, nx=True))

    def delete(self, key: str) -> None:
        self.client.delete(self.prefix + key)

    def later(self, ops: list[tuple]) -> Callable[[], list]:
        """Send the operations now in one pipeline; the returned function reads their
        answers. It must be called once, also when the answers are not wanted any more:
        it gives the connection back."""
        commands: list[tuple] = []
        for op, *args in ops:
            if op == "incr":
                name = self.prefix + args[0]
                commands += [("INCR", name), ("EXPIRE", name, args[1], "NX")]
            elif op == "get":
                commands.append(("MGET", *(self.prefix + k for k in args[0])))
            else:
                raise ValueError(f"unknown cache operation {op!r}")
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise

        def answers() -> list:
            try:
                replies = [conn.read_response() for _ in commands]
            except BaseException:
                conn.disconnect()       # never hand back a connection with answers unread
                raise
            finally:
                pool.release(conn)
            return _answers(ops, replies)
        return answers

    def ping(self) -> None:
        self.client.ping()

    def hset(self, key: str, field: str, value: str) -> None:
        self.client.hset(self.prefix + key, field, value)

    def hdel(self, key: str, *fields: str) -> None:
        if fields:
            self.client.hdel(self.prefix + key, *fields)

    def hgetall(self, key: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.client.hgetall(self.prefix + key).items()}


def _answers(ops: list[tuple], replies: list) -> list:
    """One answer an operation: an incr's count (INCR's reply; EXPIRE's is skipped), a
    get's values."""
    out, at = [], 0
    for op, *_ in ops:
        if op == "incr":
            out.append(int(replies[at]))
            at += 2
        else:
            out.append([v.decode() if v is not None else None for v in replies[at]])
            at += 1
    return out


def new_token() -> str:
    return secrets.token_hex(8)


_memory = MemoryCache()


_redis: dict[tuple[str, str], RedisCache] = {}


def make_cache(settings: Settings) -> Cache:
    """Redis when configured; otherwise the one in-memory cache of this process. Either
    way one per process and store (a Redis client's pool is thread-safe and renews
    itself after a fork)."""
    if not settings.redis_url:
        return _memory
    key = (settings.redis_url, settings.cs_redis_prefix)
    if key not in _redis:
        _redis[key] = RedisCache(*key)
    return _redis[key]
