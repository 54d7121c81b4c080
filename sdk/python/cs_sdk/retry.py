"""When to try a failed batch again."""

from __future__ import annotations

import math
import random
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Optional



def retryable(status: int) -> bool:
    """429 and 5xx are tried again; any other 4xx (and 1xx/3xx) would fail again."""
    return status == 429 or status >= 500


def backoff(failures: int, rng: random.Random, first: float, most: float) -> float:
    """Exponential backoff (`first` seconds, doubled per failure, at most `most`) with
    "equal jitter": half the step fixed, half random, so that clients that failed
    together do not retry together."""
    step = min(most, first * 2 ** (failures - 1))
    return step / 2 + rng.random() * step / 2


def retry_after(value: Optional[str], now: datetime) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent
    or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())
