"""A scripted HTTP proxy on loopback in front of a real server, for client retry tests.

Each request takes the next step of `script`; once it is used up, `default` applies.
A step is
  "pass"              forward to the server and relay its answer;
  500 (any status)    answer that status with a JSON error body, the server never sees it;
  (429, {"Retry-After": "2"})   the same with these headers;
  ("lost", 500)       forward (the server stores the batch), then answer 500 instead of
                      the server's answer: a response lost on the way back;
  "hangup"            forward, then close the connection without answering.
Every request is recorded with its JSON body, what the proxy answered and, when it was
forwarded, the server's own answer. The proxy speaks HTTP/1.1 keep-alive, as servers do.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict
    status: int                     # what the client got (no answer after "hangup")
    upstream: dict | None = None    # the server's JSON answer, when forwarded

    @property
    def events(self) -> list[dict]:
        return self.body.get("events", [])


class ScriptedProxy:
    def __init__(self, upstream_url: str, script=(), default="pass"):
        target = urlsplit(upstream_url)
        self.upstream = (target.hostname, target.port)
        self.default = default
        self._script: deque = deque(script)
        self.seen: list[Seen] = []
        self._cond = threading.Condition()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy._handle(self, body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def then(self, *steps) -> None:
        with self._cond:
            self._script.extend(steps)

    def wait_requests(self, count: int, timeout: float = 10.0) -> list[Seen]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.seen) >= count, timeout), \
                f"{len(self.seen)} requests in {timeout} s, expected {count}"
            return list(self.seen)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- answering -----------------------------------------------------------------------

    def _next_step(self):
        with self._cond:
            return self._script.popleft() if self._script else self.default

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        step = self._next_step()
        upstream = None
        if step in ("pass", "hangup") or (isinstance(step, tuple) and step[0] == "lost"):
            status, headers, raw = self._forward(handler, body)
            upstream = json.loads(raw) if raw else None
            if isinstance(step, tuple):
                status, headers, raw = step[1], {}, _error_body(step[1])
        else:
            status, headers = (step, {}) if isinstance(step, int) else step
            raw = _error_body(status)
        with self._cond:
            self.seen.append(Seen(handler.path, dict(handler.headers), json.loads(body or b"{}"),
                                  status, upstream))
            self._cond.notify_all()
        if step == "hangup":
            handler.close_connection = True
            return
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict, bytes]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            passed = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
            connection.request("POST", handler.path, body=body, headers=passed)
            response = connection.getresponse()
            raw = response.read()
            kept = {k: v for k, v in response.getheaders()
                    if k.lower() in ("retry-after", "x-ratelimit-limit", "x-ratelimit-remaining")}
            return response.status, kept, raw
        finally:
            connection.close()


def _error_body(status: int) -> bytes:
    return json.dumps({"error": f"scripted {status}", "code": "internal" if status >= 500 else "scripted"}).encode()
