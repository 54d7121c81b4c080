"""Shared wire-shape helpers."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Wire(BaseModel):
    """Base of request and response shapes: unknown request fields are ignored (never
    written); attributes of table rows can be read directly."""

    model_config = ConfigDict(extra="ignore", from_attributes=True)


class ErrorDetail(Wire):
    field: str
    message: str


class ErrorBody(Wire):
    error: str
    code: str
    details: list[ErrorDetail] | None = None
