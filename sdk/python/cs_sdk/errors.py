"""What the client raises to its caller, and what it reports to `on_error`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


class NotIdentified(ValueError):
    """`track` or `set_locale` for a user that this client has not identified."""


class ClientClosed(RuntimeError):
    """A call on a client after `shutdown()`."""


# Reasons a Dropped report gives.
REJECTED = "rejected"        # the service answered a 4xx other than 429: the batch is dropped
OVERFLOW = "overflow"        # the queue was full: the oldest events made room for newer ones
SHUTDOWN = "shutdown"        # `shutdown()` ran out of time with events still unsent


@dataclass(frozen=True)
class Dropped:
    """Events that will never be sent. `events` are the dropped events themselves (the
    JSON objects as they would have been posted) except for `overflow`, which reports
    only how many were dropped since the last report."""

    reason: str
    count: int
    status: Optional[int] = None
    error: Optional[dict[str, Any]] = None
    events: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def code(self) -> Optional[str]:
        """The service's error code of a rejected batch (e.g. "validation_failed")."""
        return (self.error or {}).get("code")

    def __str__(self) -> str:
        what = f"{self.count} event{'s' if self.count != 1 else ''} dropped ({self.reason})"
        if self.status is not None:
            message = (self.error or {}).get("error") or ""
            what += f": HTTP {self.status} {message}".rstrip()
        return what
