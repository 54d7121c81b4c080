"""Backfill (`cs events import`): a file of one record a line, through the one ingest
path (source `import`), in batches of up to 100 events, each batch its own unit of work.

Formats: `jsonl` is one tracked event a line in the `/api/track` shape; `segment`,
`mixpanel` and `amplitude` are one platform record a line, normalised by its connector.
A bad line is rejected with its number and reason and the import goes on."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from .. import jsontext
from ..customers.ingest import Incoming, ingest
from ..customers.schemas import TrackedEvent
from ..runtime import Runtime
from . import NORMALISERS
from .common import BadPayload

FORMATS = ("jsonl", "segment", "mixpanel", "amplitude")
BATCH = 100
SOURCE = "import"


@dataclass
class Rejected:
    line: int
    error: str


@dataclass
class Summary:
    accepted: int = 0
    duplicates: int = 0
    over_limit: int = 0
    rejected: list[Rejected] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "over_limit": self.over_limit,
                "rejected": [{"line": r.line, "error": r.error} for r in self.rejected]}


def parse_line(text: str, fmt: str) -> list[Incoming]:
    """The events of one line; BadPayload says why there are none."""
    try:
        payload = jsontext.loads(text)
    except jsontext.Unstorable as exc:
        raise BadPayload.at("", f"cannot be stored ({exc})") from None
    except ValueError as exc:
        raise BadPayload.at("", f"not valid JSON ({exc})") from None
    if fmt == "jsonl":
        return [tracked_event(payload)]
    return NORMALISERS[fmt](payload)


def tracked_event(payload) -> Incoming:
    """One event in the `/api/track` shape, validated as that endpoint validates it."""
    try:
        event = TrackedEvent.model_validate(payload)
    except ValidationError as exc:
        raise BadPayload([{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
                          for e in exc.errors()]) from None
    return Incoming(user_id=event.user_id, event=event.event, properties=event.properties,
                    timestamp=event.timestamp, idempotency_key=event.idempotency_key)


class Backfill:
    """Feed it lines; it sends full batches as they fill and the rest on `finish`."""

    def __init__(self, rt: Runtime, tenant_id: str, fmt: str):
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}")
        self.rt, self.tenant_id, self.fmt = rt, tenant_id, fmt
        self.pending: list[Incoming] = []
        self.summary = Summary()

    def add_line(self, number: int, raw: bytes) -> None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.summary.rejected.append(Rejected(number, "not UTF-8 text"))
            return
        if not text.strip():
            return
        try:
            self.pending += parse_line(text, self.fmt)
        except BadPayload as exc:
            self.summary.rejected.append(Rejected(number, exc.summary()))
            return
        while len(self.pending) >= BATCH:
            self._send(self.pending[:BATCH])
            self.pending = self.pending[BATCH:]

    def finish(self) -> Summary:
        if self.pending:
            self._send(self.pending)
            self.pending = []
        return self.summary

    def _send(self, events: list[Incoming]) -> None:
        with self.rt.session(self.tenant_id) as session:
            result = ingest(session, self.tenant_id, events, source=SOURCE, test=False, now=self.rt.now())
        self.summary.accepted += result.accepted
        self.summary.duplicates += result.duplicates
        self.summary.over_limit += result.over_limit
