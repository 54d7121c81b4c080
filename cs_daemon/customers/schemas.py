from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Annotated, Any, NamedTuple, Union

from pydantic import (ConfigDict, EmailStr, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter,
                      ValidationError, field_validator)
from typing_extensions import NotRequired, TypedDict

from ..clock import in_utc
from ..interventions.schemas import InterventionPublic
from ..schemas import EventTime, Wire
from . import fields


class TrackedEvent(Wire):
    user_id: str = Field(min_length=1, max_length=255)
    event: str = Field(min_length=1, max_length=255)
    properties: dict[str, Any] = Field(default_factory=dict)
    timestamp: EventTime = None
    idempotency_key: str | None = Field(None, min_length=1, max_length=255)

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _utc(value)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else in_utc(value)


class TrackRequest(Wire):
    events: list[TrackedEvent] = Field(min_length=1, max_length=100)


class QuickEvent(NamedTuple):
    user_id: str
    event: str
    properties: dict[str, Any]
    timestamp: datetime | None
    idempotency_key: str | None


class QuickTrack(NamedTuple):
    events: list[QuickEvent]


# ISO 8601 as clients write it: the one form read without pydantic (others go through it)
_PLAIN_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6})?(Z|[+-]\d\d:\d\d)?")


def quick_track(data: dict) -> QuickTrack | None:
    """A track body read without a model a event, when every value is of the plain kind
    TrackRequest certainly takes and reads the same (strings within their lengths, an
    object of properties, an ISO 8601 time): the same values, in a fraction of the time.
    None for anything else, which TrackRequest then validates, with its own errors."""
    events = data.get("events")
    if type(events) is not list or not 1 <= len(events) <= 100:
        return None
    out = []
    for e in events:
        if type(e) is not dict:
            return None
        user_id, name, key = e.get("user_id"), e.get("event"), e.get("idempotency_key")
        properties, at = e.get("properties", {}), _plain_time(e.get("timestamp"))
        if (type(user_id) is not str or type(name) is not str or not 1 <= len(user_id) <= 255
                or not 1 <= len(name) <= 255 or type(properties) is not dict
                or key is not None and (type(key) is not str or not 1 <= len(key) <= 255) or at is _NOT_PLAIN):
            return None
        out.append(QuickEvent(user_id, name, properties, at, key))
    return QuickTrack(out)


_NOT_PLAIN = object()


def _plain_time(at: Any) -> Any:
    """None, or the aware datetime of an ISO 8601 time as clients write it; _NOT_PLAIN for
    anything else."""
    if at is None:
        return None
    if type(at) is not str or not _PLAIN_TIME.fullmatch(at):
        return _NOT_PLAIN
    try:
        return _utc(datetime.fromisoformat(at))
    except ValueError:
        return _NOT_PLAIN


# The plain track body as JSON text, checked while it is parsed: every value of the kinds
# JSON gives (never NaN or an infinite number: allow_inf_nan), properties nested at most one
# level (so the body is far from jsontext.MAX_DEPTH), no other field (an ignored field
# would escape the checks of jsontext.loads); a time only as _PLAIN_TIME (anchored, ASCII
# digits, for pydantic-core's regex, which searches), then read by quick_track_json as
# quick_track reads it: datetime.fromisoformat gives a time with offset 0 in UTC already,
# where pydantic's datetime needed a conversion (a Python call an event) to come to it.
# A JSON value matches one strict leaf type only, but an integer both StrictInt and
# StrictFloat: the int is tried first, so it stays an int. Strings, the most common
# property values, are tried before the rest (each type tried before the one that takes a
# value costs a failed validation: 16% of a batch's parse with strings last).
_Leaf = Annotated[Union[StrictStr, StrictInt, StrictFloat, StrictBool, None], Field(union_mode="left_to_right")]
_Value = Annotated[Union[_Leaf, list[_Leaf], dict[str, _Leaf]], Field(union_mode="left_to_right")]
_Name = Annotated[StrictStr, Field(min_length=1, max_length=255)]
_PlainTime = Annotated[StrictStr, Field(pattern=r"^[0-9]{4}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
                                               r"(\.[0-9]{3}|\.[0-9]{6})?(Z|[+-][0-9][0-9]:[0-9][0-9])?$")]
_PLAIN = ConfigDict(extra="forbid", allow_inf_nan=False)


