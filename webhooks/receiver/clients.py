"""Who sent a request, as per-sender budgets count it (the admin login throttle, PayPal's
certificate fetches): its address, an IPv6 address by its /64 (one host usually holds a whole
/64), or behind ``WEBHOOKS_TRUSTED_PROXIES`` = N proxies the address the N-th proxy from the end
appended to ``X-Forwarded-For`` (what a client writes there itself is never believed)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def client_key(address: str | None) -> str:
    """Who a request comes from, as the budgets count it."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:  # a Unix socket, or an address no server would set
        return (address or "unknown")[:100]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


def sender(remote_addr: str | None, forwarded_for: Iterable[str], trusted_proxies: int) -> str:
    """The request's sender (``client_key``), from its peer address and ``X-Forwarded-For`` values."""
    address = remote_addr
    if trusted_proxies:
        forwarded = [a.strip() for a in ",".join(forwarded_for).split(",")]
        if len(forwarded) >= trusted_proxies and forwarded[-trusted_proxies]:
            address = forwarded[-trusted_proxies]
    return client_key(address)
