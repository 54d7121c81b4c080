"""Platform credentials (docs/partners.md, "Credentials"): kept encrypted, and read only when
a dispatch is sent, to fill the placeholders of a platform action type's URL.

A platform action type keeps its `delivery_webhook` as the template's
(`{base_url}/hooks/award-points`); its dispatches go to `platform:<platform id>:<template>`,
a reference the delivery mechanism resolves at send time. So the action type, every
listing, the delivery row and its log hold the template, never a credential.
"""

from __future__ import annotations

import json
import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import crypto
from .models import PlatformConnection

PLACEHOLDER = re.compile(r"{([^{}]*)}")
SCHEME = "platform"


def is_template(url: str) -> bool:
    return PLACEHOLDER.search(url) is not None


def fill(template: str, credentials: dict) -> str:
    """The URL a template names with these credentials (KeyError for a missing one)."""
    return PLACEHOLDER.sub(lambda m: credentials[m.group(1)], template).rstrip("/")


def reference(platform_id: str, template: str) -> str:
    return f"{SCHEME}:{platform_id}:{template}"


def connection(session: Session, platform_id: str) -> PlatformConnection | None:
    return session.scalars(select(PlatformConnection).where(PlatformConnection.platform_id == platform_id)).first()


def store(conn: PlatformConnection, credentials: dict, *, secret_key: str) -> None:
    conn.credentials_enc = crypto.encrypt(secret_key, json.dumps(credentials))


def resolve(session: Session, ref: str, secret_key: str) -> tuple[str, tuple[str, ...]]:
    """(URL, the credentials in it) of a `<platform id>:<template>` reference, from the
    tenant's connection; LookupError when the platform is not connected."""
    platform_id, template = ref.split(":", 1)
    conn = connection(session, platform_id)
    if conn is None or not conn.connected:
        raise LookupError(f"platform {platform_id} is not connected")
    credentials = json.loads(crypto.decrypt(secret_key, conn.credentials_enc))
    return fill(template, credentials), tuple(v for v in credentials.values() if isinstance(v, str) and v)
