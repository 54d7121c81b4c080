"""The runtime that jobs of this process use (set when the broker is installed)."""

from __future__ import annotations

from typing import Any

# the Runtime (cs_daemon/runtime.py, which imports this module) that jobs of this process use
_current: Any = None


def set_runtime(rt: Any) -> None:
    global _current
    _current = rt


def runtime() -> Any:
    if _current is None:
        raise RuntimeError("no runtime installed for jobs in this process")
    return _current
