"""The broker: Dramatiq's StubBroker with an in-process worker (embedded) or Redis
(production), chosen from the settings before any job runs.

Actors are declared with `actor` below. They bind to whichever broker `install`
chose, so the same actor modules serve both modes (and tests that switch modes).
"""

from __future__ import annotations

import threading
from typing import Callable

import dramatiq
import redis
from dramatiq import Message
from dramatiq.broker import MessageProxy
from dramatiq.errors import ConnectionClosed
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import compute_backoff

from ..config import Settings

_actors: list[dramatiq.Actor] = []
_lock = threading.Lock()
_broker: dramatiq.Broker | None = None


def current() -> dramatiq.Broker:
    global _broker
    with _lock:
        if _broker is None:
            _broker = StubBroker()
            dramatiq.set_broker(_broker)
        return _broker


def install(settings: Settings, middleware: list | None = None,
            actors: list[dramatiq.Actor] | None = None) -> dramatiq.Broker:
    """Make the broker for these settings the current one and bind the actors to it
    (the composition root's list; every one declared when None)."""
    global _broker
    if settings.redis_url:
        broker: dramatiq.Broker = BellBroker(
            url=settings.redis_url, namespace=f"{settings.cs_redis_prefix}:dramatiq"
        )
    else:
        broker = StubBroker()
    for mw in middleware or []:
        broker.add_middleware(mw)
    with _lock:
        _broker = broker
        dramatiq.set_broker(broker)
        for act in _actors if actors is None else actors:
            act.broker = broker
            broker.declare_actor(act)
    return broker


BELL_DEPTH = 64      # rings kept per queue: enough to wake every idle consumer, bounded


class BellBroker(RedisBroker):
    """Dramatiq's Redis broker whose idle consumers wait for a doorbell instead of
    sleeping (docs/channels.md, "Across processes"). Dramatiq's own consumer polls an empty queue
    with a growing sleep of up to `worker_timeout` (1 s), which a job enqueued meanwhile
    waits out (an approved in-app message did, on its way to the stream). Here every
    enqueue without a delay also pushes onto the queue's bell list (`<namespace>:<queue>.bell`,
    in the same round trip), and an idle consumer blocks on that list (BLPOP) for as long
    as it would have slept: a job is picked up as soon as it is enqueued, and an idle
    worker costs no more Redis calls than before. A bell lost or left over only means one
    sleep as before, or one extra look at the queue."""

    @property
    def consumer_class(self):
        return _BellConsumer

    def bell(self, queue_name: str) -> str:
        return f"{self.namespace}:{queue_name}.bell"

    def do_enqueue(self, queue_name: str, *args):
        result = self._dispatch("enqueue")(queue_name, *args)   # what RedisBroker.do_enqueue runs
        if queue_name in self.queues:         # an immediate job (a delayed one goes to its .DQ)
            with self.client.pipeline(transaction=False) as pipe:
                pipe.lpush(self.bell(queue_name), 1)
                pipe.ltrim(self.bell(queue_name), 0, BELL_DEPTH - 1)
                pipe.execute()
        return result

    def wait_for_bell(self, queue_name: str, timeout_ms: int) -> None:
        self.client.blpop([self.bell(queue_name)], timeout=max(timeout_ms, 1) / 1000)


class _BellConsumer(_RedisConsumer):
    """Dramatiq's Redis consumer (its `__next__`, as of dramatiq 2.x) with the idle sleep
    replaced by a wait for the queue's bell."""

    def __next__(self):
        try:
            while True:
                try:
                    data = self.message_cache.pop(0)
                    if data is None:
                        continue
                    self.misses = 0
                    message = Message.decode(data)
                    self.queued_message_ids.add(message.message_id)
                    return MessageProxy(message)
                except IndexError:
                    messages = []
                    if self.outstanding_message_count < self.prefetch:
                        self.message_cache = messages = self.broker.do_fetch(
                            self.queue_name, self.prefetch - self.outstanding_message_count)
                    if not messages:
                        self.misses, backoff_ms = compute_backoff(self.misses, max_backoff=self.timeout)
                        self.broker.wait_for_bell(self.queue_name, backoff_ms)
                        return None
        except redis.ConnectionError as e:
            raise ConnectionClosed(e) from None


def actor(fn: Callable | None = None, **options):
    """Declare a job. Jobs take ids, reload their rows, and are safe to run twice."""

    def decorate(func: Callable) -> dramatiq.Actor:
        act = dramatiq.Actor(
            func,
            broker=current(),
            actor_name=options.pop("actor_name", func.__name__),
            queue_name=options.pop("queue_name", "default"),
            priority=options.pop("priority", 0),
            options=options,
        )
        with _lock:
            _actors.append(act)
        return act

    return decorate(fn) if fn is not None else decorate
