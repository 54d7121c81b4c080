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
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
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


_resolver = ThreadPoolExecutor(max_workers=8, thread_name_prefix="cs-dns")


def _literal(host: str) -> ipaddress._BaseAddress | None:
    """The address a host names literally in its canonical form (a numeric encoding such
    as 2130706433 is not canonical: the resolver decodes it)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def resolve(url: str, *, allow_private: bool, timeout: float = 5.0) -> tuple[str, str, int, str]:
    """(scheme, host, port, address to connect to) after the policy check. Name
    resolution is bounded by `timeout` (getaddrinfo itself cannot be interrupted)."""
    scheme, host, port = parse(url)
    literal = _literal(host)
    if literal is not None:             # nothing to resolve: no thread hop
        if not allow_private and _forbidden(literal):
            raise UrlRefused(f"the host {NOT_PUBLIC}")
        return scheme, host, port, str(literal)
    try:
        infos = _resolver.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM).result(timeout=timeout)
    except FutureTimeout:
        raise UrlRefused(f"the host did not resolve within {timeout:g} s") from None
    except (socket.gaierror, UnicodeError):
        raise UrlRefused("the host does not resolve") from None
    addresses = [info[4][0] for info in infos]
    if not allow_private:
        for address in addresses:
            if _forbidden(ipaddress.ip_address(address.split("%")[0])):
                raise UrlRefused(f"the host {NOT_PUBLIC}")
    return scheme, host, port, addresses[0]


def check(url: str, *, allow_private: bool) -> None:
    if allow_private:
        parse(url)
    else:
        resolve(url, allow_private=False)
