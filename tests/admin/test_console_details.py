"""Details of the event page: versions in words, signed-at times, attempts since the last replay."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from flask import Flask

from tests import sample_handlers
from tests.conftest import admin_headers, adyen_body, adyen_item, drain, stripe_event, stripe_headers
from webhooks import providers
from webhooks.admin import versions


def text_of(app: Flask, url: str) -> str:
    page = app.test_client().get(url, headers=admin_headers())
    assert page.status_code == 200, url
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.get_data(as_text=True)))


@pytest.mark.parametrize(
    ("event_type", "rank"),
    [
        ("payment_intent.created", "created"),
        ("payment_intent.processing", "update"),
        ("payment_intent.succeeded", "terminal"),
    ],
)
def test_stripe_versions_read_as_created_time_and_rank(event_type: str, rank: str) -> None:
    created = int(datetime(2024, 5, 1, 10, 0, tzinfo=UTC).timestamp())
    ref = providers.get("stripe").extract(
        event_type, {"created": created, "data": {"object": {"id": "pi_1", "object": "payment_intent"}}}
    )
    assert ref is not None
    assert versions.describe("stripe", ref.version) == f"created 2024-05-01 10:00:00 UTC, rank {rank}"


@pytest.mark.parametrize(
    ("code", "stage"),
    [
        ("AUTHORISATION", "stage 1 (authorisation)"),
        ("CAPTURE", "stage 2 (capture)"),
        ("REFUND", "stage 3 (cancel or refund)"),
        ("CHARGEBACK", "stage 4 (dispute)"),
    ],
)
def test_adyen_versions_read_as_stage_and_event_date(code: str, stage: str) -> None:
    """Rows stored before the payment fold carry ``stage × 10^14 + eventDate ms``; the fold's own
    versions count the notifications applied."""
    item = {
        "eventCode": code,
        "eventDate": "2024-05-01T12:00:00+02:00",
        "pspReference": "psp1",
        "originalReference": "psp0",
        "success": "true",
        "amount": {"value": 100, "currency": "EUR"},
    }
    event_ms = int(datetime(2024, 5, 1, 10, 0, tzinfo=UTC).timestamp() * 1000)
    number = int(stage.split()[1])
    assert versions.describe("adyen", number * 10**14 + event_ms) == f"{stage}, eventDate 2024-05-01 10:00:00 UTC"
    ref = providers.get("adyen").extract(code, item)
    assert ref is not None
    expected = (
        f"{stage}, eventDate 2024-05-01 10:00:00 UTC"
        if ref.version >= 10**14
        else f"fold of {ref.version} notification{'' if ref.version == 1 else 's'}"
    )
    assert versions.describe("adyen", ref.version) == expected


def test_unexplained_versions_fall_back_to_the_number() -> None:
    assert versions.describe("shopify", 17) == "version 17"
    assert versions.describe("stripe", 10**30) == f"version {10**30}"  # beyond any date
    assert versions.describe("adyen", 9 * 10**14) == f"version {9 * 10**14}"  # no such stage
    assert [versions.describe("adyen", n) for n in (1, 2)] == ["fold of 1 notification", "fold of 2 notifications"]
    assert versions.describe("stripe", None) is None


def test_event_page_explains_version_and_signed_time(app: Flask) -> None:
    created = int(datetime(2024, 5, 1, 10, 0, tzinfo=UTC).timestamp())
    body = stripe_event("evt_v", "payment_intent.succeeded", created)
    signed = int(datetime.now(UTC).timestamp())
    assert (
        app.test_client()
        .post("/webhooks/stripe", data=body, headers=stripe_headers(body, timestamp=signed))
        .status_code
        == 200
    )
    item = adyen_item(psp="psp_cap", code="CAPTURE", original="psp_auth", event_date="2024-05-01T12:00:00+02:00")
    assert app.test_client().post("/webhooks/adyen", data=adyen_body(item)).status_code == 200
    drain(app)
    page = text_of(app, "/admin/events/stripe/evt_v")
    assert "created 2024-05-01 10:00:00 UTC, rank terminal" in page
    iso = datetime.fromtimestamp(signed, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    assert f"Signed at {iso} (unix {signed}; received" in page
    adyen = text_of(app, "/admin/events/adyen/psp_cap:CAPTURE:true")
    assert (
        "stage 2 (capture), eventDate 2024-05-01 10:00:00 UTC" in adyen or "fold of 1 notification" in adyen
    )  # before / after the payment fold


def test_attempts_are_counted_since_the_last_replay(any_app: Flask) -> None:
    client = any_app.test_client()
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    for event_id in ("evt_bad", "evt_other"):
        body = stripe_event(event_id, "charge.refunded", obj={"id": f"ch_{event_id}", "object": "charge"})
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(any_app)
    before = text_of(any_app, "/admin/events/stripe/evt_bad")
    assert "failed after 5 attempts" in before and "Replays" not in before
    sample_handlers.FAIL_TYPES.clear()
    replayed = client.post("/admin/api/events/stripe/evt_bad/replay", json={"reason": "fixed"}, headers=admin_headers())
    assert replayed.status_code == 202
    drain(any_app)
    page = text_of(any_app, "/admin/events/stripe/evt_bad")
    assert "processed after 1 attempt since the last replay" in page
    assert "Replays 1, last" in page and "6 attempts in all" in page
    other = text_of(any_app, "/admin/events/stripe/evt_other")  # not in that replay
    assert "failed after 5 attempts" in other and "Replays" not in other
    bulk = client.post("/admin/api/events/replay", json={"status": "failed", "reason": "bulk"}, headers=admin_headers())
    assert bulk.status_code == 202 and bulk.get_json()["event_ids"] == [["stripe", "evt_other"]]
    drain(any_app)
    assert "processed after 1 attempt since the last replay" in text_of(any_app, "/admin/events/stripe/evt_other")
    assert "Replays 1, last" in text_of(any_app, "/admin/events/stripe/evt_bad")  # the bulk one was not its
