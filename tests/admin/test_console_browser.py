"""The console in a real headless Chromium (Debian's ``chromium`` driven by Playwright).

The app runs on a real threaded server with its embedded worker, so a replay clicked in the
browser is processed for real. Screenshots go to ``test-output/``. Without chromium or Playwright
this skips on a laptop and fails under ``CI=true`` (``.ci/run`` installs chromium).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from flask import Flask

from tests import sample_handlers
from tests.conftest import (
    ADMIN_PASSWORD,
    ROOT,
    adyen_body,
    adyen_item,
    base_config,
    free_port,
    make_app,
    stripe_event,
    stripe_headers,
    unavailable,
    wait_until,
)
from tests.support.servers import serve_in_thread

CHROMIUM = os.environ.get("WEBHOOKS_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
OUTPUT = ROOT / "test-output"
pytestmark = pytest.mark.slow


@pytest.fixture
def server(sqlite_url: str) -> Iterator[tuple[str, Flask]]:
    """The app on 127.0.0.1 with its embedded worker; one attempt per event, so failures show at once."""
    from werkzeug.serving import make_server

    app = make_app(base_config(sqlite_url, WEBHOOKS_EMBEDDED_WORKER="true", WEBHOOKS_MAX_ATTEMPTS="1"))
    httpd = make_server("127.0.0.1", free_port(), app, threaded=True)
    serve_in_thread(httpd)
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", app
    finally:
        httpd.shutdown()
        sample_handlers.reset()


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        unavailable("Playwright", exc)
    if not Path(CHROMIUM).exists():
        unavailable("chromium", FileNotFoundError(CHROMIUM))
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def status_of(base: str, provider: str, event_id: str) -> str:
    answer = requests.get(f"{base}/admin/api/events/{provider}/{event_id}", auth=("admin", ADMIN_PASSWORD), timeout=5)
    return str(answer.json().get("status")) if answer.ok else "missing"


def deliver_stripe(base: str, event_id: str, type_: str, obj: dict[str, Any]) -> None:
    body = stripe_event(event_id, type_, int(time.time()), obj)
    assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=5).ok


def seed(base: str) -> None:
    """A realistic mix: Stripe payments, an Adyen payment and its capture, one failing refund."""
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    for i in range(12):
        type_ = ("payment_intent.created", "payment_intent.succeeded", "invoice.paid")[i % 3]
        obj = {"id": f"pi_3Ox{i:04d}", "object": "payment_intent", "amount": 1000 + i, "currency": "eur"}
        deliver_stripe(base, f"evt_1Ox{i:04d}", type_, obj)
    items = [
        adyen_item(psp="8816178914391238", reference="ORDER-2024-0042"),
        adyen_item(psp="8816178914391777", code="CAPTURE", original="8816178914391238", reference="ORDER-2024-0042"),
    ]
    for item in items:
        assert requests.post(f"{base}/webhooks/adyen", data=adyen_body(item), timeout=5).text == "[accepted]"
    deliver_stripe(base, "evt_refund_fail", "charge.refunded", {"id": "ch_3Fail", "object": "charge", "refunded": True})
    wait_until(lambda: status_of(base, "stripe", "evt_refund_fail") == "failed")
    wait_until(lambda: status_of(base, "adyen", "8816178914391777:CAPTURE:true") == "processed")


def test_operator_finds_inspects_and_replays_in_the_browser(server: tuple[str, Flask], browser: Any) -> None:
    base, _app = server
    seed(base)
    OUTPUT.mkdir(exist_ok=True)

    anonymous = browser.new_context()
    assert anonymous.request.get(f"{base}/admin/").status == 401  # no credentials, no console
    anonymous.close()

    context = browser.new_context(
        http_credentials={"username": "admin", "password": ADMIN_PASSWORD}, viewport={"width": 1280, "height": 820}
    )
    page = context.new_page()
    assert page.goto(f"{base}/admin/").status == 200  # logged in with HTTP Basic
    assert page.locator("table.events tbody tr").count() == 15
    page.screenshot(path=str(OUTPUT / "console-events.png"))

    # Filter by status.
    page.select_option("select[name=status]", "failed")
    page.click("form.filters button[type=submit]")
    rows = page.locator("table.events tbody tr")
    assert rows.count() == 1 and "evt_refund_fail" in rows.first.inner_text()

    # Search by the Adyen pspReference of the payment: the authorisation and its capture.
    page.goto(f"{base}/admin/")
    page.fill("input[name=q]", "8816178914391238")
    page.click("form.filters button[type=submit]")
    assert sorted(page.locator("table.events tbody tr a.eid").all_inner_texts()) == [
        "8816178914391238:AUTHORISATION:true",
        "8816178914391777:CAPTURE:true",
    ]

    # Open a detail page.
    page.click("text=8816178914391777:CAPTURE:true")
    assert "ORDER-2024-0042" in page.inner_text("main") and "adyen-hmac-item" in page.inner_text("main")
    page.screenshot(path=str(OUTPUT / "console-detail.png"), full_page=True)

    # Replay the failed event once the handler is fixed, and watch it become processed.
    sample_handlers.FAIL_TYPES.clear()
    page.goto(f"{base}/admin/events/stripe/evt_refund_fail")
    assert "RuntimeError: downstream timeout while refunding" in page.inner_text("main")
    page.fill("form.replay input[name=reason]", "refund API back up")
    page.click("form.replay button[type=submit]")
    assert "Replay queued" in page.inner_text("main")

    def processed() -> bool:
        page.reload()
        text = page.inner_text("main")  # the failed attempt came before the replay, so it is not counted
        return "processed after 1 attempt since the last replay" in text and "2 attempts in all" in text

    wait_until(processed, interval=0.3)
    page.screenshot(path=str(OUTPUT / "console-replayed.png"), full_page=True)

    # Bulk replay from the dead letter, with the dry-run count shown before confirming.
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    for i in range(2):
        deliver_stripe(base, f"evt_bulk_{i}", "charge.refunded", {"id": f"ch_bulk{i}", "object": "charge"})
    wait_until(lambda: all(status_of(base, "stripe", f"evt_bulk_{i}") == "failed" for i in range(2)))
    sample_handlers.FAIL_TYPES.clear()
    page.goto(f"{base}/admin/dead")
    assert page.locator("table.events tbody tr").count() == 2
    page.click("text=Replay matching…")
    assert page.inner_text("#dry-run-count") == "2"
    page.screenshot(path=str(OUTPUT / "console-bulk-dry-run.png"))
    page.fill("form.replay input[name=reason]", "bulk after fix")
    page.click("form.replay button[type=submit]")
    assert "bulk after fix" in page.inner_text("main")  # the audit log, where the form lands
    wait_until(lambda: all(status_of(base, "stripe", f"evt_bulk_{i}") == "processed" for i in range(2)))
    page.goto(f"{base}/admin/dead")
    assert "No events match." in page.inner_text("table.events")
    context.close()


ODD_IDS = [
    ".",
    "..",
    "a/./b",
    "a/../b",
    "/lead",
    "x/../../stripe/evt_legit",
    "100%",
    "what?x=1",
    "frag#ment",
    "a//b",
    "%2e%2e",
    "back\\slash",
]


def test_odd_event_ids_open_their_own_event_when_clicked(server: tuple[str, Flask], browser: Any) -> None:
    """Chromium resolves ``.``/``..`` path segments (even ``%2E``) and merges nothing back: every
    link must still open the event it names — never another, genuine one."""
    base, _app = server
    deliver_stripe(base, "evt_legit", "payment_intent.succeeded", {"id": "pi_legit", "object": "payment_intent"})
    for event_id in ODD_IDS:
        deliver_stripe(base, event_id, "payment_intent.created", {"id": "pi_odd", "object": "payment_intent"})
    context = browser.new_context(http_credentials={"username": "admin", "password": ADMIN_PASSWORD})
    page = context.new_page()
    for event_id in ["evt_legit", *ODD_IDS]:
        assert page.goto(f"{base}/admin/").status == 200
        link = page.locator("table.events").get_by_role("link", name=event_id, exact=True)
        assert link.count() == 1, event_id
        link.click()
        page.wait_for_load_state()
        assert event_facts(page).get("Event id") == event_id, (event_id, page.url)
        kind = "payment_intent.succeeded" if event_id == "evt_legit" else "payment_intent.created"
        assert event_facts(page).get("Type") == kind
    # Replays from the pages of ids that paths cannot carry replay those events, not their namesakes.
    for event_id in ["x/../../stripe/evt_legit", ".."]:
        page.goto(f"{base}/admin/")
        page.locator("table.events").get_by_role("link", name=event_id, exact=True).click()
        page.fill("form.replay input[name=reason]", f"odd id {event_id}")
        page.click("form.replay button[type=submit]")
        assert "Replay queued" in page.inner_text("main")
        assert event_facts(page).get("Event id") == event_id
    page.goto(f"{base}/admin/audit")
    audit = page.locator("table")
    assert [
        audit.get_by_role("link", name=name, exact=True).count()
        for name in ("x/../../stripe/evt_legit", "..", "evt_legit", ".")
    ] == [1, 1, 0, 0]
    context.close()


def event_facts(page: Any) -> dict[str, str]:
    """The detail page's first facts list (Status, Endpoint, Type, Event id, …) as a dict."""
    facts = page.locator("dl").first
    return dict(zip(facts.locator("dt").all_inner_texts(), facts.locator("dd").all_inner_texts(), strict=True))


