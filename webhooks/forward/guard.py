"""STUB (replaced by the helper's module)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    return list(dict.fromkeys(str(a[4][0]) for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))


class Refused(ValueError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def refusal(address: str, *, allow_private: bool) -> Refused | None:
    ip = ipaddress.ip_address(address)
    if str(ip) == "169.254.169.254":
        return Refused("metadata_address", address)
    if not ip.is_global and not allow_private:
        return Refused("private_address", address)
    return None


def vet(host: str, port: int, *, allow_private: bool, resolver: Resolver = system_resolver) -> list[str]:
    try:
        addrs = [str(ipaddress.ip_address(host))]
    except ValueError:
        addrs = resolver(host, port)
    for a in addrs:
        r = refusal(a, allow_private=allow_private)
        if r:
            raise r
    return addrs


def check_url(url: str, *, allow_private: bool, resolver: Resolver = system_resolver) -> None:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise Refused("bad_url", url)
    try:
        vet(u.hostname, u.port or 80, allow_private=allow_private, resolver=resolver)
    except OSError:
        pass
