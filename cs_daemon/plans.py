"""Plan tiers and their limits (docs/api.md, "Plans"). `None` means unlimited."""

from __future__ import annotations

from dataclasses import dataclass

TIERS = ("trial", "starter", "growth", "scale")
STATUSES = ("trialing", "active", "past_due", "canceled")


@dataclass(frozen=True)
class Plan:
    tier: str
    playbooks: int | None
    team: int | None
    webhooks: bool
    tracked_users: int | None
    requests_per_minute: int
    upgrade_to: str | None
    webhook_endpoints: int = 0      # active endpoints at once (docs/webhooks.md, Endpoint limits)


PLANS = {
    "trial": Plan("trial", 3, 2, False, 1_000, 600, "starter"),
    "starter": Plan("starter", 10, 5, False, 10_000, 1_200, "growth"),
    "growth": Plan("growth", 50, 25, True, 100_000, 6_000, "scale", webhook_endpoints=20),
    "scale": Plan("scale", None, None, True, None, 30_000, None, webhook_endpoints=100),
}


def plan(tier: str) -> Plan:
    return PLANS.get(tier, PLANS["trial"])


def cheapest_with(feature: str) -> str | None:
    """The cheapest tier on which `feature` (a Plan attribute) is on."""
    for tier in TIERS:
        if getattr(PLANS[tier], feature):
            return tier
    return None
