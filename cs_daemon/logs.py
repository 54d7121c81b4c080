"""Logs go to stderr, so `--json` output on stdout stays one clean document."""

from __future__ import annotations

import logging
import sys


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


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if any(getattr(h, "_cs", False) for h in root.handlers):
        root.setLevel(level)
        return
    handler = StderrHandler()
    handler._cs = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("werkzeug", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
