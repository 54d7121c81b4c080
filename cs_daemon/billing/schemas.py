from __future__ import annotations

from typing import Literal

from ..schemas import Wire


class CheckoutRequest(Wire):
    plan: Literal["starter", "growth", "scale"]
    interval: Literal["monthly", "annual"] = "monthly"


class SessionUrl(Wire):
    url: str


class WebhookReceived(Wire):
    received: bool
    duplicate: bool
