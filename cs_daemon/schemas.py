"""Shared wire-shape helpers."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, AnyUrl, BeforeValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class Wire(BaseModel):
    """Base of request and response shapes: unknown request fields are ignored (never
    written); attributes of table rows can be read directly."""

    model_config = ConfigDict(extra="ignore", from_attributes=True)


_ANY_URL = TypeAdapter(AnyUrl)


def _url_as_sent(value: str) -> str:
    """A URL the caller registers is kept, and shown, as sent (no trailing slash added, no
    host lowercased): checked as a URL, never rewritten (docs/webhooks.md, "Endpoints")."""
    if any(c.isspace() or c < " " for c in value):
        raise ValueError("must not hold spaces or control characters (percent-encode them)")
    try:
        _ANY_URL.validate_python(value)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None
    return value


SentUrl = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_url_as_sent)]


_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}")


def _date_time_text(value: Any) -> Any:
    """An event's time is a date and time written as ISO 8601 text, as the interface
    types it (string, date-time): not a number of seconds, not a date alone."""
    if value is not None and not (isinstance(value, str) and _DATE_TIME.match(value)):
        raise ValueError("must be an ISO 8601 date and time, e.g. 2026-11-27T10:00:00Z")
    return value


EventTime = Annotated[datetime | None, BeforeValidator(_date_time_text)]


def absent_when_none() -> Any:
    """A field the answer leaves out while it has no value: one the interface types as a
    string or number, never null (docs/api.md, "Other choices where the documents are silent")."""
    return Field(None, exclude_if=_is_none)


def _is_none(value: Any) -> bool:
    return value is None


class ErrorDetail(Wire):
    field: str
    message: str


class ErrorBody(Wire):
    error: str
    code: str
    details: list[ErrorDetail] | None = None


def error_details(exc, prefix: str) -> list[dict]:
    """A pydantic ValidationError as [{field, message}], each field under `prefix` the
    way the API names fields: `config.health_weights.medium`, `constraints.channels[0]`."""
    details = []
    for error in exc.errors():
        field = prefix
        for part in error["loc"]:
            field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
        details.append({"field": field, "message": error["msg"].removeprefix("Value error, ")})
    return details
