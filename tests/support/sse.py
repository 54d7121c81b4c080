"""A real server-sent-events client for tests: `requests` with stream=True, a reader
thread parsing the byte stream into events (so every wait has a deadline), and a real
HTTP server for the app in a thread (werkzeug, threaded, as `cs serve` runs it: streams
are handed to the event loop)."""

from __future__ import annotations

import json
import queue
import socket
import threading
from dataclasses import dataclass

import requests
from werkzeug.serving import make_server

from webapp.stream_handoff import RequestHandler

from .processes import Deadline


@dataclass
class Event:
    event: str
    data: str
    id: str | None = None

    @property
    def json(self) -> dict:
        return json.loads(self.data)


class AppServer:
    """The Flask app on 127.0.0.1 on a free port, served by a thread."""

    def __init__(self, app):
        self.server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=RequestHandler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _socket_of(response: requests.Response) -> socket.socket | None:
    """The connection's socket (urllib3 response -> http.client response -> its file)."""
    fp = getattr(getattr(response.raw, "_fp", None), "fp", None)
    return getattr(getattr(fp, "raw", None), "_sock", None)


class SseClient:
    """One open stream. `comments` counts comment lines (heartbeats); `retry` is set once
    the server's first chunk came (the stream is listening)."""

    def __init__(self, url: str, *, last_event_id: str | None = None, read_timeout: float = 30.0):
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.response = requests.get(url, headers=headers, stream=True, timeout=(5, read_timeout))
        self.events: queue.Queue[Event] = queue.Queue()
        self.comments: list[str] = []
        self._comment = threading.Condition()
        self.retry: int | None = None
        self._listening = threading.Event()
        self._closed = False
        self.broken: Exception | None = None     # how the body broke off, when it did not end properly
        self._reader: threading.Thread | None = None
        self._socket = _socket_of(self.response)
        if self.response.status_code == 200:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()

    @property
    def status(self) -> int:
        return self.response.status_code

    def _read(self) -> None:
        pending: dict[str, str] = {}
        buffer = b""
        try:
            for chunk in self.response.iter_content(chunk_size=None):
                buffer += chunk
                while b"\n" in buffer:
                    raw, buffer = buffer.split(b"\n", 1)
                    self._line(raw.decode().rstrip("\r"), pending)
        except (requests.RequestException, OSError, AttributeError) as exc:
            if not self._closed:
                self.broken = exc
                raise

    def _line(self, line: str, pending: dict[str, str]) -> None:
        if line == "":
            if "event" in pending or "data" in pending:
                self.events.put(Event(pending.get("event", "message"), pending.get("data", ""), pending.get("id")))
            pending.clear()
        elif line.startswith(":"):
            with self._comment:
                self.comments.append(line[1:].strip())
                self._comment.notify_all()
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "retry":
                self.retry = int(value)
                self._listening.set()
            elif name == "data" and "data" in pending:
                pending["data"] += "\n" + value
            else:
                pending[name] = value

    def wait_listening(self, timeout: float = 10.0) -> "SseClient":
        assert self.status == 200, self.response.text
        assert self._listening.wait(timeout), "the stream sent nothing"
        return self

    def wait_comments(self, text: str, count: int = 1, timeout: float = 10.0) -> None:
        with self._comment:
            assert self._comment.wait_for(lambda: self.comments.count(text) >= count, timeout), self.comments

    def next(self, timeout: float = 10.0) -> Event:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no event in {timeout} s") from None

    def until(self, predicate, timeout: float = 10.0) -> list[Event]:
        """Events up to and including the first that satisfies `predicate`."""
        deadline = Deadline(timeout)
        seen: list[Event] = []
        while True:
            assert deadline, f"no matching event in {timeout} s; got {seen}"
            seen.append(self.next(deadline.left))
            if predicate(seen[-1]):
                return seen

    def wait_ended(self, timeout: float) -> bool:
        """True once the server has ended the stream (within `timeout` seconds)."""
        if self._reader is not None:
            self._reader.join(timeout)
        return self._reader is None or not self._reader.is_alive()

    def ended_properly(self, timeout: float) -> bool:
        """True once the server has ended the body as HTTP says (a chunked body: with its
        last, empty chunk), not by dropping the connection mid-body."""
        return self.wait_ended(timeout) and self.broken is None

    def close(self) -> None:
        """Hang up now: shut the socket down first, as closing the response would wait
        for the reader's blocked read."""
        self._closed = True
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._reader is not None:
            self._reader.join(5)
        self.response.close()
