"""The broker: Dramatiq's StubBroker with an in-process worker (embedded) or Redis
(production), chosen from the settings before any job runs.

Actors are declared with `actor` below. They bind to whichever broker `install`
chose, so the same actor modules serve both modes (and tests that switch modes).
"""

from __future__ import annotations

import threading
from typing import Callable

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

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
        broker: dramatiq.Broker = RedisBroker(
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
