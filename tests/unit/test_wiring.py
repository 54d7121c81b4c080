"""The composition root registers every part once, and nothing is left to an import:
every job actor any module declares is one the root binds to the broker, and the
channel registry knows each channel."""

from __future__ import annotations

import importlib
import pkgutil

import cs_daemon
from cs_daemon import domain_events, wiring
from cs_daemon.channels import base as channels
from cs_daemon.delivery import actors as delivery_jobs
from cs_daemon.delivery import service as delivery
from cs_daemon.jobs import broker, registry


def _import_every_module() -> None:
    for info in pkgutil.walk_packages(cs_daemon.__path__, "cs_daemon."):
        if not info.name.endswith(".entry"):      # the dramatiq worker entry reads the environment
            importlib.import_module(info.name)


def test_every_declared_actor_is_wired():
    wiring.wire()
    _import_every_module()
    declared = {a.actor_name for a in broker._actors}
    assert declared and declared == {a.actor_name for a in registry.ACTORS}


def test_wiring_registers_the_channels_the_listeners_and_the_jobs_once():
    wiring.wire()
    wiring.wire()
    assert {"email", "in_app", "webhook", "crm", "sink"} <= channels.names()
    assert {kind: len(fns) for kind, fns in delivery.LISTENERS.items()} == \
        {"channel": 1, "event": 1, "test": 1, "dispatch": 1}
    assert len(domain_events._handlers[domain_events.EventsIngested]) == 1
    assert {p.name for p in registry.periodic()} == {
        "sweep_scores", "sweep_deliveries", "sweep_decisions", "sweep_outcomes", "sweep_expiries",
        "sweep_traces", "sweep_event_log"}
    assert domain_events._after_commit[domain_events.DeliveryDue] == [delivery_jobs.send_soon]
