"""Wake-ups for in-app streams: "user U of tenant T has something new".

A wake-up carries no message; the stream reads what is new from the database. So a lost
wake-up only delays a message until the next one (or the next connect), and many
wake-ups for one user cost one read.

Embedded mode: one in-process registry (`LocalWakeups`), since the delivery job and the
stream live in the same process. Production: the publisher sends `tenant:user` on the
Redis channel `<CS_REDIS_PREFIX>:in_app`; each API process that holds streams runs one
listener thread subscribed to it, which wakes its local waiters. The listener starts
with the first stream of the process, wakes every local stream whenever it
(re)subscribes (a wake-up may have been missed while it was away), and stops after a
while without streams.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import redis

from ..config import Settings

log = logging.getLogger(__name__)

SUBSCRIBE_WAIT = 5.0      # seconds a new stream waits for the listener's subscription
LISTENER_IDLE = 30.0      # seconds without streams before a process's listener stops
RECONNECT_PAUSE = (0.2, 5.0)


def _key(tenant_id: str, user_id: str) -> str:
    return f"{tenant_id}:{user_id}"      # tenant ids are UUIDs: the first ':' splits


class WakeupsUnavailable(Exception):
    """The wake-up channel could not be subscribed in time."""


class Waiter:
    """One stream's wake-up flag. A wake-up that arrives while the stream is busy stays
    set, so the next `wait` (or `take`) sees it. A stream held by the event loop
    (in_app_loop.py) sets `notify`, which every wake-up calls besides (from whatever
    thread wakes it: the callback hands over to the loop thread itself)."""

    def __init__(self, registry: "LocalWakeups", key: str):
        self._registry = registry
        self.key = key
        self._event = threading.Event()
        self.notify: Callable[[], None] | None = None

    def wait(self, timeout: float) -> bool:
        """True when woken (the flag is cleared), False after `timeout` seconds."""
        woken = self._event.wait(timeout)
        self._event.clear()
        return woken

    def take(self) -> bool:
        """True when woken since the last look (the flag is cleared), without waiting."""
        woken = self._event.is_set()
        self._event.clear()
        return woken

    def wake(self) -> None:
        self._event.set()
        notify = self.notify
        if notify is not None:
            notify()

    def close(self) -> None:
        self._registry.remove(self)

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalWakeups:
    """The waiters of this process, by tenant and user."""

    def __init__(self):
        self._waiters: dict[str, set[Waiter]] = {}
        self._lock = threading.Lock()

    def waiter(self, tenant_id: str, user_id: str) -> Waiter:
        made = Waiter(self, _key(tenant_id, user_id))
        with self._lock:
            self._waiters.setdefault(made.key, set()).add(made)
        return made

    def remove(self, waiter: Waiter) -> None:
        with self._lock:
            group = self._waiters.get(waiter.key)
            if group is not None:
                group.discard(waiter)
                if not group:
                    del self._waiters[waiter.key]

    def wake(self, key: str) -> None:
        with self._lock:
            group = list(self._waiters.get(key, ()))
        for waiter in group:
            waiter.wake()

    def wake_all(self) -> None:
        with self._lock:
            every = [w for group in self._waiters.values() for w in group]
        for waiter in every:
            waiter.wake()

    def count(self) -> int:
        with self._lock:
            return sum(len(group) for group in self._waiters.values())

    def publish(self, tenant_id: str, user_id: str) -> None:
        self.wake(_key(tenant_id, user_id))


class RedisWakeups:
    """Wake-ups across processes through Redis pub/sub."""

    def __init__(self, url: str, prefix: str):
        self.channel = f"{prefix}:in_app"
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=5.0,
                                           health_check_interval=30)
        self.local = LocalWakeups()
        self._lock = threading.Lock()
        self._listener: _Listener | None = None

    def publish(self, tenant_id: str, user_id: str) -> None:
        self.client.publish(self.channel, _key(tenant_id, user_id))

    def waiter(self, tenant_id: str, user_id: str) -> Waiter:
        """Register first, then make sure the listener is subscribed: a wake-up published
        after this returns reaches the waiter."""
        made = self.local.waiter(tenant_id, user_id)
        if not self._running_listener().subscribed.wait(SUBSCRIBE_WAIT):
            made.close()
            raise WakeupsUnavailable(f"could not subscribe to {self.channel} in {SUBSCRIBE_WAIT:.0f} s")
        return made

    def _running_listener(self) -> "_Listener":
        with self._lock:
            if self._listener is None:
                self._listener = _Listener(self)
                self._listener.start()
            return self._listener

    def listener_may_stop(self, listener: "_Listener") -> bool:
        """Called by an idle listener: it stops (and is forgotten) only if no stream came."""
        with self._lock:
            if self.local.count():
                return False
            if self._listener is listener:
                self._listener = None
            return True


class _Listener(threading.Thread):
    def __init__(self, owner: RedisWakeups):
        super().__init__(name=f"in-app wake-ups {owner.channel}", daemon=True)
        self.owner = owner
        self.subscribed = threading.Event()

    def run(self) -> None:
        pause = RECONNECT_PAUSE[0]
        while True:
            try:
                if self._listen():
                    return
            except redis.RedisError as exc:
                self.subscribed.clear()
                log.warning("in-app wake-ups: %s; subscribing again in %.1f s", exc, pause)
                time.sleep(pause)
                pause = min(pause * 2, RECONNECT_PAUSE[1])

    def _listen(self) -> bool:
        """Subscribe and relay wake-ups; True when stopped for lack of streams."""
        pubsub = self.owner.client.pubsub()
        try:
            pubsub.subscribe(self.owner.channel)
            idle_since = None
            while True:
                message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    self._relay(message)
                if self.owner.local.count():
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > LISTENER_IDLE and self.owner.listener_may_stop(self):
                    return True
        finally:
            self.subscribed.clear()
            pubsub.close()

    def _relay(self, message: dict) -> None:
        if message["type"] == "subscribe":
            self.subscribed.set()
            self.owner.local.wake_all()    # anything published while unsubscribed is read now
        elif message["type"] == "message":
            self.owner.local.wake(message["data"].decode())


_memory = LocalWakeups()
_redis: dict[tuple[str, str], RedisWakeups] = {}
_redis_lock = threading.Lock()


def for_settings(settings: Settings) -> LocalWakeups | RedisWakeups:
    """Redis pub/sub when REDIS_URL is set; otherwise the one registry of this process."""
    if not settings.redis_url:
        return _memory
    key = (settings.redis_url, settings.cs_redis_prefix)
    with _redis_lock:
        if key not in _redis:
            _redis[key] = RedisWakeups(*key)
        return _redis[key]


def wake_everyone() -> None:
    """Wake every stream of this process, whatever its settings."""
    with _redis_lock:
        registries = [_memory] + [w.local for w in _redis.values()]
    for registry in registries:
        registry.wake_all()
