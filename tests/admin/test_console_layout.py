"""The console at 768, 1 024 and 1 440 px in a real Chromium, and the docs' screenshots.

Each events row's cells must not overlap, nothing a cell holds may spill into its neighbour, an
event id must wrap onto at most two lines, and no text may be cut to a stub (at 800 px the id
column once shrank to one character under the status pill; at 1 024 px ids wrapped onto 4 lines).
The docs' screenshots are taken on every run into a temporary directory (the suite writes nothing
tracked); ``WEBHOOKS_TEST_SCREENSHOTS=1`` writes them into ``docs/screenshots/`` instead, the
command that refreshes the manual's pictures (docs/development.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask

from tests import sample_handlers
from tests.admin.test_console_browser import browser, server, status_of  # noqa: F401  (fixtures)
from tests.conftest import (
    ADMIN_PASSWORD,
    ROOT,
    adyen_body,
    adyen_item,
    stripe_event,
    stripe_headers,
    wait_until,
)

pytestmark = pytest.mark.slow
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"
WIDTHS = (768, 1024, 1440)


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where this run's screenshots go: a temporary directory unless the docs' are being refreshed."""
    if os.environ.get("WEBHOOKS_TEST_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return DOCS_SCREENSHOTS
    return tmp_path


KINDS = (
    ("payment_intent.created", 0),
    ("payment_intent.succeeded", 1),
    ("charge.succeeded", 2),
    ("invoice.paid", 3),
    ("customer.subscription.updated", 4),
    ("checkout.session.completed", 5),
)

# What the page reports per events row: cell boxes, the boxes of what each cell holds, the id's
# lines, and every clipped text's visible width.
MEASURE = """() => [...document.querySelectorAll('table.events tbody tr')].map(tr => {
  const cells = [...tr.children].map(td => { const r = td.getBoundingClientRect();
    return {x: r.x, y: r.y, w: r.width, h: r.height, cls: td.className}; });
  const spills = [];
  const stubs = [];
  [...tr.children].forEach((td, i) => {
    const box = td.getBoundingClientRect();
    td.querySelectorAll('span, a, b').forEach(el => {
      const clipped = el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflow === 'hidden';
      if (clipped && el.clientWidth < 48) stubs.push([i, el.className, el.clientWidth]);
      if (clipped) return;  // an ellipsis: the rest is hidden inside the cell, not drawn over others
      const r = el.getBoundingClientRect();
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5) spills.push([i, el.className, r.left, r.right, box.left, box.right]);
    });
    if (box.width < 48) stubs.push([i, td.className, box.width]);
  });
  const lineCount = el => { const range = document.createRange(); range.selectNodeContents(el);
    return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size; };
  const pill = tr.querySelector('.status');
  const amount = tr.querySelector('td.c-amount');
  const id = tr.querySelector('a.eid') || tr.querySelector('td a');  // (the old page's id link had no class)
  let lines = 0;
  if (id) { const range = document.createRange(); range.selectNodeContents(id);
    lines = new Set([...range.getClientRects()].map(r => Math.round(r.top))).size; }
  return {cells, spills, stubs, lines, id: id ? id.textContent : null, pill: pill ? lineCount(pill) : 0,
          amount: amount && amount.textContent.trim() ? lineCount(amount) : 0};
})"""


def realistic(base: str, app: Flask) -> None:
    """A day of a shop's traffic: Stripe payments, invoices and subscriptions with real-length
    ids, Adyen authorisations and captures, one failing refund, refused deliveries."""
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    now = int(time.time())
    for i in range(18):
        type_, kind = KINDS[i % len(KINDS)]
        obj_type = type_.rsplit(".", 1)[0].split(".")[-1] if kind != 4 else "subscription"
        obj = {
            "id": f"{'pi' if kind < 2 else 'ch' if kind == 2 else 'in' if kind == 3 else 'sub' if kind == 4 else 'cs'}"
            f"_3PqK8sLkdIwHu7ix{i:02d}aBcDeF",
            "object": obj_type,
        }
        if kind in (0, 1, 2):
            obj |= {"amount": 1990 + 250 * i, "currency": ("eur", "usd", "gbp", "jpy")[i % 4]}
        body = stripe_event(f"evt_3PqK8sLkdIwHu7ix{i:02d}gHjKlMnO", type_, now - 3600 + i, obj)
        for _ in range(1 + (i == 13) * 2):  # Stripe re-sent one of them twice
            assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=5).ok
    items = [
        adyen_item(psp="8816178914391238", reference="ORDER-2024-0042", value=12900),
        adyen_item(
            psp="8816178914391777",
            code="CAPTURE",
            original="8816178914391238",
            reference="ORDER-2024-0042",
            value=12900,
        ),
    ]
    for item in items:
        assert requests.post(f"{base}/webhooks/adyen", data=adyen_body(item), timeout=5).text == "[accepted]"
    body = stripe_event(
        "evt_3PqK8sLkdIwHu7ixRefundFail",
        "charge.refunded",
        now,
        {"id": "ch_3PqK8sLkdIwHu7ixRefund", "object": "charge", "amount": 4500, "currency": "eur"},
    )
    assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=5).ok
    for i in range(3):  # a rotated secret nobody told us about
        body = stripe_event(f"evt_forged_{i}")
        answer = requests.post(
            f"{base}/webhooks/stripe", data=body, timeout=5, headers=stripe_headers(body, secret="whsec_rotated")
        )
        assert answer.status_code == 400
    wait_until(lambda: status_of(base, "stripe", "evt_3PqK8sLkdIwHu7ixRefundFail") == "failed")
    wait_until(lambda: status_of(base, "adyen", "8816178914391777:CAPTURE:true") == "processed")
    wait_until(lambda: status_of(base, "stripe", "evt_3PqK8sLkdIwHu7ix17gHjKlMnO") == "processed")
    sample_handlers.FAIL_TYPES.clear()
    engine = app.extensions["webhooks"].engine
    with engine.begin() as conn:  # spread the morning's events over the day, as they came
        for i in range(0, 18, 2):
            conn.exec_driver_sql(
                "UPDATE events SET received_at = datetime(received_at, ?) WHERE event_id = ?",
                (f"-{i + 1} hours", f"evt_3PqK8sLkdIwHu7ix{i:02d}gHjKlMnO"),
            )
            conn.exec_driver_sql(
                "UPDATE attempts SET finished_at = datetime(finished_at, ?) WHERE event_id = ?",
                (f"-{i + 1} hours", f"evt_3PqK8sLkdIwHu7ix{i:02d}gHjKlMnO"),
            )


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] + a["w"] > b["x"] + 0.5
        and b["x"] + b["w"] > a["x"] + 0.5
        and a["y"] + a["h"] > b["y"] + 0.5
        and b["y"] + b["h"] > a["y"] + 0.5
    )


