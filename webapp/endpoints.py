"""Every API of the service, in the order the app registers them (the OpenAPI document
and the console read the same list)."""

from __future__ import annotations

from .api import Api
from .routes import (analytics, billing, connectors, customers, decisions, external, in_app, interventions, partner,
                     playbooks, settings, system, team, unsubscribe, webhooks)


def all_apis() -> list[Api]:
    return [system.api, settings.api, customers.api, connectors.api, webhooks.api, playbooks.api,
            decisions.api, interventions.api, external.api, team.api, analytics.api, unsubscribe.api, in_app.api, billing.api,
            partner.api]
