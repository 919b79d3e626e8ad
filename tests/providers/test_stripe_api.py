"""Stripe's API client resolves resource paths through the SDK's public API only (no private
``stripe._…`` module): a type the SDK knows maps to its class URL, one it does not to None."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from webhooks.providers import stripe_api


@pytest.mark.parametrize(
    ("object_type", "path"),
    [
        ("payment_intent", "/v1/payment_intents/pi_1"),
        ("customer", "/v1/customers/pi_1"),
        ("checkout.session", "/v1/checkout/sessions/pi_1"),
        ("billing_portal.session", "/v1/billing_portal/sessions/pi_1"),
    ],
)
def test_a_type_the_sdk_knows_has_its_resource_path(object_type: str, path: str) -> None:
    assert stripe_api.resource_path(object_type, "pi_1") == path


def test_an_unknown_type_has_no_path_and_the_id_is_quoted() -> None:
    assert stripe_api.resource_path("no_such_object", "x") is None
    assert stripe_api.resource_path("v2.core.event", "x") is None  # thin events come with their own url
    assert stripe_api.resource_path("charge", "ch_1/../x") == "/v1/charges/ch_1%2F..%2Fx"


def test_the_client_imports_no_private_sdk_module() -> None:
    tree = ast.parse(Path(stripe_api.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in imported if m.startswith("stripe._")] == []
