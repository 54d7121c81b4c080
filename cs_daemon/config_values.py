"""What a well-formed setting looks like: each check returns the value (normalised) or
raises ValueError with a message that completes "SETTING_NAME: ..." (docs/configuration.md)."""

from __future__ import annotations

import os
import re
from email.utils import getaddresses, parseaddr
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from redis.connection import parse_url as parse_redis_url
from sqlalchemy.engine import make_url

TRUTHY = ("1", "true", "yes", "on")
FALSY = ("0", "false", "no", "off")
_ADDRESS = re.compile(r"^[^@\s<>]+@[^@\s<>]+$")


def http_url(value: str) -> str:
    """An absolute http:// or https:// URL with a host (and, if given, a numeric port)."""
    parts = _split(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value


def database_url(value: str) -> str:
    for plain in ("postgres://", "postgresql://"):
        if value.startswith(plain):
            value = "postgresql+psycopg://" + value[len(plain):]
    if not value.startswith(("postgresql+psycopg://", "sqlite://")):
        raise ValueError("must be a postgresql:// (psycopg) or sqlite:// URL")
    try:
        url = make_url(value)
    except Exception:   # sqlalchemy raises ArgumentError or ValueError (a bad port) here
        raise ValueError("is not a well-formed URL (check the port and any %-escapes)") from None
    if url.drivername.startswith("postgresql") and not url.database:
        raise ValueError("must name the database (postgresql://user@host:port/DBNAME)")
    return value


def redis_url(value: str) -> str:
    if not value.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must be a redis:// or rediss:// URL")
    try:
        parsed = parse_redis_url(value)
    except ValueError as exc:
        raise ValueError(f"is not a well-formed Redis URL: {exc}") from None
    if not (parsed.get("host") or parsed.get("path")):
        raise ValueError("must name a host (redis://host:port/db)")
    return value


def smtp_url(value: str) -> str:
    """`smtp://[user:pass@]host:port[?starttls=1]` or `smtps://…`."""
    parts = _split(value)
    if parts.scheme not in ("smtp", "smtps"):
        raise ValueError("must be an smtp:// or smtps:// URL")
    if not parts.hostname:
        raise ValueError("must name a host (smtp://[user:pass@]host:port)")
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name != "starttls":
            raise ValueError(f"unknown option {name!r} (the only one is starttls=1)")
        if values[-1].lower() not in TRUTHY + FALSY:
            raise ValueError("starttls must be 1 or 0")
    return value


def mail_from(value: str) -> str:
    """A From header: `addr@domain` or `Display Name <addr@domain>`, on one line."""
    if "\r" in value or "\n" in value:
        raise ValueError("must be on one line")
    if len(getaddresses([value])) != 1:
        raise ValueError("must be one email address, not a list")
    _name, address = parseaddr(value)
    if not _ADDRESS.match(address) or ("<" in value and not value.rstrip().endswith(">")):
        raise ValueError("must be an email address, e.g. Customer Success <cs@example.com>")
    return value


def prefixed(value: str, prefixes: tuple[str, ...], what: str) -> str:
    if not value.startswith(prefixes):
        raise ValueError(f"must be {what} (starting with {' or '.join(prefixes)})")
    return value


def data_dir(path: Path, *, used: bool) -> None:
    """An existing directory, or one that can be made; writable when the embedded mode
    keeps data there."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} exists and is not a directory")
    if not used:
        return
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"cannot be made: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{existing} is not writable")


def _split(value: str):
    try:
        parts = urlsplit(value)
        parts.port   # a port that is not a number raises here
    except ValueError as exc:
        raise ValueError(f"is not a well-formed URL: {exc}") from None
    return parts
