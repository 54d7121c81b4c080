"""A real HTTP receiver on loopback for outbound deliveries, scripted per request."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """`script` is consumed one answer per request; the last answer repeats. An answer is
    a status code, ("redirect", url), ("drip", seconds_between_bytes), ("hang", seconds)
    or ("hold", threading.Event, status): the request is received, and answered with
    `status` once the test sets the event (a delivery attempt held in flight)."""

    script: list = field(default_factory=lambda: [200])
    requests: list[Received] = field(default_factory=list)

    def __post_init__(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                receiver.requests.append(Received(self.path, dict(self.headers), body, time.monotonic()))
                receiver.answer(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hook"

    def _next(self):
        index = min(len(self.requests) - 1, len(self.script) - 1)
        return self.script[index]

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        step = self._next()
        try:
            if isinstance(step, int):
                body = b'{"ok": true}' if step < 300 else b'{"error": "nope"}'
                handler.send_response(step)
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)
            elif step[0] == "redirect":
                handler.send_response(302)
                handler.send_header("Location", step[1])
                handler.send_header("Content-Length", "0")
                handler.end_headers()
            elif step[0] == "drip":
                handler.send_response(200)
                handler.send_header("Content-Length", "100")
                handler.end_headers()
                for _ in range(100):
                    handler.wfile.write(b".")
                    handler.wfile.flush()
                    time.sleep(step[1])
            elif step[0] == "hang":
                time.sleep(step[1])
            elif step[0] == "hold":
                step[1].wait(30)
                body = b'{"held": true}'
                handler.send_response(step[2])
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
