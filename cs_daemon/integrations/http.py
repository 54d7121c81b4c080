"""One bounded HTTP POST for signed deliveries.

The standard library's http.client, because the delivery contract needs control that
a pooled client does not give: the 10 seconds bound the whole attempt (connect, send,
headers and a slow-dripping body: a watchdog closes the socket at the deadline), the
connection goes to the address the SSRF guard checked (TLS still verifies the host
name), redirects are never followed, and at most 1 KiB of the answer is read. A
connection whose answer was read whole is kept alive for the next attempt to the same
checked address.
"""

from __future__ import annotations

import heapq
import http.client
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from . import netguard

MAX_EXCERPT = 1024


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    excerpt: str | None
    error: str | None
    latency_ms: float
    permanent: bool = False    # the receiver refused for good: no retry (e.g. SMTP 5xx on RCPT)

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _open(address: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection without Nagle's delay: http.client writes headers and body apart,
    and on a kept-alive connection the body would otherwise wait for the receiver's
    delayed ACK (40 ms)."""
    sock = socket.create_connection((address, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host, port, address, timeout, context):
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address

    def connect(self):
        sock = _open(self._address, self.port, self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self):
        self.sock = _open(self._address, self.port, self.timeout)


_tls = ssl.create_default_context()


class _Watchdog:
    """One thread for every attempt's deadline (a timer thread per attempt costs more than
    the attempt's own work): `watch` runs `cut` at `deadline` (monotonic) unless the
    returned handle is cancelled first."""

    def __init__(self):
        self._due: list[tuple[float, int, list]] = []
        self._wake = threading.Condition()
        self._seq = 0
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, cut) -> list:
        entry = [cut]
        with self._wake:
            self._seq += 1
            heapq.heappush(self._due, (deadline, self._seq, entry))
            if self._thread is None or not self._thread.is_alive():   # also after a fork
                self._thread = threading.Thread(target=self._run, name="cs-http-watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()
        return entry

    @staticmethod
    def cancel(entry: list) -> None:
        entry[0] = None

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._due and self._due[0][2][0] is None:
                    heapq.heappop(self._due)
                if not self._due:
                    self._wake.wait()
                    continue
                deadline, _, entry = self._due[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._due)
                cut = entry[0]
            if cut is not None:
                cut()


_watchdog = _Watchdog()


class _Idle:
    """Kept-alive connections between attempts, by the (scheme, host, port, checked
    address) they go to: a connection is only reused for the very address the SSRF guard
    passed this time. Bounded per destination, dropped when idle too long, and never
    carried across a fork."""

    PER_DESTINATION = 16
    MAX_IDLE_S = 20.0

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: dict[tuple, list[tuple[float, http.client.HTTPConnection]]] = {}
        self._pid = os.getpid()

    def take(self, key: tuple) -> http.client.HTTPConnection | None:
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._pid = {}, os.getpid()
            stack = self._idle.get(key) or []
            while stack:
                since, conn = stack.pop()
                if time.monotonic() - since < self.MAX_IDLE_S:
                    return conn
                conn.close()
        return None

    def give(self, key: tuple, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            stack = self._idle.setdefault(key, [])
            if len(stack) < self.PER_DESTINATION and self._pid == os.getpid():
                stack.append((time.monotonic(), conn))
                return
        conn.close()


_idle = _Idle()
# a kept-alive connection the receiver closed meanwhile fails like this before any answer
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.RemoteDisconnected)


def post(url: str, body: bytes, headers: dict[str, str], *, allow_private: bool,
         deadline_s: float = 10.0, tenant: str | None = None) -> Outcome:
    """`tenant` bounds the name look-ups it may have in flight (netguard.Resolver)."""
    start = time.monotonic()
    try:
        scheme, host, port, address = netguard.resolve(url, allow_private=allow_private,
                                                       timeout=max(0.5, deadline_s / 2), tenant=tenant)
    except netguard.LookupBusy as exc:     # not a refusal: the next attempt looks again
        return Outcome(None, None, f"DNS busy: {exc}", _ms(start))
    except netguard.UrlRefused as exc:
        return Outcome(None, None, f"refused: {exc}", _ms(start))
    key = (scheme, host, port, address)
    expired = threading.Event()
    current: list[http.client.HTTPConnection | None] = [None]

    def _cut():
        expired.set()
        sock = current[0].sock if current[0] is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watch = _watchdog.watch(start + max(0.1, deadline_s), _cut)   # DNS counts too
    keep = False
    try:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        reused = _idle.take(key)
        while True:
            conn = current[0] = reused or (_PinnedHTTPS(host, port, address, deadline_s, _tls) if scheme == "https"
                                           else _PinnedHTTP(host, port, address, deadline_s))
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                break
            except _STALE:
                if reused is None or expired.is_set():
                    raise
                conn.close()            # closed by the receiver while idle: once more, afresh
                reused = None
        excerpt = resp.read(MAX_EXCERPT).decode("utf-8", "replace")
        if expired.is_set():
            raise TimeoutError
        keep = resp.isclosed() and not resp.will_close     # answer read whole, connection open
        status = resp.status
        error = None
        if 300 <= status < 400:
            error = f"redirect {status} not followed (to {resp.getheader('Location', '?')})"
        elif not 200 <= status < 300:
            error = f"HTTP {status}"
        # 410 Gone: the receiver says this URL is no more; retrying cannot help
        return Outcome(status, excerpt, error, _ms(start), permanent=status == 410)
    except Exception as exc:  # every failure of an attempt is an outcome, not a crash
        if expired.is_set() or isinstance(exc, (TimeoutError, socket.timeout)):
            return Outcome(None, None, f"timed out after {deadline_s:g} s", _ms(start))
        return Outcome(None, None, f"{type(exc).__name__}: {exc}"[:300], _ms(start))
    finally:
        _watchdog.cancel(watch)
        if current[0] is not None:
            if keep and not expired.is_set():
                _idle.give(key, current[0])
            else:
                current[0].close()


def _ms(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 2)
