"""A real OpenAI-compatible HTTP server on loopback, scripted per request.

POST /v1/chat/completions answers the next `Reply` of the script (the last one repeats)
in the shape of an OpenAI chat completion; GET /v1/models lists one model. Every request
is recorded with its parsed JSON body so a test can read what the client sent.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


_call_ids = itertools.count(1)
NOT_FOUND = {"error": {"message": "not found", "type": "invalid_request_error"}}


@dataclass
class Reply:
    """`content` becomes choices[0].message.content; `tool_calls` (see `tool_call`) become
    its tool calls; `usage` replaces the default token counts; `status` ≥ 400 sends an
    OpenAI error body instead; `delay_s` waits before answering; `raw` replaces the whole
    body."""

    content: str | None = None
    status: int = 200
    delay_s: float = 0.0
    raw: bytes | None = None
    tool_calls: list[dict] | None = None
    usage: dict | None = None


def model_answer(message: str, reasoning: str) -> Reply:
    return Reply(content=json.dumps({"message": message, "reasoning": reasoning}))


def tool_call(name: str, arguments: dict | str | None = None, call_id: str | None = None) -> dict:
    """One tool call of an answer; `arguments` as a dict (sent as JSON) or a raw string."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": call_id or f"call_{next(_call_ids)}", "type": "function",
            "function": {"name": name, "arguments": raw}}


def tool_reply(*calls: dict, total_tokens: int = 20, delay_s: float = 0.0) -> Reply:
    """An answer that calls these tools (each made by `tool_call`)."""
    return Reply(tool_calls=list(calls), delay_s=delay_s, usage={
        "prompt_tokens": total_tokens // 2, "completion_tokens": total_tokens - total_tokens // 2,
        "total_tokens": total_tokens})


@dataclass
class Request:
    """One request as received; header names in lower case."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict | None


@dataclass
class OpenAIServer:
    """`script` answers completions in turn; `responder`, when given, answers each from its
    request body instead (a bench's model that answers every decision alike)."""

    script: list[Reply] = field(default_factory=lambda: [model_answer("Hello", "Because")])
    model: str = "test-model"
    requests: list[Request] = field(default_factory=list)
    responder: Callable[[dict], Reply] | None = None
    keep_requests: bool = True

    def __post_init__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                server._record(self, None)
                if self.path.rstrip("/") == "/v1/models":
                    server._send(self, 200, {"object": "list", "data": [
                        {"id": server.model, "object": "model", "created": 0, "owned_by": "test"}]})
                else:
                    server._send(self, 404, NOT_FOUND)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                reply = server._record(self, body)
                if self.path != "/v1/chat/completions":
                    server._send(self, 404, NOT_FOUND)
                    return
                server._answer(self, reply, body or {})

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._lock = threading.Lock()
        self._completions = 0
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/v1"

    @property
    def completions(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path == "/v1/chat/completions"]

    def _record(self, handler, body) -> Reply:
        if self.responder is not None and handler.command == "POST":
            return self.responder(body or {})
        with self._lock:
            headers = {k.lower(): v for k, v in handler.headers.items()}
            if self.keep_requests:
                self.requests.append(Request(handler.command, handler.path, headers, body))
            if handler.command != "POST":
                return self.script[-1]
            reply = self.script[min(self._completions, len(self.script) - 1)]
            self._completions += 1
            return reply

    def _answer(self, handler, reply: Reply, body: dict) -> None:
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.raw is not None:
            self._send_bytes(handler, reply.status, reply.raw)
        elif reply.status >= 400:
            self._send(handler, reply.status, {"error": {
                "message": f"scripted failure {reply.status}", "type": "server_error", "code": None}})
        else:
            self._send(handler, 200, self._completion(reply, body.get("model")))

    @staticmethod
    def _completion(reply: Reply, model: str | None) -> dict:
        message = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        return {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
            "model": model or "unknown",
            "choices": [{"index": 0, "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                         "message": message}],
            "usage": reply.usage or {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }

    def _send(self, handler, status: int, payload: dict) -> None:
        self._send_bytes(handler, status, json.dumps(payload).encode())

    @staticmethod
    def _send_bytes(handler, status: int, body: bytes) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its time-out) before the answer

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
