"""Jobs of the customers domain."""

from __future__ import annotations

import logging

from ..jobs.broker import actor
from ..jobs.context import runtime
from . import service

log = logging.getLogger(__name__)
SWEEP_EVERY_SECONDS = 300


@actor(max_retries=3, time_limit=30 * 60 * 1000)
def sweep_scores() -> None:
    """Apply time decay (dormant, churned, fading engagement) to every tenant's users."""
    rt = runtime()
    with rt.session() as session:
        count = service.sweep(session, now=rt.now())
    log.info("score sweep re-scored %d users", count)
