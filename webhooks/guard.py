"""The address guard of forwarding: a destination is reached only at a global address, unless its
team says ``allow_private = true``; a cloud metadata service never, whatever the setting.

A destination URL is only a name: the guard judges the addresses it resolves to, every time a
connection is opened (``vet``), so a name that later resolves to ``127.0.0.1`` (DNS rebinding) or a
DNS answer mixing a public and a private address is refused. IPv6 forms that carry an IPv4 address
(mapped, SIIT, compatible, well-known and local-use NAT64, 6to4, Teredo) are judged by the IPv4 address
they carry too. A name is resolved within a deadline (``resolve_within``): a slow resolver ends the
attempt as ``unresolvable`` instead of holding it past its lease.
``check_url`` is the start-up check of a configured URL; the connect-time ``vet`` still decides.

Standard library only.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]  # host, port -> IP address strings (IPv4/IPv6)

METADATA: frozenset[Address] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean…
        "fd00:ec2::254",  # AWS over IPv6
        "169.254.170.2",  # AWS ECS task credentials
        "100.100.100.200",  # Alibaba Cloud
    )
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: Python's is_private leaves it out
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052 well-known prefix: the IPv4 in the last 32 bits
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: the operator picks a /48…/96 inside
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 IPv4-translated ::ffff:0:a.b.c.d
_ALLOW_HINT = "set allow_private = true on the destination if this service is yours"


class Refused(ValueError):
    """A destination the guard will not reach. ``reason`` is one machine word ("private_address",
    "metadata_address", "bad_url", "unresolvable"); the message is one line for an operator."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives ``host``, each once, in its order (raises OSError)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as exc:  # a name IDNA cannot encode ("a..b") is a name that does not resolve
        raise OSError(f"cannot encode the name {host!r}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def no_lookup(host: str, port: int) -> list[str]:
    """A resolver that never looks a name up: validation of the database's destinations (#32)
    checks a URL's form and its literal addresses only, so 1 000 destinations validate without a
    DNS query each, every time the runtime configuration changes; the connect-time ``vet`` judges
    the addresses a name has when a delivery goes out, as for every destination."""
    raise OSError("not looked up: judged when a delivery connects")


def resolve_within(resolver: Resolver, seconds: float) -> Resolver:
    """``resolver`` bounded to ``seconds``: a slower answer raises TimeoutError (an OSError, so ``vet``
    calls the name unresolvable). The lookup runs on a daemon thread left to finish on its own:
    ``getaddrinfo`` cannot be interrupted, and the attempt must end inside its lease."""

    def bounded(host: str, port: int) -> list[str]:
        answer: list[list[str] | BaseException] = []
        done = threading.Event()

        def look_up() -> None:
            try:
                answer.append(resolver(host, port))
            except BaseException as exc:  # handed to the caller, whatever it is
                answer.append(exc)
            finally:
                done.set()

        threading.Thread(target=look_up, name=f"resolve {host}", daemon=True).start()
        if not done.wait(max(seconds, 0.0)):
            raise TimeoutError(f"no answer within {seconds:g} s")
        [found] = answer
        if isinstance(found, BaseException):
            raise found
        return found

    return bounded


def _judged(ip: Address) -> list[Address]:
    """The addresses that decide for ``ip``: an IPv6 spelling of an IPv4 address (mapped, NAT64) is that
    IPv4 address; a tunnel block (6to4, Teredo, IPv4-compatible) is itself and the IPv4 it carries."""
    if isinstance(ip, ipaddress.IPv4Address):
        return [ip]
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _NAT64 or ip in _SIIT:
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip in _LOCAL_NAT64:
        return [ip, *_rfc6052(ip)]
    if ip.sixtofour is not None:
        return [ip, ip.sixtofour]
    if ip.teredo is not None:
        return [ip, *ip.teredo]  # server, client
    if int(ip) >> 32 == 0 and int(ip) > 1:  # IPv4-compatible ::a.b.c.d (not :: or ::1)
        return [ip, ipaddress.IPv4Address(int(ip))]
    return [ip]


def _rfc6052(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses ``ip`` carries under each RFC 6052 prefix length a /48 allows (48, 56, 64,
    96): which one the operator chose is unknown here, so every reading is judged. Bits 64–71 (``u``)
    are skipped."""
    b = ip.packed
    return [
        ipaddress.IPv4Address(b[6:8] + b[9:11]),  # /48
        ipaddress.IPv4Address(b[7:8] + b[9:12]),  # /56
        ipaddress.IPv4Address(b[9:13]),  # /64
        ipaddress.IPv4Address(b[12:16]),  # /96
    ]


def _special(ip: Address) -> bool:
    """Not a plain global unicast address (loopback, private, link-local, CGNAT, multicast…)."""
    site_local = isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local
    return (
        not ip.is_global
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or ip.is_reserved
        or site_local
        or ip in _SHARED
    )


def refusal(address: str, *, allow_private: bool) -> Refused | None:
    """Why the guard refuses ``address`` (an IP address string), or None when it may be reached.
    Raises ValueError when ``address`` is not an IP address."""
    judged = _judged(ipaddress.ip_address(address.partition("%")[0]))  # a zone (fe80::1%eth0) does not matter
    if any(ip in METADATA for ip in judged):
        message = f"{address} is a cloud metadata address: never forwarded to, whatever allow_private says"
        return Refused("metadata_address", message)
    if not allow_private and any(_special(ip) for ip in judged):
        return Refused("private_address", f"{address} is not a public address: {_ALLOW_HINT}")
    return None


def vet(host: str, port: int, *, allow_private: bool, resolver: Resolver = system_resolver) -> list[str]:
    """The addresses to connect to for ``host``, all allowed; raises Refused if any one is not."""
    literal = host.removeprefix("[").removesuffix("]")
    try:
        ipaddress.ip_address(literal)
        addresses = [literal]
    except ValueError:
        try:
            addresses = resolver(host, port)
        except OSError as exc:
            raise Refused("unresolvable", f"{host} does not resolve ({exc}): check the name") from exc
    if not addresses:
        raise Refused("unresolvable", f"{host} resolves to no address: check the name")
    for address in addresses:
        try:
            refused = refusal(address, allow_private=allow_private)
        except ValueError:
            raise Refused("unresolvable", f"{host} resolves to {address!r}, not an IP address") from None
        if refused is not None:
            if address != host:
                refused = Refused(refused.reason, f"{host}: {refused}")
            raise refused
    return addresses


HTTP_PORTS = {"http": 80, "https": 443}


def check_url(
    url: str,
    *,
    allow_private: bool,
    resolver: Resolver = system_resolver,
    schemes: Mapping[str, int] = HTTP_PORTS,
    credentials: bool = False,
) -> None:
    """The start-up check of a destination URL: raises Refused for a URL the forwarder would never send
    to. A name that does not resolve now passes: the connect-time ``vet`` decides later. ``schemes``:
    the URL schemes of the destination's kind and their default ports; ``credentials``: whether a
    ``user:password@`` is allowed (a bus's; never an HTTP destination's)."""
    # The messages never repeat the URL whole: it may carry a password.
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise Refused("bad_url", "a destination URL has a space or a control character: remove it")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused("bad_url", f"a destination URL does not parse ({exc})") from None
    if parts.scheme not in schemes:
        allowed = " or ".join(f"{s}://" for s in schemes)
        raise Refused("bad_url", f"a destination URL starts with {allowed}, not {parts.scheme or 'no scheme'}")
    if not parts.hostname:
        raise Refused("bad_url", f"a destination URL names a host ({parts.scheme}:// has none)")
    if "@" in parts.netloc and not credentials:
        raise Refused(
            "bad_url", f"{parts.hostname}: no user:password@ in a destination URL (send credentials in headers)"
        )
    if port == 0:
        raise Refused("bad_url", f"{parts.hostname}: port 0 is no port: name the service's port or none")
    if "#" in url:
        raise Refused("bad_url", f"{parts.hostname}: no #fragment in a destination URL")
    host = parts.hostname
    if port is None:
        port = schemes[parts.scheme]
    name = host.rstrip(".")
    if (name == "localhost" or name.endswith(".localhost")) and not allow_private:
        raise Refused("private_address", f"{host} is this machine (loopback): {_ALLOW_HINT}")
    try:
        vet(host, port, allow_private=allow_private, resolver=resolver)
    except Refused as exc:
        if exc.reason != "unresolvable":
            raise
