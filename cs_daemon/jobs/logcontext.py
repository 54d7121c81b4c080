"""Log lines of a job name its request id: the id of the request that enqueued it (carried
in the message's options), else the message's own id. Its tenant is named by the
tenant-scoped sessions it opens (cs_daemon/db.py). docs/operations.md, "Logs"."""

from __future__ import annotations

import threading
from contextvars import Token

from dramatiq.middleware import Middleware

from .. import logs

OPTION = "cs_request_id"


class JobLogContext(Middleware):
    def __init__(self):
        self._tokens = threading.local()

    def before_enqueue(self, broker, message, delay) -> None:
        rid = logs.request_id()
        if rid and OPTION not in message.options:
            message.options[OPTION] = rid

    def before_process_message(self, broker, message) -> None:
        token: Token = logs._request_id.set(message.options.get(OPTION) or message.message_id)
        self._tokens.value = token

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        self._reset()

    def after_skip_message(self, broker, message) -> None:
        self._reset()

    def _reset(self) -> None:
        token = getattr(self._tokens, "value", None)
        if token is not None:
            self._tokens.value = None
            try:
                logs._request_id.reset(token)
            except ValueError:   # set in another context: clear it instead
                logs._request_id.set(None)
