"""Outbound URL policy: where production refuses to send (SSRF guard).

A URL is refused when its host resolves to a private, loopback, link-local, multicast,
reserved or unspecified address, including IPv4-mapped IPv6 and numeric encodings
(`http://2130706433/` is 127.0.0.1: the resolver decodes it, and the decoded address is
what is checked). Checked at registration and again at every send, and the connection
goes to the address that was checked, so a DNS change in between cannot redirect it.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable
from urllib.parse import urlsplit


class UrlRefused(ValueError):
    pass


# A refusal names no address and no host, neither the one given nor what it resolved to:
# the message reaches the tenant (a 400, a delivery log) and must not map the network the
# service runs in (docs/webhooks.md, "Where deliveries may go").
NOT_PUBLIC = "resolves to a non-public address"


def parse(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, or UrlRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise UrlRefused("must be an http or https URL")
    if not parts.hostname:
        raise UrlRefused("must have a host")
    if parts.username or parts.password:
        raise UrlRefused("must not carry credentials")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _forbidden(ip: ipaddress._BaseAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if mapped is not None and _forbidden(mapped):
            return True
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
            or ip.is_reserved or ip.is_unspecified or not ip.is_global)


# The one seam where a name is resolved (tests put a resolver of their own here).
lookup = socket.getaddrinfo


class LookupBusy(UrlRefused):
    """Too many look-ups of this tenant (or of this process) are still in flight: the
    URL was not checked, try again later."""


class Resolver:
    """Name look-ups in a bounded pool of threads, at most `per_tenant` of one tenant in
    flight at once (docs/webhooks.md, Where deliveries may go). getaddrinfo cannot be
    interrupted: a look-up that outlives its caller's time-out keeps its thread and its
    tenant's place until it ends, so a tenant whose DNS hangs fills its own places and
    no one else's; its next attempts fail at once ("DNS busy") and are retried later,
    without holding a worker thread. Answers are remembered for `remember` seconds, so a
    busy tenant sending to the same hosts rarely looks up at all (the policy is still
    checked on every send)."""

    def __init__(self, *, size: int = 32, per_tenant: int = 2, remember: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.size, self.per_tenant, self.remember, self.clock = size, per_tenant, remember, clock
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="cs-dns")
        self._lock = threading.Lock()
        self._in_flight = 0
        self._by_tenant: Counter[str] = Counter()
        self._answers: dict[tuple[str, int], tuple[float, list[str]]] = {}

    def addresses(self, host: str, port: int, *, tenant: str | None, timeout: float) -> list[str]:
        """The addresses `host` resolves to; LookupBusy, FutureTimeout or socket.gaierror."""
        kept = self._answers.get((host, port))
        if kept is not None and kept[0] > self.clock():
            return kept[1]
        self._enter(tenant)
        try:
            future = self._pool.submit(self._lookup, host, port, tenant)
        except BaseException:
            self._leave(tenant)
            raise
        found = [info[4][0] for info in future.result(timeout=timeout)]
        with self._lock:
            if len(self._answers) >= 4096:
                self._answers.pop(next(iter(self._answers)))
            self._answers[(host, port)] = (self.clock() + self.remember, found)
        return found

    def _enter(self, tenant: str | None) -> None:
        with self._lock:
            if self._in_flight >= self.size:
                raise LookupBusy(f"all {self.size} name look-ups of this process are in flight; retry later")
            if tenant is not None and self._by_tenant[tenant] >= self.per_tenant:
                raise LookupBusy(f"{self.per_tenant} name look-ups of this tenant are still in flight; retry later")
            self._in_flight += 1
            if tenant is not None:
                self._by_tenant[tenant] += 1

    def _leave(self, tenant: str | None) -> None:
        with self._lock:
            self._in_flight -= 1
            if tenant is not None:
                self._by_tenant[tenant] -= 1
                if self._by_tenant[tenant] <= 0:
                    del self._by_tenant[tenant]

    def _lookup(self, host: str, port: int, tenant: str | None):
        try:
            return lookup(host, port, type=socket.SOCK_STREAM)
        finally:
            self._leave(tenant)


resolver = Resolver()


def _literal(host: str) -> ipaddress._BaseAddress | None:
    """The address a host names literally in its canonical form (a numeric encoding such
    as 2130706433 is not canonical: the resolver decodes it)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def resolve(url: str, *, allow_private: bool, timeout: float = 5.0,
            tenant: str | None = None) -> tuple[str, str, int, str]:
    """(scheme, host, port, address to connect to) after the policy check. Name
    resolution is bounded by `timeout` and, per `tenant`, by the resolver's places
    (LookupBusy when they are taken)."""
    scheme, host, port = parse(url)
    literal = _literal(host)
    if literal is not None:             # nothing to resolve: no thread hop
        if not allow_private and _forbidden(literal):
            raise UrlRefused(f"the host {NOT_PUBLIC}")
        return scheme, host, port, str(literal)
    try:
        addresses = resolver.addresses(host, port, tenant=tenant, timeout=timeout)
    except FutureTimeout:
        raise UrlRefused(f"the host did not resolve within {timeout:g} s") from None
    except (socket.gaierror, UnicodeError):
        raise UrlRefused("the host does not resolve") from None
    if not allow_private:
        for address in addresses:
            if _forbidden(ipaddress.ip_address(address.split("%")[0])):
                raise UrlRefused(f"the host {NOT_PUBLIC}")
    return scheme, host, port, addresses[0]


def check(url: str, *, allow_private: bool, tenant: str | None = None) -> None:
    if allow_private:
        parse(url)
    else:
        resolve(url, allow_private=False, tenant=tenant)
