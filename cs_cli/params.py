"""Checks of command-line values that the API's request models make of the same fields
(an email address, a length), so `cs` takes what the API takes."""

from __future__ import annotations

import typer
from pydantic import EmailStr, TypeAdapter, ValidationError

_EMAIL = TypeAdapter(EmailStr)


def email(value: str, hint: str) -> str:
    """An email address as the API's EmailStr reads it (at most 320 characters)."""
    try:
        if len(value) > 320:
            raise ValueError
        return _EMAIL.validate_python(value)
    except (ValidationError, ValueError):
        raise typer.BadParameter("must be an email address", param_hint=hint) from None


def text(value: str | None, hint: str, most: int, least: int = 1) -> str | None:
    """A name or label of `least` to `most` characters (None stays None)."""
    if value is not None and not least <= len(value.strip()) <= most:
        raise typer.BadParameter(f"must be {least} to {most} characters", param_hint=hint)
    return value.strip() if value is not None else None
