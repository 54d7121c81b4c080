"""Who is calling when no key says so: the client address the per-address limits of the
keyless endpoints count by (docs/api.md, Rate limits).

The address is the peer of the connection. X-Forwarded-For is believed only when that
peer is a proxy the operator trusts (CS_TRUSTED_PROXIES): then the client is the
right-most address of the header that is not itself a trusted proxy (anything to its left
was written by the client and proves nothing). IPv6 clients are counted by their /64, the
block one subscriber gets and can pick addresses from at will.
"""

from __future__ import annotations

import ipaddress
from typing import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().split("%")[0])
    except ValueError:
        return None


def client(peer: str | None, forwarded_for: str | None, trusted: Iterable[Network]) -> str:
    """The address to count a request under."""
    trusted = tuple(trusted)
    found = _address(peer or "")
    if found is None:
        return peer or "unknown"
    hops = [part for part in (forwarded_for or "").split(",") if part.strip()]
    while _trusted(found, trusted) and hops:
        previous = _address(hops.pop())
        if previous is None:        # a hop the proxy did not write: stop at what it vouched for
            break
        found = previous
    return bucket(found)


def _trusted(address, trusted: tuple[Network, ...]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def bucket(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
