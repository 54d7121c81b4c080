"""The statuses of a decision request (docs/decisions.md, "Owed decisions") and the
changes between them: the one table decisions/requests.py moves requests by.

A request has no status column: its status is read from `done_at`, `failed_at` and
`claimed_until` (`status_of`), so each change is one conditional write of those.

    open ──claim──▶ leased ──decided──▶ done
    leased ──a try failed, tries left──▶ leased (until the backoff ends)
    leased ──the last try failed──▶ failed
    leased ──the lease or the backoff ran out──▶ open (by time alone)

A try that outlived its lease (the request is open again) still records what it found:
its decision, or its failure. Done and failed requests are never taken again.
"""

from __future__ import annotations

from datetime import datetime

OPEN = "open"        # owed, free to take
LEASED = "leased"    # taken by a try, or waiting out the backoff after a failed one
DONE = "done"
FAILED = "failed"    # MAX_ATTEMPTS tries failed; the last error is kept
STATUSES = (OPEN, LEASED, DONE, FAILED)

# change -> the statuses it starts from ...
FROM = {
    "claim": (OPEN,),                 # requests.claim
    "decide": (OPEN, LEASED),         # requests.decide_for, with the request
    "back_off": (OPEN, LEASED),       # requests.failed, tries left
    "give_up": (OPEN, LEASED),        # requests.failed, the last try
}
# ... and the status it leads to
TO = {"claim": LEASED, "decide": DONE, "back_off": LEASED, "give_up": FAILED}


def status_of(request, now: datetime) -> str:
    """The status of a DecisionRequest row at `now`."""
    if request.done_at is not None:
        return DONE
    if request.failed_at is not None:
        return FAILED
    if request.claimed_until is not None and request.claimed_until > now:
        return LEASED
    return OPEN