def test_events_table_reads_at_768_1024_and_1440_px(
    server: tuple[str, Flask],  # noqa: F811
    browser: Any,  # noqa: F811
    screenshots: Path,
) -> None:
    base, app = server
    realistic(base, app)
    context = browser.new_context(http_credentials={"username": "admin", "password": ADMIN_PASSWORD})
    page = context.new_page()
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert page.goto(f"{base}/admin/").status == 200
        page.wait_for_load_state("load")
        page.screenshot(path=str(screenshots / f"events-{width}.png"), full_page=True)
        scroll, inner = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
        assert scroll <= inner, (width, scroll, inner)  # nothing wider than the window
        measured = page.evaluate(MEASURE)
        assert len(measured) == 21
        for row in measured:
            cells = row["cells"]
            assert not [
                (i, j) for i in range(len(cells)) for j in range(i + 1, len(cells)) if overlaps(cells[i], cells[j])
            ], (width, row)
            assert row["spills"] == [], (width, row["id"], row["spills"])
            assert row["stubs"] == [], (width, row["id"], row["stubs"])
            assert 1 <= row["lines"] <= (2 if width < 1024 else 1), (width, row["id"], row["lines"])
            assert row["pill"] == 1 and row["amount"] <= 2, (width, row["id"], row)  # never "process / ed"
        assert "25.00 JPY" not in page.inner_text("table.events")  # yen have no minor unit
        if width == WIDTHS[0]:  # the duplicates' count is written within a second or so
            wait_until(lambda: page.reload() and "delivered 3×" in page.inner_text("table.events"))
            measured = page.evaluate(MEASURE)
            assert all(row["spills"] == [] and row["stubs"] == [] for row in measured)
            page.screenshot(path=str(screenshots / f"events-{width}.png"), full_page=True)
        link = page.locator("a.rejected-recent")
        assert "Rejected (24 h): 3" in link.inner_text()
    context.close()


def test_docs_screenshots_of_an_event_and_the_overview(
    server: tuple[str, Flask],  # noqa: F811
    browser: Any,  # noqa: F811
    screenshots: Path,
) -> None:
    base, app = server
    realistic(base, app)
    body = stripe_event(
        "evt_3PqK8sLkdIwHu7ixOlderOne",
        "payment_intent.processing",
        int(time.time()) - 7200,
        {"id": "pi_3PqK8sLkdIwHu7ix01aBcDeF", "object": "payment_intent", "amount": 2240, "currency": "usd"},
    )
    assert requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=5).ok
    wait_until(lambda: status_of(base, "stripe", "evt_3PqK8sLkdIwHu7ixOlderOne") == "processed")
    context = browser.new_context(
        http_credentials={"username": "admin", "password": ADMIN_PASSWORD}, viewport={"width": 1440, "height": 900}
    )
    page = context.new_page()
    assert page.goto(f"{base}/admin/events/stripe/evt_3PqK8sLkdIwHu7ixOlderOne").status == 200
    notice = page.locator("p.superseded")
    assert "A newer version of this payment_intent was applied" in notice.inner_text()
    page.screenshot(path=str(screenshots / "event.png"), full_page=True)
    notice.get_by_role("link").click()
    assert page.url.endswith("/admin/events/stripe/evt_3PqK8sLkdIwHu7ix01gHjKlMnO")
    page.click("header nav >> text=Overview")
    assert page.locator("section.endpoint").count() == 2 and page.locator("svg rect").count() >= 10
    assert page.locator("#oldest-pending").inner_text() == "none"
    page.screenshot(path=str(screenshots / "overview.png"), full_page=True)
    context.close()
