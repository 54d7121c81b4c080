"""API key material: `rt_live_`/`rt_test_` + 32 base62 characters, kept as a SHA-256 digest."""

from __future__ import annotations

import hashlib
import re
import secrets
import string

ALPHABET = string.ascii_letters + string.digits
KEY_RE = re.compile(r"^rt_(live|test)_[A-Za-z0-9]{32}$")
PREFIX_LEN = 12


def generate(test: bool = False) -> str:
    body = "".join(secrets.choice(ALPHABET) for _ in range(32))
    return ("rt_test_" if test else "rt_live_") + body


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def prefix(raw: str) -> str:
    return raw[:PREFIX_LEN]


def well_formed(raw: str) -> bool:
    return bool(KEY_RE.match(raw))
