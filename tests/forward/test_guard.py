"""The address guard: each class of non-public address refused unless the destination allows private
addresses, metadata addresses refused always, resolved names judged by every address they resolve to.
No test here opens a connection: names resolve through injected resolvers."""

from __future__ import annotations

import threading
import time

import pytest

from webhooks.guard import (
    METADATA,
    Refused,
    Resolver,
    check_url,
    refusal,
    resolve_within,
    system_resolver,
    vet,
)

PRIVATE = [
    "127.0.0.1",  # loopback
    "127.9.9.9",
    "::1",
    "10.0.0.1",  # RFC 1918
    "172.16.0.1",
    "172.31.255.254",
    "192.168.1.1",
    "169.254.1.1",  # link-local
    "fe80::1",
    "fc00::1",  # unique local
    "fd12:3456::1",
    "fec0::1",  # site-local (deprecated, still routed inside some networks)
    "100.64.0.1",  # carrier-grade NAT
    "0.0.0.0",  # unspecified
    "::",
    "224.0.0.1",  # multicast
    "ff02::1",
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:10.0.0.1",
    "::10.0.0.1",  # IPv4-compatible
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1 (obfuscated)
]
PUBLIC = [
    "8.8.8.8",
    "93.184.216.34",
    "2606:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
]
METADATA_SPELLINGS = [
    "169.254.169.254",
    "fd00:ec2::254",
    "169.254.170.2",
    "100.100.100.200",
    # every IPv6 form that carries 169.254.169.254 (a9fe:a9fe), allow_private or not (issue 30)
    "::ffff:169.254.169.254",  # IPv4-mapped
    "::ffff:a9fe:a9fe",
    "::169.254.169.254",  # IPv4-compatible
    "::a9fe:a9fe",
    "::ffff:0:169.254.169.254",  # SIIT (IPv4-translated)
    "::ffff:0:a9fe:a9fe",
    "64:ff9b::169.254.169.254",  # well-known NAT64
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::a9fe:a9fe",  # local-use NAT64 (RFC 8215), a /96 prefix
    "64:ff9b:1:abcd:0:1:a9fe:a9fe",
    "64:ff9b:1:a9fe:a9:fe00::",  # … a /48 prefix (the IPv4 around the u octet)
    "64:ff9b:1:ffa9:fe:a9fe::",  # … a /56 prefix
    "64:ff9b:1:ffff:a9:fea9:fe00:0",  # … a /64 prefix
    "2002:a9fe:a9fe::",  # 6to4
    "2002:a9fe:a9fe:1:2:3:4:5",
    "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254 (XOR 0xffffffff)
    "2001:0:a9fe:a9fe::1",  # Teredo, server 169.254.169.254
    "::ffff:169.254.170.2",  # the other metadata addresses carried the same way
    "64:ff9b:1::100.100.100.200",
    "::ffff:0:169.254.170.2",
]


def never(host: str, port: int) -> list[str]:
    raise AssertionError(f"an IP literal was looked up: {host}")


def resolving(*addresses: str) -> Resolver:
    return lambda host, port: list(addresses)


@pytest.mark.parametrize("address", PRIVATE)
def test_a_private_address_is_refused_unless_allowed(address: str) -> None:
    refused = refusal(address, allow_private=False)
    assert refused is not None and refused.reason == "private_address"
    assert "allow_private = true" in str(refused) and address in str(refused)
    assert refusal(address, allow_private=True) is None


@pytest.mark.parametrize("address", METADATA_SPELLINGS)
def test_a_metadata_address_is_refused_even_when_private_is_allowed(address: str) -> None:
    for allow_private in (False, True):
        refused = refusal(address, allow_private=allow_private)
        assert refused is not None and refused.reason == "metadata_address"
        assert "metadata" in str(refused) and "allow_private = true" not in str(refused)  # no advice that cannot help


def test_a_slow_resolver_is_given_up_at_its_deadline() -> None:
    """``resolve_within``: a lookup that hangs ends as ``unresolvable`` about when it was told to."""
    release = threading.Event()

    def slow(host: str, port: int) -> list[str]:
        release.wait(30)
        return ["93.184.216.34"]

    started = time.monotonic()
    try:
        with pytest.raises(Refused) as caught:
            vet("slow.example", 443, allow_private=False, resolver=resolve_within(slow, 0.3))
        assert time.monotonic() - started < 5.0 and caught.value.reason == "unresolvable"
        assert isinstance(caught.value.__cause__, TimeoutError)
    finally:
        release.set()
    quick = resolve_within(resolving("93.184.216.34"), 5.0)
    assert vet("quick.example", 443, allow_private=False, resolver=quick) == ["93.184.216.34"]
    with pytest.raises(Refused) as caught:
        vet("nowhere.invalid", 443, allow_private=True, resolver=resolve_within(failing, 5.0))
    assert caught.value.reason == "unresolvable" and "Name or service not known" in str(caught.value)


def test_the_metadata_set_holds_the_known_services() -> None:
    assert {str(a) for a in METADATA} == {"169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200"}


@pytest.mark.parametrize("address", PUBLIC)
def test_a_public_address_is_allowed(address: str) -> None:
    assert refusal(address, allow_private=False) is None


def test_refusal_of_a_non_address_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        refusal("example.com", allow_private=True)


