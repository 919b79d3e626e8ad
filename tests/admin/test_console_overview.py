"""The console at a glance: recent rejections, objects and amounts on the events page, a note on
an event whose object moved on, and the overview page's plots (SQLite and PostgreSQL)."""

from __future__ import annotations

import re
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests import sample_handlers
from tests.conftest import (
    admin_headers,
    adyen_body,
    adyen_item,
    drain,
    rows,
    runtime,
    stripe_event,
    stripe_headers,
    wait_until,
)
from webhooks.admin import amounts


def deliver(
    client: FlaskClient, event_id: str, type_: str = "payment_intent.succeeded", created: int = 1700000000, **obj: Any
) -> None:
    body = stripe_event(event_id, type_, created, {"id": "pi_1", "object": "payment_intent", **obj})
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def forge(client: FlaskClient) -> None:
    """A delivery whose signature is wrong (signed with another secret): refused and kept."""
    body = stripe_event("evt_forged")
    answer = client.post("/webhooks/stripe", data=body, headers=stripe_headers(body, secret="whsec_wrong"))
    assert answer.status_code == 400


def page(client: FlaskClient, url: str) -> str:
    answer = client.get(url, headers=admin_headers())
    assert answer.status_code == 200, url
    return answer.get_data(as_text=True)


def cell(html: str, event_id: str, name: str) -> str:
    """The text of one cell (``c-<name>``) of the events row linking ``event_id``."""
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", html, re.S) if f">{event_id}</a>" in r)
    found = re.search(rf'<td class="[^"]*c-{name}[^"]*"[^>]*>(.*?)</td>', row, re.S)
    assert found, (name, row)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(1))).strip()


def test_events_page_shows_objects_amounts_and_recent_rejections(any_app: Flask) -> None:
    client = any_app.test_client()
    before = page(client, "/admin/")
    assert re.search(r'href="/admin/rejections"[^>]*>Rejected \(24 h\): <b>0</b>', before)
    deliver(client, "evt_pay", amount=2599, currency="eur")
    deliver(client, "evt_yen", amount=500, currency="jpy")
    deliver(client, "evt_none", type_="customer.updated")  # no amount sent
    assert (
        client.post("/webhooks/adyen", data=adyen_body(adyen_item(psp="8816178914391238", value=1130))).text
        == "[accepted]"
    )
    items = [adyen_item(psp="8816178914391300", value=4200), adyen_item(psp="8816178914391301", value=7)]
    assert client.post("/webhooks/adyen", data=adyen_body(*items)).text == "[accepted]"  # a batch: items kept apart
    forge(client)
    forge(client)
    drain(any_app)  # processing names the object's type
    with runtime(any_app).engine.begin() as conn:  # one of them older than a day: not recent
        conn.exec_driver_sql(
            "UPDATE rejections SET received_at = received_at - interval '2 days' WHERE id = "
            "(SELECT min(id) FROM rejections)"
            if conn.dialect.name == "postgresql"
            else "UPDATE rejections SET received_at = datetime(received_at, '-2 days') WHERE id = "
            "(SELECT min(id) FROM rejections)"
        )
    html = page(client, "/admin/")
    assert re.search(r'href="/admin/rejections"[^>]*>Rejected \(24 h\): <b>1</b>', html)
    assert cell(html, "evt_pay", "amount") == "25.99 EUR"
    assert cell(html, "evt_yen", "amount") == "500 JPY"
    assert cell(html, "evt_none", "amount") == ""
    assert cell(html, "evt_pay", "object") == "payment_intent pi_1"
    assert cell(html, "8816178914391238:AUTHORISATION:true", "amount") == "11.30 EUR"
    assert cell(html, "8816178914391300:AUTHORISATION:true", "amount") == "42.00 EUR"
    assert cell(html, "8816178914391301:AUTHORISATION:true", "amount") == "0.07 EUR"
    assert cell(html, "8816178914391301:AUTHORISATION:true", "object") == "payment 8816178914391301"


def test_amounts_use_each_currencys_minor_unit() -> None:
    assert [amounts.shown(123456, "usd"), amounts.shown(1234, "KWD"), amounts.shown(99, "jpy")] == [
        "1,234.56 USD",
        "1.234 KWD",
        "99 JPY",
    ]


def test_an_older_event_names_the_newer_version_applied(app: Flask, client: FlaskClient) -> None:
    for event_id, created in (("evt_new", 1700000100), ("evt_old", 1700000000)):  # reversed, as Stripe may
        deliver(client, event_id, created=created)
    deliver(client, "evt_newest_first", created=1700000200)
    drain(app)
    old = page(client, "/admin/events/stripe/evt_old")
    notice = re.search(r'<p class="notice warn superseded">(.*?)</p>', old, re.S)
    assert notice and 'href="/admin/events/stripe/evt_newest_first"' in notice.group(1)
    assert "A newer version of this payment_intent was applied" in notice.group(1)
    assert "notice warn superseded" in page(client, "/admin/events/stripe/evt_new")
    assert "notice warn superseded" not in page(client, "/admin/events/stripe/evt_newest_first")


