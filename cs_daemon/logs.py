"""Logs go to stderr, so `--json` output on stdout stays one clean document.

Every line names the request id and the tenant of the request or job it belongs to (or
`-` outside one): `bind()` sets them for a stretch of code in a context variable, a filter
on the handler copies them onto each record. `CS_LOG_FORMAT=json` writes one JSON object a
line instead of text (docs/operations.md, "Logs").
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Iterator

_request_id: ContextVar[str | None] = ContextVar("cs_request_id", default=None)
_tenant_id: ContextVar[str | None] = ContextVar("cs_tenant_id", default=None)
_UNSET = object()
REQUEST_ID_MAX = 128


class StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is when a record is emitted, not as it was when logging
    was set up: an in-process command or a test may have replaced it since (a handler
    holding the old one wrote to a closed file)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def request_id() -> str | None:
    return _request_id.get()


def tenant_id() -> str | None:
    return _tenant_id.get()


def new_request_id() -> str:
    return uuid.uuid4().hex


def sane_request_id(value: str | None) -> str | None:
    """A request id a client sent, kept when it is 1..128 visible ASCII characters."""
    if value and len(value) <= REQUEST_ID_MAX and all("!" <= ch <= "~" for ch in value):
        return value
    return None


@contextmanager
def bind(*, request_id=_UNSET, tenant_id=_UNSET) -> Iterator[None]:
    """Name this request or job (and/or tenant) on every log line written inside."""
    tokens = []
    if request_id is not _UNSET:
        tokens.append((_request_id, _request_id.set(request_id)))
    if tenant_id is not _UNSET:
        tokens.append((_tenant_id, _tenant_id.set(tenant_id)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def set_tenant(value: str | None) -> None:
    """The tenant of the rest of this request (its key named it); `bind` undoes it."""
    _tenant_id.set(value)


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = _request_id.get() or "-"
        if not hasattr(record, "tenant_id"):
            record.tenant_id = _tenant_id.get() or "-"
        return True


class TextFormatter(logging.Formatter):
    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s [request_id=%(request_id)s tenant=%(tenant_id)s]: "
                         "%(message)s")


class JsonFormatter(logging.Formatter):
    """One JSON object a line; a traceback is one field, its newlines escaped."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "message": record.getMessage(),
               "request_id": getattr(record, "request_id", "-"), "tenant_id": getattr(record, "tenant_id", "-")}
        if record.exc_info:
            doc["traceback"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["traceback"] = record.exc_text
        return json.dumps(doc, default=str)


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    root = logging.getLogger()
    mine = [h for h in root.handlers if getattr(h, "_cs", False)]
    if mine:
        mine[0].setFormatter(formatter(fmt))
        root.setLevel(level)
        return
    handler = StderrHandler()
    handler._cs = True  # type: ignore[attr-defined]
    handler.setFormatter(formatter(fmt))
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("werkzeug", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def adopt_handlers(level: str, fmt: str) -> None:
    """A worker process whose handlers dramatiq's command set up (they write to its pipe):
    give them this format and the request/tenant fields."""
    root = logging.getLogger()
    for handler in root.handlers:
        handler.setFormatter(formatter(fmt))
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
    root.setLevel(level)
