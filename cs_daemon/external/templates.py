"""The shape of a platform template: the built-in platforms (external/platforms.py) and
the partner integrations shared with a tenant (partners/integrations.py) are both
templates, so the platform list can include the partners' without the two modules
importing each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    id: str
    name: str
    description: str
    domain: str
    credential_fields: tuple[str, ...]
    action_types: tuple[dict, ...]      # create fields; delivery_webhook may use {base_url} (filled at dispatch)
