"""How an intervention or an escalation changes status (docs/api.md, "Concurrent
changes"). Every change, by a person (approve, pause, reject, rollback, handle,
delegate) or by the pipeline (sent, delivered, failed), goes through `move`: the row is
read locked (`db.locked`), its status checked against the ones the change starts from,
and the new status written in the same transaction. So of concurrent changes exactly
one finds the status it needs: ten approvals of one intervention make one approval (and
one delivery), and a pause or rollback committed while a delivery attempt is in flight
leaves nothing for that attempt to move."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ..db import locked
from ..errors import InvalidState
from .models import Intervention

IN_FLIGHT = ("approved", "sent")          # the pipeline may still move these
# a held-out user's decision (docs/decisions.md, "Holdout and uplift"): never delivered,
# no change leads out of it; only its outcome is settled (interventions/outcomes.py)
HELD_OUT = "held_out"
LIVE = ("approved", "sent", "delivered")  # their deliveries may still leave

# what a person may do to an intervention or escalation, from which statuses (flag: any)
FROM = {
    "approve": ("planned",),
    "pause": ("planned", "approved"),
    "reject": ("planned",),
    "edit": ("planned",),
    "rollback": LIVE,
    "handle": ("open", "delegated"),
    "delegate": ("open",),
}
# ... and the status each leads to: with FROM, the whole table of a person's changes
# (docs/interventions.md, "Changes a person may ask for"); the pipeline's own moves take
# IN_FLIGHT to sent, delivered or failed
TO = {
    "approve": "approved",
    "pause": "planned",
    "reject": "rejected",
    "edit": "planned",
    "rollback": "rolled_back",
    "handle": "handled",
    "delegate": "delegated",
}


def available(status: str) -> frozenset[str]:
    """The changes a person may ask for on a row in this status (what a screen offers)."""
    return frozenset(action for action, allowed in FROM.items() if status in allowed) | {"flag"}


def move(session: Session, iv: Intervention, to: str, *, allowed: tuple[str, ...], **values) -> str | None:
    """Lock `iv` and, when its status is one of `allowed`, set it to `to` with `values`.
    Returns the status it had, or None when it had another (`iv` then shows the current
    row, and nothing is written)."""
    current = locked(session, Intervention, iv.id)
    if current is None or current.status not in allowed:
        return None
    was = current.status
    current.status = to
    for name, value in values.items():
        setattr(current, name, value)
    return was


def change(session: Session, iv: Intervention, action: str, to: str, *, allowed: tuple[str, ...],
           refused_with: int = 404, **values) -> str:
    """`move`, for a change someone asked for: refused with InvalidState (404 for approve,
    reject, rollback and the escalation actions, 409 for pause) naming the status the row
    has now."""
    was = move(session, iv, to, allowed=allowed, **values)
    if was is None:
        noun = "an escalation" if iv.channel == "escalate" else "an intervention"
        exc = InvalidState(f"cannot {action} {noun} that is {iv.status} (only {', '.join(allowed)})")
        exc.status = refused_with
        raise exc
    return was
