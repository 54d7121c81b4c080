"""The modules that declare actors, and the periodic jobs. Imported by every process that
sends or runs jobs."""

from __future__ import annotations

import importlib

from .scheduler import Periodic

# actor modules, and the modules that register delivery listeners
ACTOR_MODULES: list[str] = ["cs_daemon.customers.actors", "cs_daemon.delivery.actors",
                            "cs_daemon.decisions.actors", "cs_daemon.webhooks.service",
                            "cs_daemon.interventions.pipeline", "cs_daemon.channels.sink",
                            "cs_daemon.external.service", "cs_daemon.team.mail",
                            "cs_daemon.interventions.actors", "cs_daemon.tenants.actors",
                            "cs_daemon.console.mail"]


def load_actors() -> None:
    for name in ACTOR_MODULES:
        importlib.import_module(name)


def periodic() -> list[Periodic]:
    from ..customers import actors as customers
    from ..decisions import actors as decisions
    from ..delivery import actors as delivery
    from ..interventions import actors as interventions
    from ..tenants import actors as tenants

    return [
        Periodic("sweep_scores", customers.SWEEP_EVERY_SECONDS, customers.sweep_scores.send),
        Periodic("sweep_deliveries", delivery.SWEEP_EVERY_SECONDS, delivery.sweep_deliveries.send),
        Periodic("sweep_decisions", decisions.SWEEP_EVERY_SECONDS, decisions.sweep_decisions.send),
        Periodic("sweep_outcomes", interventions.SWEEP_EVERY_SECONDS, interventions.sweep_outcomes.send),
        Periodic("sweep_expiries", tenants.SWEEP_EVERY_SECONDS, tenants.sweep_expiries.send),
    ]
