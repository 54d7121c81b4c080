"""What stored data no longer validates, tenant by tenant (`cs doctor`): configs and
playbooks written before today's rules, or straight into the database. The service never
acts on such values (a config value takes its default, a playbook is skipped), so this
is where they show, with the field and what is wrong, to be fixed through the API."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from .playbooks import service as playbooks
from .playbooks.models import Playbook
from .tenants import config as tenant_config
from .tenants.models import Tenant


@dataclass(frozen=True)
class Problem:
    tenant_id: str
    tenant_name: str
    playbook_id: str | None
    playbook_name: str | None
    field: str
    message: str


@dataclass(frozen=True)
class Report:
    tenants: int
    playbooks: int
    problems: list[Problem]

    def as_dict(self) -> dict:
        return {"ok": not self.problems, "tenants_checked": self.tenants, "playbooks_checked": self.playbooks,
                "problems": [asdict(p) for p in self.problems]}


def examine(session: Session) -> Report:
    """Every tenant's config and every playbook (an unscoped session)."""
    tenants = list(session.scalars(select(Tenant).order_by(Tenant.created_at, Tenant.id)))
    names = {t.id: t.name for t in tenants}
    found = [Problem(t.id, t.name, None, None, d["field"], d["message"])
             for t in tenants for d in _config_problems(t)]
    rows = list(session.scalars(select(Playbook).order_by(Playbook.tenant_id, Playbook.created_at, Playbook.id)))
    found += [Problem(p.tenant_id, names.get(p.tenant_id, ""), p.id, p.name, d["field"], d["message"])
              for p in rows for d in playbooks.problems(p)]
    return Report(len(tenants), len(rows), found)


def _config_problems(tenant: Tenant) -> list[dict]:
    found = tenant_config.problems(tenant.config)
    typed = tenant_config.read(tenant.config)
    if typed.crm_webhook_url and not tenant.crm_webhook_secret_enc:
        found.append({"field": "config.crm_webhook_secret", "message": "is required with crm_webhook_url"})
    if isinstance(tenant.config, dict) and "crm_webhook_secret" in tenant.config:
        found.append({"field": "config.crm_webhook_secret",
                      "message": "is stored readable and not used: set it again with PATCH /api/settings"})
    return found
