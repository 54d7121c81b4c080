"""What an intervention's delivery carries on the webhook channel, the in-app queue and
the test-mode sink: the channel-delivery payload (docs/webhooks.md)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ..customers.models import Customer
from ..interventions.models import Intervention

# the confidence of an intervention created by hand: the caller chose it (docs/api.md)
BY_HAND = 1.0


def customer_of(session: Session, iv: Intervention) -> Customer | None:
    return session.get(Customer, (iv.tenant_id, iv.user_id))


def channel_payload(iv: Intervention, customer: Customer | None) -> dict:
    """The channel-delivery payload: its strings and number are never null (an
    intervention made by hand has no reasoning and the confidence of a choice)."""
    return {"intervention_id": iv.id, "user_id": iv.user_id, "playbook_id": iv.playbook_id, "channel": iv.channel,
            "message_body": iv.message_body or "", "reasoning": iv.reasoning or "",
            "confidence": BY_HAND if iv.confidence is None else iv.confidence,
            "metadata": {"lifecycle_stage": customer.lifecycle_stage if customer else None,
                         "activation_score": customer.activation_score if customer else None,
                         "risk_level": customer.risk_level if customer else None}}
