"""A customer's interventions, as the customer views show them: the detail's list and the
next action of each customer of a list page (docs/api.md, "Customers")."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from ..playbooks.models import Playbook
from .models import Intervention

DETAIL_LIMIT = 100
ESCALATE = "escalate"
# what is still to happen to a user: approved work goes out first, planned work awaits review
PENDING = ("approved", "planned")


def of_user(session: Session, tenant_id: str, user_id: str, *, limit: int = DETAIL_LIMIT) -> list[Intervention]:
    """The user's interventions (escalations are listed apart), newest planned first."""
    return list(session.scalars(
        select(Intervention)
        .where(Intervention.tenant_id == tenant_id, Intervention.user_id == user_id,
               Intervention.channel != ESCALATE)
        .order_by(Intervention.planned_at.desc(), Intervention.id.desc()).limit(limit)
    ))


@dataclass(frozen=True)
class NextAction:
    intervention_id: str
    channel: str
    status: str
    playbook: str


def next_actions(session: Session, tenant_id: str, user_ids: list[str]) -> dict[str, NextAction]:
    """Each user's next pending intervention, in one query for the whole page: the oldest
    approved one, else the oldest planned one. Users with none are absent."""
    if not user_ids:
        return {}
    rank = func.row_number().over(
        partition_by=Intervention.user_id,
        order_by=(case((Intervention.status == "approved", 0), else_=1),
                  Intervention.planned_at, Intervention.id))
    pending = (
        select(Intervention.user_id, Intervention.id, Intervention.channel, Intervention.status,
               Intervention.playbook_id, rank.label("rank"))
        .where(Intervention.tenant_id == tenant_id, Intervention.user_id.in_(user_ids),
               Intervention.status.in_(PENDING), Intervention.channel != ESCALATE)
        .subquery())
    rows = session.execute(
        select(pending.c.user_id, pending.c.id, pending.c.channel, pending.c.status, Playbook.name)
        .join(Playbook, (Playbook.id == pending.c.playbook_id) & (Playbook.tenant_id == tenant_id))
        .where(pending.c.rank == 1))
    return {user_id: NextAction(intervention_id=iv_id, channel=channel, status=status, playbook=name)
            for user_id, iv_id, channel, status, name in rows}
