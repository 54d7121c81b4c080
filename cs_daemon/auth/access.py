"""Who may call what: the one declarative table every endpoint goes through.

Each endpoint names an access class; the class says which roles and which key
permissions may use it (docs/api.md, "Authentication and access"). A key with
permission `full` satisfies every class except `partner`.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_ROLES = frozenset({"admin", "editor", "viewer"})
WRITERS = frozenset({"admin", "editor"})
ADMINS = frozenset({"admin"})
PERMISSIONS = ("full", "manage", "ingest", "decide", "read", "partner")


@dataclass(frozen=True)
class Rule:
    roles: frozenset[str]
    permissions: frozenset[str]
    partner_tenant: bool = False
    describe: str = ""


ACCESS: dict[str, Rule | None] = {
    # no key at all (health, OpenAPI document, invitation accept, signed links)
    "public": None,
    # GET endpoints: every role; keys with `read` or `full`
    "read": Rule(ALL_ROLES, frozenset({"read", "full"}), describe="any role; permission read or full"),
    # ordinary writes: editor or admin with a `full` key
    "write": Rule(WRITERS, frozenset({"full"}), describe="editor or admin; permission full"),
    # the spec's admin-only list and key management
    "admin": Rule(ADMINS, frozenset({"full"}), describe="admin; permission full"),
    "ingest": Rule(WRITERS, frozenset({"ingest", "full"}), describe="editor or admin; permission ingest or full"),
    "decide": Rule(WRITERS, frozenset({"decide", "full"}), describe="editor or admin; permission decide or full"),
    # reading what the learner logged: a key that may decide or may read
    "decide_or_read": Rule(ALL_ROLES, frozenset({"decide", "read", "full"}),
                           describe="any role; permission decide, read or full"),
    "manage": Rule(WRITERS, frozenset({"manage", "full"}), describe="editor or admin; permission manage or full"),
    "partner": Rule(
        ALL_ROLES, frozenset({"partner"}), partner_tenant=True,
        describe="permission partner on a partner tenant",
    ),
    # partner API writes (provisioning, integrations): viewers only read
    "partner_write": Rule(
        WRITERS, frozenset({"partner"}), partner_tenant=True,
        describe="editor or admin; permission partner on a partner tenant",
    ),
}


def refusal(access: str, *, role: str, permissions: list[str], partner: bool) -> str | None:
    """Why a key may not use an endpoint of this access class, or None when it may."""
    rule = ACCESS[access]
    if rule is None:
        return None
    if rule.partner_tenant and not partner:
        return "this tenant is not a partner"
    if not rule.permissions.intersection(permissions):
        wanted = " or ".join(sorted(rule.permissions))
        return f"this key lacks the permission this endpoint needs ({wanted})"
    if role not in rule.roles:
        return f"the role {role} may not do this ({rule.describe})"
    return None
