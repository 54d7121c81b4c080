"""Logging goes to the stderr of the moment."""

from __future__ import annotations

import io
import logging
import sys

from cs_daemon.logs import StderrHandler


def test_records_go_to_the_current_stderr_not_the_one_at_setup(monkeypatch):
    handler = StderrHandler()
    first, later = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handler.emit(logging.makeLogRecord({"msg": "one", "levelno": logging.INFO}))
    monkeypatch.setattr(sys, "stderr", later)
    first.close()     # as pytest or a CLI runner closes the stream it had put in place
    handler.emit(logging.makeLogRecord({"msg": "two", "levelno": logging.INFO}))
    assert later.getvalue() == "two\n"
