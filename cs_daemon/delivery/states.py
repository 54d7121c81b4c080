"""The statuses of a delivery and the changes between them (docs/webhooks.md, "Delivery and retry"):
the one table the delivery service (delivery/service.py) moves rows by, and what the
delivery log, the health check and the CLI name.

    pending ──attempt ok──────────▶ delivered
    pending/retrying ──attempt failed, tries left──▶ retrying
    pending/retrying ──permanent or last failure──▶ failed
    pending/retrying ──its intervention paused or rolled back, its endpoint let go──▶ canceled
    pending/retrying/delivered/failed ──replay──▶ pending (never attempted) or retrying

Each change from an open status is a conditional write (the row is still open, and, for
an attempt, its lease is still the attempt's), so of two writers exactly one moves it; a
cancelled delivery is never reopened."""

from __future__ import annotations

PENDING = "pending"        # written, never attempted
RETRYING = "retrying"      # attempted, failed, tries left: `next_attempt_at` says when
DELIVERED = "delivered"
FAILED = "failed"          # for good: a permanent failure, or the last try
CANCELED = "canceled"      # what it carried was paused or rolled back, or its endpoint deactivated
STATUSES = (PENDING, RETRYING, DELIVERED, FAILED, CANCELED)
OPEN = (PENDING, RETRYING)  # may still be attempted

# change -> the statuses it starts from ...
FROM = {
    "deliver": OPEN,                              # service.record: the attempt succeeded
    "retry": OPEN,                                # service.record: it failed, tries left
    "fail": OPEN,                                 # service.record: permanent, or the last try
    "cancel": OPEN,                               # service.cancel
    "replay": (PENDING, RETRYING, DELIVERED, FAILED),   # service.reopen
}
# ... and the status it leads to (a replay of a delivery never attempted: PENDING)
TO = {
    "deliver": DELIVERED,
    "retry": RETRYING,
    "fail": FAILED,
    "cancel": CANCELED,
    "replay": RETRYING,
}


def reopened(attempts: int) -> str:
    """The status a replay leaves a delivery in: it keeps its attempts."""
    return RETRYING if attempts else PENDING
