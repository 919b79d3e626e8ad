"""Shopify: the SH1 vector, payload files, extract, one test per failure rule, rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhooks.errors import VerificationError
from webhooks.providers.base import Endpoint, Request
from webhooks.providers.shopify import Shopify, singular

PAYLOADS = Path(__file__).parents[1] / "payloads" / "shopify"
PROVIDER = Shopify()
SECRET = "shop-secret"
NOW = 1_700_000_000
WEBHOOK_ID = "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"


def endpoint(*secrets: str, topic: str = "orders/paid") -> Endpoint:
    return Endpoint("shop", "shopify", secrets or (SECRET,), options={"topic": topic})


def signed(body: bytes, *, secret: str = SECRET, topic: str = "orders/paid", **extra: str) -> Request:
    """The one correct signing helper every negative case starts from."""
    _, headers = PROVIDER.sign(endpoint(secret, topic=topic), body, now=NOW)
    headers = {**headers, "X-Shopify-Webhook-Id": WEBHOOK_ID, **extra}
    return Request({k.lower(): v for k, v in headers.items() if v}, body)


def test_vector_sh1() -> None:
    body = (PAYLOADS / "sh1__vector.json").read_bytes()
    assert body == b'{"id":1}'
    req = Request(
        {
            "x-shopify-hmac-sha256": "plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0=",
            "x-shopify-webhook-id": WEBHOOK_ID,
            "x-shopify-topic": "orders/create",
        },
        body,
    )
    result = PROVIDER.verify(req, endpoint(), now=NOW)
    assert [(e.event_id, e.event_type, e.secret_index) for e in result.events] == [(WEBHOOK_ID, "orders/create", 0)]
    assert signed(body).header("X-Shopify-Hmac-Sha256") == "plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0="


def test_new_style_headers() -> None:
    body = (PAYLOADS / "sh1__vector.json").read_bytes()
    req = Request(
        {
            "shopify-hmac-sha256": "plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0=",
            "shopify-webhook-id": WEBHOOK_ID,
            "shopify-topic": "orders/create",
        },
        body,
    )
    assert PROVIDER.verify(req, endpoint(), now=NOW).events[0].event_type == "orders/create"


@pytest.mark.parametrize(
    ("name", "topic", "ref"),
    [
        ("orders_paid__basic.json", "orders/paid", ("order", "820982911946154508", 1640995200000)),
        ("products_update__basic.json", "products/update", ("product", "788032119674292922", 1640995200000)),
        ("customers_redact__compliance.json", "customers/redact", None),
    ],
)
def test_payload_files_and_extract(name: str, topic: str, ref: tuple[str, str, int] | None) -> None:
    body = (PAYLOADS / name).read_bytes()
    event = PROVIDER.verify(signed(body, topic=topic), endpoint(), now=NOW).events[0]
    assert event.event_type == topic
    found = PROVIDER.extract(topic, PROVIDER.event_data(body, None))
    assert (found and (found.type, found.id, found.version)) == ref


@pytest.mark.parametrize(
    ("plural", "one"),
    [
        ("orders", "order"),
        ("inventory_items", "inventory_item"),
        ("companies", "company"),
        ("app", "app"),
        ("customer_addresses", "customer_address"),
        ("shop", "shop"),
    ],
)
def test_singular(plural: str, one: str) -> None:
    assert singular(plural) == one


def test_rotation() -> None:
    body = (PAYLOADS / "orders_paid__basic.json").read_bytes()
    for index, secret in enumerate(("old", "new")):
        event = PROVIDER.verify(signed(body, secret=secret), endpoint("old", "new"), now=NOW).events[0]
        assert event.secret_index == index


BODY = (PAYLOADS / "orders_paid__basic.json").read_bytes()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (signed(BODY, **{"X-Shopify-Hmac-Sha256": ""}), "missing_signature"),
        (signed(BODY, **{"X-Shopify-Hmac-Sha256": "not base64!"}), "malformed_signature"),
        (Request(signed(BODY).headers, BODY.replace(b'"398.00"', b'"1.00"')), "signature_mismatch"),
        (signed(BODY, **{"X-Shopify-Webhook-Id": ""}), "malformed_payload"),
        (signed(BODY, **{"X-Shopify-Topic": ""}), "malformed_payload"),
    ],
    ids=["missing", "not-base64", "body-changed", "no-webhook-id", "no-topic"],
)
def test_failures(req: Request, reason: str) -> None:
    with pytest.raises(VerificationError) as exc:
        PROVIDER.verify(req, endpoint(), now=NOW)
    assert exc.value.reason == reason