class _PlainEvent(TypedDict):
    __pydantic_config__ = _PLAIN   # type: ignore[misc]
    user_id: _Name
    event: _Name
    properties: NotRequired[dict[str, _Value]]
    timestamp: NotRequired[_PlainTime | None]
    idempotency_key: NotRequired[_Name | None]


class _PlainTrack(TypedDict):
    __pydantic_config__ = _PLAIN   # type: ignore[misc]
    events: Annotated[list[_PlainEvent], Field(min_length=1, max_length=100)]


_PLAIN_TRACK = TypeAdapter(_PlainTrack)
# text that may hold what jsontext.loads refuses (NUL, lone surrogates) or reads otherwise
_UNPLAIN_TEXT = re.compile(rb"\\u(0000|[dD])")


class PlainTrack(NamedTuple):
    """A track body read by quick_track_json: each event a dict of TrackedEvent's fields
    (those the body gave), its values as TrackRequest reads them."""

    events: list[dict[str, Any]]


def quick_track_json(raw: bytes) -> PlainTrack | None:
    """The track body parsed and checked in one pass by pydantic-core (no Python object per
    JSON value before the check, no model an event): a body it reads is one that
    jsontext.loads reads into the same values and TrackRequest takes, reading the same.
    None for any other (invalid JSON included), which then takes the way of every body,
    with its errors."""
    if _UNPLAIN_TEXT.search(raw):
        return None
    try:
        events = _PLAIN_TRACK.validate_json(raw)["events"]
    except ValidationError:
        return None
    for e in events:
        at = e.get("timestamp")
        if at is not None:
            try:
                at = _fromisoformat(at)
                e["timestamp"] = at if at.tzinfo is _UTC else in_utc(at)
            except ValueError:   # not a date, or out of range in UTC: as _plain_time says
                return None
    return PlainTrack(events)


_fromisoformat = datetime.fromisoformat
_UTC = timezone.utc


class TrackResult(Wire):
    accepted: int
    duplicates: int
    over_limit: int


class NextAction(Wire):
    """The user's next pending intervention; `intervention_id` is an extension (to approve it)."""
    channel: str
    status: str
    playbook: str
    intervention_id: str


class CustomerPublic(Wire):
    id: str
    name: str
    email: str | None
    company: str | None
    role: str | None
    team_size: float | None
    locale: str | None
    lifecycle_stage: str
    health: float
    activation_score: float
    engagement_score: float
    expansion_score: float
    risk_level: str
    last_activity_at: datetime | None
    created_at: datetime | None
    traits: dict[str, Any]
    test: bool

    @classmethod
    def of(cls, c, **extra) -> "CustomerPublic":
        return cls(id=c.id, **{**{f: getattr(c, f) for f in fields.ALL}, "name": c.name or c.id},
                   created_at=c.created_at, traits=c.traits or {}, test=c.test, **extra)


class CustomerListItem(CustomerPublic):
    next_action: NextAction | None = None


class CustomerDetail(CustomerPublic):
    milestone_progress: Any = None
    segment_memberships: Any = None


class CustomerEvent(Wire):
    id: str
    event: str
    properties: dict[str, Any]
    timestamp: datetime
    received_at: datetime
    source: str
    test: bool


class DecisionSummary(Wire):
    """One of a customer's recent decisions (docs/decisions.md, "The decision trace")."""

    decision_id: str
    created_at: datetime
    action: str
    decided_by: str
    reason: str | None
    playbook_id: str | None
    channel: str | None
    intervention_id: str | None


class CustomerDetailResponse(Wire):
    customer: CustomerDetail
    events: list[CustomerEvent]
    interventions: list[InterventionPublic]
    decisions: list[DecisionSummary] = []     # extension: the latest engine decisions, no-action ones too


class CustomerList(Wire):
    customers: list[CustomerListItem]
    next_cursor: str | None


class CustomerListQuery(Wire):
    limit: int = Field(100, ge=1, le=1000)
    cursor: str | None = None


class CustomerCreate(Wire):
    user_id: str = Field(min_length=1, max_length=255)
    email: EmailStr | None = None
    name: str | None = Field(None, max_length=255)
    properties: dict[str, Any] = Field(default_factory=dict)


class CustomerCreated(Wire):
    user: CustomerPublic


class CustomerStats(Wire):
    total: int
    active: int
    at_risk: int
    churned: int


class CustomerStatsResponse(Wire):
    stats: CustomerStats