LONG_ID = "evt_" + "9Zq" * 83  # 253 characters, no break opportunity
LONG_ERROR = "RuntimeError: " + "upstream-said-no/" * 80


def test_pages_fit_1440px_and_request_nothing_missing(server: tuple[str, Flask], browser: Any) -> None:
    """The screenshots' defects: a long id and error overflowed the events table, and every page
    asked for a favicon that was not there."""
    base, app = server
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    deliver_stripe(base, LONG_ID, "charge.refunded", {"id": "ch_" + "x" * 120, "object": "charge"})
    deliver_stripe(base, "evt_short", "payment_intent.succeeded", {"id": "pi_short", "object": "payment_intent"})
    wait_until(lambda: status_of(base, "stripe", LONG_ID) == "failed")
    with app.extensions["webhooks"].engine.begin() as conn:  # an error as long as real ones get
        conn.execute(sa.text("UPDATE events SET last_error = :e WHERE event_id = :i"), {"e": LONG_ERROR, "i": LONG_ID})
    sample_handlers.FAIL_TYPES.clear()
    OUTPUT.mkdir(exist_ok=True)
    context = browser.new_context(
        http_credentials={"username": "admin", "password": ADMIN_PASSWORD}, viewport={"width": 1440, "height": 900}
    )
    page = context.new_page()
    failures: list[str] = []
    requested: list[str] = []
    page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("request", lambda r: requested.append(r.url))
    pages = {
        "events": "/admin/",
        "dead": "/admin/dead",
        "detail": f"/admin/events/stripe/{LONG_ID}",
        "audit": "/admin/audit",
        "bulk": "/admin/replay?status=failed",
        "rejections": "/admin/rejections",
        "destinations": "/admin/destinations",
    }
    for name, path in pages.items():
        assert page.goto(base + path).status == 200, path
        page.wait_for_load_state("load")
        width, inner = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
        page.screenshot(path=str(OUTPUT / f"console-1440-{name}.png"), full_page=True)
        assert width <= inner, (path, width, inner)
        assert page.locator("link[rel=icon]").count() == 1
    assert failures == []
    assert not [url for url in requested if url.endswith("/favicon.ico")]

    page.goto(f"{base}/admin/")
    row = page.locator("table.events tbody tr", has_text="charge.refunded")
    assert row.get_by_role("link").get_attribute("title") == LONG_ID  # the whole value, on hover
    assert row.locator("td.error").get_attribute("title") == LONG_ERROR
    box = row.locator("td.error").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1440
    context.close()
