"""Which Stripe price a plan and interval are sold at: the `STRIPE_PRICES` setting,
a JSON object `{"growth_monthly": "price_…", …}`, one deployment-wide price list (a
tenant's editable config is no place for what the tenant is charged)."""

from __future__ import annotations

import json

from ..errors import BillingNotConfigured

PAID_PLANS = ("starter", "growth", "scale")
INTERVALS = ("monthly", "annual")
KEYS = tuple(f"{plan}_{interval}" for plan in PAID_PLANS for interval in INTERVALS)


def parse_prices(value) -> dict[str, str]:
    """The setting's value as a dict; a ValueError names what is wrong with it."""
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError('must be a JSON object such as {"growth_monthly": "price_…"}') from None
    if not isinstance(value, dict) or not all(isinstance(v, str) and v for v in value.values()):
        raise ValueError('must be a JSON object of non-empty price ids such as {"growth_monthly": "price_…"}')
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; keys are {', '.join(KEYS)}")
    return dict(value)


def price_for(prices: dict[str, str], plan: str, interval: str) -> str:
    price = prices.get(f"{plan}_{interval}")
    if not price:
        raise BillingNotConfigured(f"billing is not configured: STRIPE_PRICES has no {plan}_{interval} price")
    return price


def plan_of(prices: dict[str, str], price_id: str | None) -> str | None:
    """The plan a Stripe price sells, or None for a price not in the list."""
    for key, price in prices.items():
        if price == price_id:
            return key.rsplit("_", 1)[0]
    return None
