"""``[destinations.<name>]`` and ``forward``: validated at start-up, failing closed with a message
that names the destination (and never a secret)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.destination import SECRET, SECRET_2
from webhooks import guard
from webhooks.configuration import settings as config
from webhooks.configuration.destinations import DEFAULT_SCHEDULE
from webhooks.errors import ConfigError


def load(destinations: dict[str, Any], forward: Any = ("orders",)) -> config.Settings:
    endpoint: dict[str, Any] = {"provider": "stripe", "secrets": ["whsec_test"]}
    if forward is not None:
        endpoint["forward"] = list(forward)
    return config.load({"DATABASE_URL": "sqlite://", "ENDPOINTS": {"stripe": endpoint}, "DESTINATIONS": destinations})


def dest(**extra: Any) -> dict[str, Any]:
    return {"url": "http://127.0.0.1:9/hooks", "secrets": [SECRET], "allow_private": True, **extra}


def test_defaults_and_forward() -> None:
    settings = load({"orders": dest()})
    orders = settings.destinations["orders"]
    assert settings.forwards == {"stripe": ("orders",)}
    assert (orders.timeout_seconds, orders.max_in_flight, orders.rate_limit, orders.ordered) == (15.0, 8, None, False)
    assert orders.retry_schedule == DEFAULT_SCHEDULE == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert (orders.circuit_failures, orders.max_attempts) == (20, 8)
    assert orders.wants("anything.at_all")


def test_event_globs() -> None:
    orders = load({"orders": dest(events=["payment_intent.*", "charge.refunded"])}).destinations["orders"]
    assert orders.wants("payment_intent.succeeded") and orders.wants("charge.refunded")
    assert not orders.wants("charge.succeeded") and not orders.wants("PAYMENT_INTENT.succeeded")


def test_secrets_never_in_a_repr_and_rotation_signs_with_all() -> None:
    orders = load({"orders": dest(secrets=[SECRET, SECRET_2])}).destinations["orders"]
    assert SECRET not in repr(orders) and SECRET.removeprefix("whsec_") not in repr(load({"orders": dest()}))
    assert len(orders.keys) == 2


@pytest.mark.parametrize(
    ("table", "forward", "message"),
    [
        (dest(secrets=[]), ("orders",), "no secrets configured"),
        (dest(secrets=["whsec_not base64!"]), ("orders",), "secret 1 is not whsec_"),
        (dest(secrets=["whsec_c2hvcnQ="]), ("orders",), "use at least 24"),
        (dest(url="ftp://127.0.0.1/"), ("orders",), "destination 'orders'"),
        (dest(timeout_second=3), ("orders",), "did you mean 'timeout_seconds'"),
        (dest(max_in_flight=0), ("orders",), "max_in_flight must be a positive whole number"),
        (dest(ordered="yes"), ("orders",), "ordered must be true or false"),
        (dest(retry_schedule=[5, -1]), ("orders",), "retry_schedule"),
        (dest(), ("billing",), "forward names destination 'billing', which is not configured"),
    ],
)
def test_fails_closed(table: dict[str, Any], forward: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load({"orders": table}, forward)
    assert "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "allow_private"),
    [
        ("http://127.0.0.1:9/", False),
        ("http://10.0.0.1/", False),
        ("http://localhost:9/", False),
        ("http://169.254.169.254/latest/meta-data", False),
        ("http://169.254.169.254/latest/meta-data", True),  # the metadata address: always
    ],
)
def test_private_and_metadata_targets_are_refused_at_start_up(url: str, allow_private: bool) -> None:
    with pytest.raises(ConfigError, match="destination 'orders'"):
        load({"orders": dest(url=url, allow_private=allow_private)})


def test_a_name_resolving_to_a_private_address_is_refused_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "system_resolver", lambda host, port: ["10.1.2.3"])  # no DNS traffic
    with pytest.raises(ConfigError, match="destination 'orders'"):
        load({"orders": dest(url="https://orders.example.com/hooks", allow_private=False)})


def test_the_toml_file_holds_destinations(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text(
        f"""
[destinations.orders]
url = "http://127.0.0.1:9/hooks"
secrets = ["{SECRET}"]
allow_private = true
ordered = true

[endpoints.stripe]
provider = "stripe"
secrets = ["whsec_test"]
forward = ["orders"]
"""
    )
    settings = config.load({"DATABASE_URL": "sqlite://", "WEBHOOKS_CONFIG": str(path)})
    assert settings.destinations["orders"].ordered and settings.forwards["stripe"] == ("orders",)


def test_the_serve_banner_names_what_forwards_where() -> None:
    from webhooks.service.serving import banner

    text = banner(load({"orders": dest()}), ["http://127.0.0.1:8000"], None)
    assert "forwards   stripe → orders" in text and "orders  http://127.0.0.1:9/hooks" in text
    assert SECRET not in text
