"""The Endpoints and Destinations pages at 1 280 px in a real Chromium (the seams issue, finding 8:
headers and the state pill broke mid-word there): no header and no state pill is cut inside a
word, and nothing is wider than the window; a lapsed secret is marked expired and an endpoint with
no live secret says so."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from flask import Flask

from tests.admin.test_console_browser import browser  # noqa: F401  (fixture)
from tests.admin.test_runtime_config import DEST_SECRET, KEYS, SECRET
from tests.conftest import ADMIN_PASSWORD, ADYEN_KEY, base_config, free_port, make_app, wait_until
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.slow
WIDTH = 1280
# Each header and state pill: its words, and the lines its text took (more lines than words: a word was cut).
MEASURE = """() => [...document.querySelectorAll('thead th, span.status')].filter(e => e.innerText.trim()).map(e => {
  const range = document.createRange(); range.selectNodeContents(e);
  const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
  return {text: e.innerText.trim(), words: e.innerText.trim().split(/\\s+/).length, lines: tops.size};
})"""


@pytest.fixture
def crowded(sqlite_url: str) -> Iterator[str]:
    """The app on 127.0.0.1 with long names, labels and URLs in every column."""
    from werkzeug.serving import make_server

    long = "https://orders.internal.example.com/webhooks/receive/" + "path-segment/" * 4
    dests = {f"orders-{n}-downstream": {"url": long + str(n), "secrets": [DEST_SECRET]} for n in range(3)}
    app: Flask = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS, DESTINATIONS=dests))
    httpd = make_server("127.0.0.1", free_port(), app, threaded=True)
    serve_in_thread(httpd)
    base = f"http://127.0.0.1:{httpd.server_port}"
    auth = ("admin", ADMIN_PASSWORD)
    try:
        adyen = {"name": "adyen-live", "provider": "adyen", "secrets": [ADYEN_KEY], "basic_auth": "user:pass-word"}
        assert requests.post(f"{base}/admin/api/endpoints", json=adyen, auth=auth, timeout=10).status_code == 201
        for n in range(3):
            table = {"name": f"merchant-account-{n}-eu", "provider": "stripe", "secrets": [SECRET + str(n)]}
            table["label"] = "a rather long label for merchant account number " + str(n)
            assert requests.post(f"{base}/admin/api/endpoints", json=table, auth=auth, timeout=10).status_code == 201
        lapse = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
        added = requests.post(
            f"{base}/admin/api/endpoints/merchant-account-0-eu/secrets",
            json={"value": SECRET + "-second", "expires_at": lapse},
            auth=auth,
            timeout=10,
        )
        assert added.status_code == 201
        listed = requests.get(f"{base}/admin/api/endpoints", auth=auth, timeout=10).json()["endpoints"]
        [first] = [s["id"] for e in listed if e["name"] == "merchant-account-0-eu" for s in e["secrets"]][:1]
        expire = f"{base}/admin/api/endpoints/merchant-account-0-eu/secrets/{first}/expire"
        assert requests.post(expire, json={}, auth=auth, timeout=10).status_code == 200
        wait_until(lambda: datetime.now(UTC).isoformat() > lapse, timeout=30)
        yield base
    finally:
        httpd.shutdown()


def test_headers_and_pills_never_break_inside_a_word_at_1280_px(crowded: str, browser: Any) -> None:  # noqa: F811
    context = browser.new_context(http_credentials={"username": "admin", "password": ADMIN_PASSWORD})
    page = context.new_page()
    page.set_viewport_size({"width": WIDTH, "height": 900})
    for path in ("/admin/endpoints", "/admin/destinations"):
        assert page.goto(crowded + path).status == 200
        page.wait_for_load_state("load")
        cut = [m for m in page.evaluate(MEASURE) if m["lines"] > m["words"]]
        assert cut == [], (path, cut)
        scroll, inner = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
        assert scroll <= inner, (path, scroll, inner)
    page.goto(crowded + "/admin/endpoints")
    row = page.locator("tr", has_text="merchant-account-0-eu").inner_text()
    assert "expired" in row and "no live secret" in row, row
    adyen = page.locator("tr", has_text="adyen-live").inner_text()
    assert "basic_auth fp_" in adyen and "pass-word" not in page.content(), adyen  # the credential, as a fingerprint
    context.close()
