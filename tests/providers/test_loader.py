"""The one bounded caching loader (``webhooks.providers.loader``) behind PayPal's and SNS's
certificates and Plaid's keys: its bounds, and that each of them goes through it."""

from __future__ import annotations

import pytest

from webhooks.errors import UnavailableError, VerificationError
from webhooks.providers import loader as loader_module
from webhooks.providers.loader import BoundedLoader
from webhooks.providers.paypal_certs import CertLoader
from webhooks.providers.plaid_keys import KeyLoader
from webhooks.providers.sns_certs import SnsCertLoader
from webhooks.vocabulary import Reason


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_paypal_sns_and_plaid_share_the_one_loader() -> None:
    for made in (CertLoader(), SnsCertLoader(), KeyLoader()):
        assert isinstance(made._loader, BoundedLoader), made
    assert SnsCertLoader()._loader.name == "SNS certificate"


def test_values_are_cached_until_they_expire_and_failures_for_their_ttl() -> None:
    clock, calls = Clock(), []
    loader: BoundedLoader[str, str] = BoundedLoader("Test key", timeout=1, clock=clock, failure_ttl=60)

    def good() -> tuple[str, float]:
        calls.append("good")
        return "value", 30.0

    assert loader.load("k", "a", good) == loader.load("k", "a", good) == "value"
    clock.now += 31
    assert loader.load("k", "a", good) == "value" and calls == ["good", "good"]

    def bad() -> tuple[str, float]:
        calls.append("bad")
        raise VerificationError(Reason.SIGNATURE_MISMATCH, "junk")

    for _ in range(3):
        with pytest.raises(VerificationError, match="junk"):
            loader.load("junk", "a", bad)
    assert calls.count("bad") == 1
    clock.now += 61
    with pytest.raises(VerificationError):
        loader.load("junk", "a", bad)
    assert calls.count("bad") == 2


def test_a_senders_new_keys_and_all_fetches_are_budgeted() -> None:
    clock = Clock()
    loader: BoundedLoader[str, str] = BoundedLoader(
        "Test key", timeout=1, clock=clock, per_sender=2, max_fetches=3, per_seconds=60
    )
    loader.load("a1", "alice", lambda: ("v", 600.0))
    loader.load("a2", "alice", lambda: ("v", 600.0))
    with pytest.raises(UnavailableError, match="Test key fetches are rate-limited"):
        loader.load("a3", "alice", lambda: ("v", 600.0))
    assert loader.load("a1", "alice", lambda: ("other", 600.0)) == "v"  # cached: no budget spent
    loader.load("b1", "bob", lambda: ("v", 600.0))
    with pytest.raises(UnavailableError):
        loader.load("c1", "carol", lambda: ("v", 600.0))  # the overall budget
    clock.now += 61
    assert loader.load("c1", "carol", lambda: ("v", 600.0)) == "v"


def test_what_it_keeps_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader_module, "MAX_KEPT", 5)
    loader: BoundedLoader[str, str] = BoundedLoader("Test key", timeout=1, max_fetches=1000, per_sender=1000)
    for i in range(20):
        loader.load(f"k{i}", "a", lambda: ("v", 600.0))
    assert len(loader._cache) == 5 and "k19" in loader._cache and "k0" not in loader._cache
