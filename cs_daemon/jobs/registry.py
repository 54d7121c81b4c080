"""The job actors and periodic jobs of this process, as the composition root
(cs_daemon/wiring.py) registered them; the broker binds these actors and the scheduler
sends these jobs."""

from __future__ import annotations

import dramatiq

from .scheduler import Periodic

ACTORS: list[dramatiq.Actor] = []
PERIODIC: list[Periodic] = []


def periodic() -> list[Periodic]:
    return list(PERIODIC)
