"""The runtime that jobs of this process use (set when the broker is installed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runtime import Runtime

_current: "Runtime | None" = None


def set_runtime(rt: "Runtime") -> None:
    global _current
    _current = rt


def runtime() -> "Runtime":
    if _current is None:
        raise RuntimeError("no runtime installed for jobs in this process")
    return _current
