"""Uplift per playbook: the positive rate of its delivered interventions minus that of its
held-out decisions, with Newcombe's hybrid score interval (docs/decisions.md, "Holdout
and uplift"). Both arms count live interventions with a settled outcome; one grouped
query for every playbook."""

from __future__ import annotations

from datetime import datetime
from math import sqrt

from sqlalchemy import select, func
from sqlalchemy.orm import Session

from ..interventions.models import Intervention

Z95 = 1.959964
DECIDED = ("positive", "negative", "neutral")
ARMS = {"delivered": "treated", "held_out": "held_out"}


def wilson(positive: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of positive / n (n > 0)."""
    p = positive / n
    centre = p + z * z / (2 * n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return (centre - half) / scale, (centre + half) / scale


def newcombe(pos1: int, n1: int, pos0: int, n0: int, z: float = Z95) -> tuple[float, float, float]:
    """p1 − p0 and its hybrid score interval (Newcombe 1998, method 10)."""
    p1, p0 = pos1 / n1, pos0 / n0
    l1, u1 = wilson(pos1, n1, z)
    l0, u0 = wilson(pos0, n0, z)
    d = p1 - p0
    return d, d - sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2), d + sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)


def figures(treated: tuple[int, int], held_out: tuple[int, int]) -> dict:
    """The uplift fields of one playbook from each arm's (n, positive)."""
    (n1, pos1), (n0, pos0) = treated, held_out
    shown = {"treated": {"n": n1, "positive": pos1}, "held_out": {"n": n0, "positive": pos0}}
    if not n1 or not n0:
        return {"uplift": None, "uplift_ci": None, "uplift_significant": False, **shown}
    d, low, high = newcombe(pos1, n1, pos0, n0)
    return {"uplift": round(d, 4), "uplift_ci": [round(low, 4), round(high, 4)],
            "uplift_significant": low > 0, **shown}


def by_playbook(session: Session, *, since: datetime | None = None) -> dict[str, dict]:
    """The uplift fields of every playbook with a settled outcome in either arm (a
    tenant-scoped session); `since`: only interventions planned from then on."""
    query = (select(Intervention.playbook_id, Intervention.status, func.count(),
                    func.count().filter(Intervention.outcome == "positive"))
             .where(Intervention.playbook_id.isnot(None), Intervention.test.is_(False),
                    Intervention.status.in_(tuple(ARMS)), Intervention.outcome.in_(DECIDED))
             .group_by(Intervention.playbook_id, Intervention.status))
    if since is not None:
        query = query.where(Intervention.planned_at >= since)
    arms: dict[str, dict[str, tuple[int, int]]] = {}
    for playbook_id, status, n, positive in session.execute(query):
        arms.setdefault(playbook_id, {})[ARMS[status]] = (n, positive)
    return {pid: figures(a.get("treated", (0, 0)), a.get("held_out", (0, 0))) for pid, a in arms.items()}


def empty() -> dict:
    """The fields of a playbook with no settled outcome in either arm."""
    return figures((0, 0), (0, 0))