def test_vet_returns_the_resolved_addresses() -> None:
    resolver = resolving("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946")
    assert vet("example.com", 443, allow_private=False, resolver=resolver) == [
        "93.184.216.34",
        "2606:2800:220:1:248:1893:25c8:1946",
    ]


def test_vet_refuses_a_name_that_resolves_to_a_private_address() -> None:
    with pytest.raises(Refused) as caught:
        vet("hooks.example.com", 443, allow_private=False, resolver=resolving("10.0.0.1"))
    assert caught.value.reason == "private_address"
    assert "hooks.example.com" in str(caught.value) and "10.0.0.1" in str(caught.value)
    assert vet("hooks.example.com", 443, allow_private=True, resolver=resolving("10.0.0.1")) == ["10.0.0.1"]


def test_vet_refuses_an_answer_mixing_public_and_private_addresses() -> None:
    """A rebinding name: one public address to pass a check, one private to be connected to."""
    with pytest.raises(Refused) as caught:
        vet("rebind.example", 80, allow_private=False, resolver=resolving("93.184.216.34", "127.0.0.1"))
    assert caught.value.reason == "private_address"


def test_vet_refuses_metadata_behind_a_name_even_when_private_is_allowed() -> None:
    with pytest.raises(Refused) as caught:
        vet("meta.example", 80, allow_private=True, resolver=resolving("10.0.0.1", "169.254.169.254"))
    assert caught.value.reason == "metadata_address"


def test_vet_takes_an_ip_literal_as_itself() -> None:
    assert vet("8.8.8.8", 53, allow_private=False, resolver=never) == ["8.8.8.8"]
    assert vet("[2606:4700::1111]", 443, allow_private=False, resolver=never) == ["2606:4700::1111"]
    with pytest.raises(Refused):
        vet("::1", 80, allow_private=False, resolver=never)


def failing(host: str, port: int) -> list[str]:
    raise OSError("Name or service not known")


@pytest.mark.parametrize("resolver", [failing, resolving(), resolving("not-an-address")])
def test_vet_a_name_that_does_not_resolve_is_unresolvable(resolver: Resolver) -> None:
    with pytest.raises(Refused) as caught:
        vet("nowhere.invalid", 443, allow_private=True, resolver=resolver)
    assert caught.value.reason == "unresolvable"
    assert "nowhere.invalid" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "example.com/hooks",
        "https:///hooks",
        "https://user:s3cret@example.com/hooks",
        "ftp://user:s3cret@example.com/",
        "https://s3cret@example.com/hooks",
        "https://example.com/hooks#part",
        "https://example.com:99999/",
        "https://example.com:0/",
        "https://exa mple.com/",
        "https://example.com/\nhooks",
        "http://[::1/",
    ],
)
def test_check_url_refuses_a_malformed_url(url: str) -> None:
    with pytest.raises(Refused) as caught:
        check_url(url, allow_private=True, resolver=resolving("93.184.216.34"))
    assert caught.value.reason == "bad_url"
    assert "s3cret" not in str(caught.value)  # a password in the URL is not repeated


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://10.0.0.1/",
        "https://[::1]:8443/hooks",
        "http://[::ffff:10.0.0.1]/",
        "http://localhost:8080/",
        "http://api.localhost/",
        "http://LOCALHOST./",
    ],
)
def test_check_url_refuses_a_private_literal_unless_allowed(url: str) -> None:
    with pytest.raises(Refused) as caught:
        check_url(url, allow_private=False, resolver=resolving("93.184.216.34"))
    assert caught.value.reason == "private_address"
    check_url(url, allow_private=True, resolver=resolving("127.0.0.1"))


def test_check_url_refuses_metadata_always() -> None:
    for allow_private in (False, True):
        with pytest.raises(Refused) as caught:
            check_url("http://169.254.169.254/latest", allow_private=allow_private, resolver=never)
        assert caught.value.reason == "metadata_address"


def test_check_url_vets_a_name_that_resolves() -> None:
    check_url("https://hooks.example.com/in", allow_private=False, resolver=resolving("93.184.216.34"))
    with pytest.raises(Refused) as caught:
        check_url("https://hooks.example.com/in", allow_private=False, resolver=resolving("192.168.0.5"))
    assert caught.value.reason == "private_address"


def test_check_url_allows_a_name_that_does_not_resolve_now() -> None:
    """DNS may be down at start-up: the connect-time vet refuses it later if it must."""
    seen: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> list[str]:
        seen.append((host, port))
        raise OSError("Temporary failure in name resolution")

    check_url("https://hooks.example.com/in", allow_private=False, resolver=resolver)
    check_url("http://hooks.example.com:8080/in", allow_private=False, resolver=resolver)
    assert seen == [("hooks.example.com", 443), ("hooks.example.com", 8080)]


@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f000001"])
def test_the_system_resolver_exposes_loopback_spelt_otherwise(host: str) -> None:
    """Spellings ``ipaddress`` does not read as literals are names the system resolves (numerically,
    no DNS query): the guard judges what they resolve to."""
    assert any(address in ("127.0.0.1", "::1") for address in system_resolver(host, 80))
    with pytest.raises(Refused) as caught:
        check_url(f"http://{host}/", allow_private=False)
    assert caught.value.reason == "private_address"
