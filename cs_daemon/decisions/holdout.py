"""Who is held out: a stable share of each tenant's users whom the engine never contacts,
so that what its playbooks achieve can be measured against users it left alone
(docs/decisions.md, "Holdout and uplift").

A user's bucket is a number 0..9999 from the SHA-256 of "<tenant id>:<user id>" (the
first 8 hex digits read as an integer, modulo 10000); the user is held out when the
bucket is below holdout_percent × 100. The same user of the same tenant always falls in
the same bucket, so raising the share only adds users to the holdout and lowering it only
releases some; no other tenant's users are affected."""

from __future__ import annotations

import hashlib

from ..tenants import config as tenant_config
from ..tenants.models import Tenant

BUCKETS = 10_000


def bucket(tenant_id: str, user_id: str) -> int:
    digest = hashlib.sha256(f"{tenant_id}:{user_id}".encode()).hexdigest()
    return int(digest[:8], 16) % BUCKETS


def held_out(tenant_id: str, user_id: str, percent: float) -> bool:
    return bucket(tenant_id, user_id) < percent * BUCKETS / 100


def is_held_out(tenant: Tenant, user_id: str) -> bool:
    """Whether the tenant's current holdout_percent (default 5) holds this user out."""
    return held_out(tenant.id, user_id, tenant_config.read(tenant.config).holdout)
