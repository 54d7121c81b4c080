"""One keep-alive HTTP connection to the service, used by the sender thread only.

The standard library's http.client rather than requests: no dependency to clash with the
host application's, and one reused connection is all a single sender thread needs."""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit

from . import __version__

TRACK_PATH = "/api/track"
# A connection the server closed while idle fails on its next request in one of these ways.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
          ConnectionAbortedError)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any  # the parsed JSON, or None when it was not JSON


class NetworkError(Exception):
    """The request got no HTTP answer (refused, reset, timed out)."""


class Transport:
    def __init__(self, base_url: str, api_key: str, timeout: float):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL, not {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/") + TRACK_PATH
        self._timeout = timeout
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"cs-sdk-python/{__version__}",
        }
        self._connection: Optional[http.client.HTTPConnection] = None
        self._used = False  # the connection has carried a request already

    def post_track(self, body: bytes) -> Answer:
        reused = self._connection is not None and self._used
        try:
            return self._post(body)
        except _STALE as exc:
            if not reused:
                raise NetworkError(_describe(exc)) from None
        except (OSError, http.client.HTTPException) as exc:
            raise NetworkError(_describe(exc)) from None
        # The server had dropped the idle keep-alive connection: one immediate try on a
        # new one. A batch that did arrive after all is deduplicated by its idempotency keys.
        try:
            return self._post(body)
        except (OSError, http.client.HTTPException) as exc:
            raise NetworkError(_describe(exc)) from None

    def _post(self, body: bytes) -> Answer:
        connection = self._connect()
        try:
            connection.request("POST", self._path, body=body, headers=self._headers)
            response = connection.getresponse()
            raw = response.read()
        except BaseException:
            self.close()
            raise
        self._used = True
        if response.will_close:
            self.close()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, _json(raw))

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            if self._https:
                self._connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=ssl.create_default_context())
            else:
                self._connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._used = False
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._used = False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
