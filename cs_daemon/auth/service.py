"""Issue, verify, list and revoke API keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.orm import Session

from ..db import in_autocommit, session_scope
from ..errors import NotFound, Unauthorized, ValidationFailed
from ..team.models import ROLES, Member
from ..tenants.models import Tenant
from ..uow import uow_of
from . import keys, testmode
from .access import PERMISSIONS
from .models import ApiKey

LAST_USED_RESOLUTION = timedelta(minutes=1)

# Built once: every request runs these, and building a statement costs more than the
# cached execution of it.
_BY_DIGEST = (
    select(ApiKey.id, ApiKey.tenant_id, ApiKey.member_id, ApiKey.role, ApiKey.permissions, ApiKey.test,
           ApiKey.revoked_at, ApiKey.last_used_at, Tenant, Member.role.label("member_role"), Member.removed_at)
    .join(Tenant, Tenant.id == ApiKey.tenant_id)
    .outerjoin(Member, Member.id == ApiKey.member_id)
    .where(ApiKey.digest == bindparam("digest"))
)
_listed = ApiKey.__table__.c
_KEYS = (select(_listed.id, _listed.prefix, _listed.label, _listed.role, _listed.permissions, _listed.test,
                _listed.created_by, _listed.created_at, _listed.last_used_at, _listed.revoked_at)
         .order_by(_listed.created_at, _listed.id))
_ACTIVE_KEYS = _KEYS.where(_listed.revoked_at.is_(None))


@dataclass(frozen=True)
class IssuedKey:
    key: ApiKey
    secret: str


@dataclass(frozen=True)
class Caller:
    """Who is calling: the tenant, the key, its effective role and permissions."""

    tenant_id: str
    key_id: str
    role: str
    permissions: tuple[str, ...]
    member_id: str | None
    test: bool
    plan_tier: str
    partner: bool

    @property
    def actor(self) -> str:
        return self.member_id or f"key:{self.key_id}"


def issue(
    session: Session,
    tenant_id: str,
    *,
    role: str,
    permissions: list[str],
    now: datetime,
    test: bool = False,
    label: str | None = None,
    member_id: str | None = None,
    created_by: str | None = None,
) -> IssuedKey:
    _check(role, permissions)
    secret = keys.generate(test)
    key = ApiKey(
        tenant_id=tenant_id,
        member_id=member_id,
        created_by=created_by,
        label=label,
        role=role,
        permissions=sorted(set(permissions)),
        test=test,
        prefix=keys.prefix(secret),
        digest=keys.digest(secret),
        created_at=now,
    )
    session.add(key)
    session.flush()
    return IssuedKey(key, secret)


def mint(session: Session, caller: Caller, *, role: str, permissions: list[str], test: bool,
         label: str | None, now: datetime) -> IssuedKey:
    """A key minted through the API: it belongs to whoever minted it (revoked with that
    member), and a test key mints only test keys."""
    testmode.may_mint(test_key=caller.test, live_key=not test)
    return issue(session, caller.tenant_id, role=role, permissions=permissions, now=now, test=test, label=label,
                 created_by=caller.actor)


def _check(role: str, permissions: list[str]) -> None:
    details = []
    if role not in ROLES:
        details.append({"field": "role", "message": f"must be one of {', '.join(ROLES)}"})
    if not permissions:
        details.append({"field": "permissions", "message": "at least one permission is needed"})
    for i, perm in enumerate(permissions):
        if perm not in PERMISSIONS:
            details.append(
                {"field": f"permissions[{i}]", "message": f"must be one of {', '.join(PERMISSIONS)}"}
            )
    if details:
        raise ValidationFailed("invalid API key request", details)


def authenticate(session: Session, raw: str | None, *, now: datetime) -> Caller:
    """The caller behind a bearer key; Unauthorized for a missing, unknown or revoked one."""
    return identify(session, raw, now=now)[0]


def identify(session: Session, raw: str | None, *, now: datetime) -> tuple[Caller, datetime | None]:
    """authenticate(), and when the key was last used before this request."""
    if not raw or not keys.well_formed(raw):
        raise Unauthorized("missing or malformed API key")
    row = session.execute(_BY_DIGEST, {"digest": keys.digest(raw)}).first()
    if row is None:
        raise Unauthorized("unknown API key")
    key, tenant, member_role, member_removed = row, row.Tenant, row.member_role, row.removed_at
    uow_of(session).tenant = tenant   # keeps it in the identity map: settings reads need no query
    if key.revoked_at is not None:
        raise Unauthorized("this API key has been revoked")
    if key.member_id is not None and member_removed is not None:
        raise Unauthorized("the team member of this API key was removed")
    last_used_at = key.last_used_at
    if last_used_at is None or now - last_used_at >= LAST_USED_RESOLUTION:
        touch(session, key.id, tenant.id, now)
        last_used_at = now
    return Caller(
        tenant_id=key.tenant_id,
        key_id=key.id,
        role=member_role or key.role,
        permissions=tuple(key.permissions),
        member_id=key.member_id,
        test=key.test,
        plan_tier=tenant.plan_tier,
        partner=tenant.partner,
    ), last_used_at


def touch(session: Session, key_id: str, tenant_id: str, now: datetime) -> None:
    """Record use at most once a minute, with one conditional UPDATE (no read-modify-write).
    The stamp is no credential: the key memo need not hear of it. In a request without a
    transaction it is one statement; in one with a transaction it runs once that has
    committed, in a statement of its own: held until commit, the key's row made a request
    revoking that key (removing its member) wait for this one while this one waited for a
    lock that request held (two admins removing each other). The row is taken with SKIP
    LOCKED: a request of another process stamping the same key at that moment makes the
    stamp (docs/api.md, "Authentication and access")."""
    if in_autocommit(session.connection()):
        _stamp(session, [key_id], now)
    else:
        uow_of(session).collect(_stamp_after_commit, key_id, tenant_id, now, uow_of(session).settings)


def _stamp_after_commit(key_ids: list[str], tenant_id: str, now: datetime, settings) -> None:
    with session_scope(settings, tenant_id=tenant_id, atomic=False) as session:
        _stamp(session, key_ids, now)


def _stamp(session: Session, key_ids: list[str], now: datetime) -> None:
    due = (select(ApiKey.id)
           .where(ApiKey.id.in_(key_ids),
                  or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at <= now - LAST_USED_RESOLUTION))
           .with_for_update(skip_locked=True))
    session.execute(
        update(ApiKey)
        .where(ApiKey.id.in_(due))
        .values(last_used_at=now)
        .execution_options(keeps_credentials=True)
    )


def list_keys(session: Session, *, include_revoked: bool = False) -> list:
    """Rows with the key's columns (plain rows: this is on the settings page's hot path;
    the tenant session still scopes the table)."""
    return list(session.execute(_KEYS if include_revoked else _ACTIVE_KEYS))


def revoke(session: Session, key_id: str, *, now: datetime) -> ApiKey:
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFound("API key not found")
    if key.revoked_at is None:
        key.revoked_at = now
    return key


def follow_role(session: Session, member_id: str, role: str) -> None:
    """A member's own keys carry the member's role (authentication reads the member's; the
    stored one is what key lists show, so they follow a role change too)."""
    for key in _own_keys(session, member_id):
        key.role = role


def revoke_keys_of(session: Session, member_id: str, *, now: datetime) -> None:
    """Revoke a removed member's own keys: authentication refuses them already (it checks
    the member), and key lists then show them revoked instead of active."""
    for key in _own_keys(session, member_id):
        key.revoked_at = now


def _own_keys(session: Session, member_id: str) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).where(ApiKey.member_id == member_id, ApiKey.revoked_at.is_(None))))


def revoke_minted_by(session: Session, member_id: str, *, now: datetime) -> int:
    """Revoke the keys a member minted, and those minted in turn by these keys (a removed
    member keeps no way in through a key made with one of theirs). Returns how many."""
    minters, revoked = [member_id], 0
    while minters:
        found = list(session.scalars(select(ApiKey).where(ApiKey.created_by.in_(minters),
                                                          ApiKey.revoked_at.is_(None))))
        for key in found:
            key.revoked_at = now
        revoked += len(found)
        minters = [f"key:{key.id}" for key in found]
    return revoked
