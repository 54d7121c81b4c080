"""Ingest any number of normalised events in one unit of work, in slices the database
takes in one statement; the counts are those of the whole call."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from ..customers.ingest import IngestResult, Incoming, ingest

SLICE = 500


def ingest_all(session: Session, tenant_id: str, events: list[Incoming], *, source: str,
               test: bool, now: datetime) -> IngestResult:
    total = IngestResult()
    users: dict[str, None] = {}
    for start in range(0, len(events), SLICE):
        part = ingest(session, tenant_id, events[start:start + SLICE], source=source, test=test, now=now)
        total.accepted += part.accepted
        total.duplicates += part.duplicates
        total.over_limit += part.over_limit
        users.update(dict.fromkeys(part.user_ids))
    total.user_ids = list(users)
    total.users_upserted = len(users)
    return total
