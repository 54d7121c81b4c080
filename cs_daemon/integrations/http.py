"""One bounded HTTP POST for signed deliveries.

The standard library's http.client, because the delivery contract needs control that
a pooled client does not give: the 10 seconds bound the whole attempt (connect, send,
headers and a slow-dripping body: a watchdog closes the socket at the deadline), the
connection goes to the address the SSRF guard checked (TLS still verifies the host
name), redirects are never followed, and at most 1 KiB of the answer is read.
"""

from __future__ import annotations

import http.client
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


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host, port, address, timeout, context):
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self):
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


_tls = ssl.create_default_context()


def post(url: str, body: bytes, headers: dict[str, str], *, allow_private: bool,
         deadline_s: float = 10.0) -> Outcome:
    start = time.monotonic()
    try:
        scheme, host, port, address = netguard.resolve(url, allow_private=allow_private,
                                                       timeout=max(0.5, deadline_s / 2))
    except netguard.UrlRefused as exc:
        return Outcome(None, None, f"refused: {exc}", _ms(start))
    conn = (_PinnedHTTPS(host, port, address, deadline_s, _tls) if scheme == "https"
            else _PinnedHTTP(host, port, address, deadline_s))
    expired = threading.Event()

    def _cut():
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(max(0.1, deadline_s - (time.monotonic() - start)), _cut)   # DNS counts too
    watchdog.daemon = True
    watchdog.start()
    try:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        excerpt = resp.read(MAX_EXCERPT).decode("utf-8", "replace")
        if expired.is_set():
            raise TimeoutError
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
        watchdog.cancel()
        conn.close()


def _ms(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 2)
