"""customers/state.py: ingest calls apply_traits only for TRAIT_EVENTS, so every other
event must leave a customer as it was."""

from __future__ import annotations

from dataclasses import asdict

from cs_daemon.customers.bulk import CustomerRow
from cs_daemon.customers.state import TRAIT_EVENTS, apply_traits

PROPERTIES = {"name": "Ann", "email": "ann@example.com", "company": "Acme", "role": "cto", "team_size": 12,
              "locale": "fr-FR", "plan": "pro"}


def test_only_the_trait_events_set_traits():
    for event in ("page_viewed", "identify", "$identify ", "$Locale", "$set", "", "$locale_changed"):
        customer = CustomerRow(id="u1")
        apply_traits(customer, event, dict(PROPERTIES))
        assert asdict(customer) == asdict(CustomerRow(id="u1")), event
    for event in TRAIT_EVENTS:
        customer = CustomerRow(id="u1")
        apply_traits(customer, event, dict(PROPERTIES))
        assert customer.locale == "fr-FR", event
    assert TRAIT_EVENTS == {"$identify", "$locale"}
