"""Reading requests from clients that may be slow or silent (docs/deploy.md, "Slow
clients"). The API worker (webapp/gunicorn_worker.py) bounds every read and write of a
request's connection by CS_CLIENT_TIMEOUT_SECONDS: gthread reads a request on one of its
few threads with no bound at all, so a handful of connections that sent part of a
request and then nothing held every thread of the process, for good.

A read that times out raises ClientTooSlow, a connection reset to gunicorn, which closes
the connection and logs it at debug level only: a request line or headers left
unfinished get no answer, and cannot fill the logs either. The app answers a body that
stops arriving with 408 `validation_failed` (webapp/__init__.py). The embedded server keeps
the same bound with the socket's own timeout (stream_handoff.RequestHandler.bounded)."""

from __future__ import annotations

import errno


class ClientTooSlow(ConnectionResetError):
    def __init__(self, seconds: float) -> None:
        super().__init__(errno.ECONNRESET, f"the client sent nothing for {seconds:g} s")
        self.seconds = seconds


class PatientReads:
    """The socket gunicorn reads a request from (its SocketUnreader's), whose timed-out
    reads raise ClientTooSlow; anything else goes to the socket itself."""

    def __init__(self, sock, seconds: float) -> None:
        self.sock = sock
        self.seconds = seconds

    def recv(self, size: int) -> bytes:
        try:
            return self.sock.recv(size)
        except TimeoutError:
            raise ClientTooSlow(self.seconds) from None

    def __getattr__(self, name: str):
        return getattr(self.sock, name)
