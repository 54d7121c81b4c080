"""`GET /api/in-app/stream` without a thread per stream (docs/channels.md, "Capacity").

The app answers the request like any other: the route verifies the token and
`Last-Event-ID`, takes the stream's slot, subscribes its wake-ups and leaves the opened
stream in the WSGI environ; the after-request hooks add their headers. This middleware
then takes the connection's socket away from the HTTP server (gunicorn's or werkzeug's
socket, detached), gives it with the response head to the process's event loop
(cs_daemon/channels/in_app_loop.py), and tells the server the connection is gone
(`HandedOff`, a broken pipe), so it writes nothing more and keeps no thread for it. The
servers' adapters forget the detached socket (`RequestHandler` here for werkzeug,
webapp/gunicorn_worker.py for gunicorn). An error answer (400, 401, 429) goes out as
usual, and so does a stream on a server whose socket cannot be taken (a TLS socket,
Flask's test client): that one is written by the server's thread.

The response is chunked for an HTTP/1.1 request (as both servers answer a body of unknown
length; some clients read an unchunked body only at its end) and delimited by the
connection's close for HTTP/1.0; either way with `Connection: close`.
"""

from __future__ import annotations

import errno
import socket
import ssl

from werkzeug.serving import WSGIRequestHandler

from cs_daemon.channels import in_app_loop

STREAM_PATH = "/api/in-app/stream"
OPENED = "cs.in_app.stream"     # environ key: the opened stream (in_app_stream.OpenStream)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class HandedOff(BrokenPipeError):
    """The connection now belongs to the stream loop: the server must write nothing."""

    def __init__(self) -> None:
        super().__init__(errno.EPIPE, "in-app stream handed to the event loop")


def _head(environ: dict, status: str, headers: list[tuple[str, str]]) -> tuple[bytes, bool]:
    """The status line and headers, and whether the body is chunked (HTTP/1.1)."""
    chunked = environ.get("SERVER_PROTOCOL") != "HTTP/1.0"
    lines = [f"{'HTTP/1.1' if chunked else 'HTTP/1.0'} {status}"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in _HOP_BY_HOP]
    lines += ["Transfer-Encoding: chunked"] if chunked else []
    lines += ["Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1"), chunked


def _socket_of(environ: dict) -> socket.socket | None:
    sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket) or sock.fileno() < 0:
        return None
    return sock


class StreamHandoff:
    """WSGI middleware around the Flask app (installed by create_app)."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") != STREAM_PATH:
            return self.app(environ, start_response)
        answer: list = []

        def capture(status, headers, exc_info=None):
            answer[:] = [status, headers, exc_info]
            return _unused_write

        body = self.app(environ, capture)
        opened = environ.pop(OPENED, None)
        # a HEAD answer has no body: the server sends the head and closes the stream as before
        sock = _socket_of(environ) if opened is not None and environ.get("REQUEST_METHOD") == "GET" else None
        if sock is None:
            start_response(*answer)
            return body
        head, chunked = _head(environ, answer[0], answer[1])
        # `body` is not closed: closing it would close the stream, which the loop now owns
        in_app_loop.home().adopt(opened, socket.socket(fileno=sock.detach()), head, chunked=chunked)
        raise HandedOff()


def _unused_write(data: bytes) -> None:
    raise RuntimeError("the stream route answers with a body, not write()")


class RequestHandler(WSGIRequestHandler):
    """werkzeug's handler (the embedded mode, tests): a connection whose socket was handed
    over is closed for this handler, which must not read another request from it. A
    subclass made by `bounded` waits at most that long for a client's next bytes, as the
    API worker does in production (docs/deploy.md, "Slow clients")."""

    def handle_one_request(self) -> None:
        super().handle_one_request()
        if self.connection.fileno() < 0:
            self.close_connection = True

    def log_error(self, format: str, *args) -> None:
        if format.startswith("Request timed out"):   # a silent client, closed: not an error of ours
            self.log("debug", format, *args)
            return
        super().log_error(format, *args)

    @classmethod
    def bounded(cls, seconds: float) -> type["RequestHandler"]:
        return type(cls.__name__, (cls,), {"timeout": seconds})