def totals(html: str, endpoint: str) -> dict[tuple[str, str], int]:
    """(window, series) → the total the overview prints for ``endpoint``."""
    section = re.search(rf'<section class="endpoint" id="endpoint-{endpoint}">(.*?)</section>', html, re.S)
    assert section, endpoint
    found = {}
    for figure in re.findall(r'<figure class="plot" data-window="(\w+)"(.*?)</figure>', section.group(1), re.S):
        for series, n in re.findall(r'<span class="total" data-series="(\w+)">.*?</span> ([\d,]+)', figure[1], re.S):
            found[figure[0], series] = int(n.replace(",", ""))
    return found


def test_overview_plots_each_endpoints_hour_and_day(any_app: Flask) -> None:
    client = any_app.test_client()
    assert 'href="/admin/overview"' in page(client, "/admin/")
    empty = page(client, "/admin/overview")
    assert totals(empty, "stripe")["hour", "received"] == 0 and 'id="oldest-pending">none<' in empty
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    for i in range(3):
        deliver(client, f"evt_ok{i}", created=1700000000 + i)
    body = stripe_event("evt_bad", "charge.refunded", obj={"id": "ch_1", "object": "charge"})
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    deliver(client, "evt_ok0")  # a duplicate: one event still
    forge(client)
    drain(any_app)
    sample_handlers.FAIL_TYPES.clear()
    deliver(client, "evt_waiting")  # not processed yet
    shift = (
        "UPDATE events SET received_at = received_at - interval '3 hours' WHERE event_id = 'evt_ok2'"
        if runtime(any_app).engine.dialect.name == "postgresql"
        else "UPDATE events SET received_at = datetime(received_at, '-3 hours') WHERE event_id = 'evt_ok2'"
    )
    with runtime(any_app).engine.begin() as conn:
        conn.exec_driver_sql(shift)  # three hours ago: in the day, not in the hour
    html = page(client, "/admin/overview")
    stripe = totals(html, "stripe")
    errors = rows(any_app, "SELECT count(*) FROM attempts WHERE status = 'error'")[0][0]
    assert errors >= 1
    assert stripe["hour", "received"] == 4 and stripe["day", "received"] == 5
    assert stripe["hour", "rejected"] == stripe["day", "rejected"] == 1
    assert stripe["day", "processed"] == 3 and stripe["day", "error"] == errors
    assert totals(html, "adyen")["day", "received"] == 0
    assert html.count("<rect ") >= 6 and "<script" not in html
    assert re.search(r'id="oldest-pending">\d+ s<', html)
    with runtime(any_app).engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE events SET status_at = status_at - interval '3 hours' WHERE event_id = 'evt_waiting'"
            if conn.dialect.name == "postgresql"
            else "UPDATE events SET status_at = datetime(status_at, '-3 hours') WHERE event_id = 'evt_waiting'"
        )
    assert 'id="oldest-pending">3 h<' in page(client, "/admin/overview")


def status_text(html: str, event_id: str) -> str:
    return cell(html, event_id, "status")


def test_each_event_shows_how_many_times_it_was_delivered(any_app: Flask) -> None:
    client = any_app.test_client()
    body = stripe_event("evt_dup", obj={"id": "pi_dup", "object": "payment_intent"})
    for _ in range(3):  # Stripe's retries of one event, each signed afresh
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    deliver(client, "evt_once")
    single = adyen_body(adyen_item(psp="8816178914391301"))  # Adyen's usual delivery: one item
    for _ in range(2):
        assert client.post("/webhooks/adyen", data=single).text == "[accepted]"
    drain(any_app)

    # Counts are written together at most a second later (webhooks.receiver.duplicates).
    def counted() -> str | None:
        html = page(client, "/admin/")
        return html if "delivered 3×" in status_text(html, "evt_dup") else None

    html = wait_until(counted)
    assert "delivered" not in status_text(html, "evt_once")
    assert "delivered 2×" in status_text(html, "8816178914391301:AUTHORISATION:true")
    detail = page(client, "/admin/events/stripe/evt_dup")
    assert re.search(r'<dd class="deliveries">3 <span class="quiet">\(the first stored, 2 duplicate', detail)
    assert rows(any_app, "SELECT count(*) FROM test_handler_calls WHERE event_id = 'evt_dup'") == [(1,)]


def test_concurrent_duplicates_are_each_counted_once(any_app: Flask) -> None:
    """Deliveries of one event racing through one group-commit batch (or several): one row,
    one job, and every delivery counted."""
    import threading

    body = stripe_event("evt_race", obj={"id": "pi_race", "object": "payment_intent"})
    start = threading.Barrier(8)
    answers: list[int] = []

    def send() -> None:
        client = any_app.test_client()
        start.wait()
        answers.append(client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * 8
    drain(any_app)
    wait_until(lambda: rows(any_app, "SELECT count FROM duplicates WHERE event_id = 'evt_race'") == [(7,)])
    assert rows(any_app, "SELECT count(*) FROM test_handler_calls WHERE event_id = 'evt_race'") == [(1,)]
