"""Hostile console input: every query parameter of every page and API route answers a 400 with a
reason (never a 5xx) on both databases; event ids of any shape link to themselves; the CSRF
origin rule behind a TLS-terminating proxy."""

from __future__ import annotations

import base64
import html
import json
import re
from datetime import timedelta, timezone
from functools import partial
from typing import Any
from urllib.parse import quote, urlencode, urljoin

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import admin_headers, base_config, make_app, rows, stripe_event, stripe_headers

# The issue's inputs: a digit str.isdigit() accepts but int() refuses, an id beyond BIGINT, and
# times whose UTC equivalent falls outside years 1-9999.
HUGE = "99999999999999999999999"
TIMES = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "9999-12-31T23:59:59.999999-00:01"]


def cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


def deliver(client: FlaskClient, event_id: str) -> None:
    body = stripe_event(event_id, obj={"id": "pi_1", "object": "payment_intent"})
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


@pytest.fixture(params=["sqlite_url", "pg_url"])
def db_app(request: pytest.FixtureRequest) -> Flask:
    """The app on SQLite and on PostgreSQL (the embedded queue: these tests only read and mark)."""
    return make_app(base_config(request.getfixturevalue(request.param)))


API_CASES = (
    [
        ("/admin/api/replays?before=²", "bad_before"),
        ("/admin/api/replays?before=" + HUGE, "bad_before"),
        ("/admin/api/replays?before=" + str(2**63), "bad_before"),
        ("/admin/api/events?cursor=" + quote("²"), "bad_cursor"),
        ("/admin/api/events?cursor=" + cursor(5, "stripe", "evt_1"), "bad_cursor"),
        ("/admin/api/events?cursor=" + cursor("2024-01-01T00:00:00Z", "stripe", "evt\x00"), "bad_cursor"),
        ("/admin/api/events?cursor=" + base64.urlsafe_b64encode(b"[" * 5000).decode(), "bad_cursor"),
        ("/admin/api/events?q=%00", "bad_text"),
        ("/admin/api/rejections?endpoint=%00", "bad_text"),
        ("/admin/api/rejections?before=²", "bad_before"),
    ]
    + [
        (f"/admin/api/{route}?{name}={quote(value)}", "bad_time")
        for value in TIMES
        for route in ("events", "counts")
        for name in ("since", "until")
    ]
    + [(f"/admin/api/events?cursor={cursor(value, 'stripe', 'evt_1')}", "bad_cursor") for value in TIMES]
)

PAGE_CASES = (
    [
        ("/admin/audit?before=²", "bad_before"),
        ("/admin/audit?before=" + HUGE, "bad_before"),
        ("/admin/rejections?before=²", "bad_before"),
        ("/admin/rejections?before=" + HUGE, "bad_before"),
        ("/admin/rejections?endpoint=%00", "bad_text"),
        ("/admin/?q=%00", "bad_text"),
    ]
    + [
        (f"{page}?{name}={quote(value)}", "bad_time")
        for value in TIMES
        for page in ("/admin/", "/admin/dead", "/admin/replay")
        for name in ("since", "until")
    ]
    + [(f"/admin/?cursor={cursor(value, 'stripe', 'evt_1')}", "bad_cursor") for value in TIMES]
)


def test_the_issues_inputs_answer_400_with_a_reason(db_app: Flask) -> None:
    client = db_app.test_client()
    deliver(client, "evt_1")
    for url, reason in API_CASES:
        response = client.get(url, headers=admin_headers())
        assert (response.status_code, response.get_json()) == (400, {"error": reason}), url
    for url, reason in PAGE_CASES:
        response = client.get(url, headers=admin_headers())
        page = response.get_data(as_text=True)
        assert response.status_code == 400 and response.mimetype == "text/html", url
        assert f"({reason})" in page and "<h1>Bad request</h1>" in page, url
    assert "years 1 to 9999" in client.get("/admin/?since=" + quote(TIMES[0]), headers=admin_headers()).get_data(
        as_text=True
    )
    # URL keys beyond what a table can hold: not found, not a driver error.
    for url in (
        "/admin/rejections/" + HUGE,
        "/admin/api/rejections/" + HUGE,
        "/admin/api/events/stripe/a%00b",
        "/admin/events/stripe/a%00b",
        "/admin/api/objects/stripe/payment_intent/pi%00",
    ):
        assert client.get(url, headers=admin_headers()).status_code == 404, url


def test_good_values_next_to_the_bad_ones_still_work(db_app: Flask) -> None:
    client = db_app.test_client()
    for i in range(3):
        deliver(client, f"evt_{i}")
    assert client.get("/admin/api/replays?before=" + str(2**63 - 1), headers=admin_headers()).status_code == 200
    edge = client.get(
        "/admin/api/events?since=0001-01-01T00:00:00Z&until=9999-12-31T23:59:59-00:00", headers=admin_headers()
    )
    assert [e["event_id"] for e in edge.get_json()["events"]] == ["evt_2", "evt_1", "evt_0"]
    first = client.get("/admin/api/events?limit=1", headers=admin_headers()).get_json()
    second = client.get(f"/admin/api/events?limit=1&cursor={first['next_cursor']}", headers=admin_headers())
    assert [e["event_id"] for e in second.get_json()["events"]] == ["evt_1"]


def test_a_reason_no_database_can_store_is_refused_not_a_500(db_app: Flask) -> None:
    client = db_app.test_client()
    deliver(client, "evt_1")
    for body in ({"reason": "x\x00y"}, {"reason": "\ud800"}):
        answer = client.post("/admin/api/events/stripe/evt_1/replay", json=body, headers=admin_headers())
        assert (answer.status_code, answer.get_json()) == (400, {"error": "bad_reason"})
        bulk = client.post("/admin/api/events/replay", json={"endpoint": "stripe"} | body, headers=admin_headers())
        assert (bulk.status_code, bulk.get_json()) == (400, {"error": "bad_reason"})
    for body in ({"q": "\x00"}, {"type": "\ud800"}, {"since": TIMES[0]}, {"endpoint": ["x"], "since": 7}):
        answer = client.post("/admin/api/events/replay", json=body | {"reason": "r"}, headers=admin_headers())
        assert answer.status_code == 400 and answer.get_json()["error"].startswith("bad_"), body
    assert rows(db_app, "SELECT count(*) FROM replays") == [(0,)]


# -- a property: no parameter value makes any route answer 5xx, on either database --------------

NASTY = [
    "²",
    "٣",
    "¹²",
    HUGE,
    str(2**63),
    str(2**63 - 1),
    "-1",
    "0",
    "1e5",
    " 7 ",
    "\x00",
    "a\x00",
    "\ud800",
    "",
    " ",
    "%",
    "Z",
    "2024-02-30",
    "0001-01-01",
    "null",
    "[]",
    *TIMES,
]
offsets = st.integers(-14 * 60 + 1, 14 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
times = st.datetimes(timezones=st.one_of(st.none(), offsets)).map(lambda d: d.isoformat())
values = st.one_of(st.sampled_from(NASTY), st.text(max_size=20), times, st.integers(-(2**70), 2**70).map(str))
cursors = st.tuples(st.one_of(values, st.integers(), st.none()), values, values).map(lambda t: cursor(*t))
PARAMS = [
    "endpoint",
    "provider",
    "status",
    "type",
    "since",
    "until",
    "q",
    "limit",
    "cursor",
    "before",
    "reason",
    "id",
    "format",
    "refresh",
    "done",
    "dry_run",
    "destination",
]
params = st.dictionaries(st.sampled_from(PARAMS), st.one_of(values, cursors), min_size=1, max_size=4)
GETS = [
    "/admin/",
    "/admin/dead",
    "/admin/replay",
    "/admin/audit",
    "/admin/rejections",
    "/admin/events/stripe",
    "/admin/api/events",
    "/admin/api/counts",
    "/admin/api/replays",
    "/admin/api/rejections",
    "/admin/api/events/stripe",
    "/admin/destinations",
    "/admin/api/destinations",
]
json_values = st.one_of(values, st.integers(-(2**70), 2**70), st.none(), st.booleans(), st.lists(values, max_size=2))
bodies = st.dictionaries(st.sampled_from(PARAMS), json_values, max_size=5)
surrogate_quote = partial(quote, safe="", errors="surrogatepass")


def check(response: Any, url: str) -> None:
    assert response.status_code < 500, (url, response.status_code, response.data[:300])
    if response.status_code == 400 and "/admin/api/" in url:
        assert isinstance(response.get_json()["error"], str), url


@pytest.mark.slow
def test_no_parameter_value_makes_any_route_answer_5xx(db_app: Flask) -> None:
    client = db_app.test_client()
    deliver(client, "evt_1")
    page = client.get("/admin/events/stripe/evt_1", headers=admin_headers()).get_data(as_text=True)
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match
    token = match.group(1)

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(route=st.sampled_from(GETS), query=params, path=values, body=bodies, form=params)
    def run(route: str, query: dict[str, str], path: str, body: dict[str, Any], form: dict[str, str]) -> None:
        url = route + "?" + urlencode(query, quote_via=quote, safe="", errors="surrogatepass")
        check(client.get(url, headers=admin_headers()), url)
        for url in (
            f"/admin/events/stripe/{surrogate_quote(path)}",
            f"/admin/api/events/stripe/{surrogate_quote(path)}",
            f"/admin/rejections/{surrogate_quote(path)}",
        ):
            check(client.get(url, headers=admin_headers()), url)
        raw = json.dumps(body).encode()  # lone surrogates travel as JSON escapes, as a script could send them
        for url in (
            "/admin/api/events/replay",
            "/admin/api/events/stripe/evt_1/replay",
            f"/admin/api/destinations/{surrogate_quote(path)}/pause",
        ):
            check(client.post(url, data=raw, content_type="application/json", headers=admin_headers()), url)
        encoded = urlencode(form | {"csrf_token": token}, quote_via=quote, safe="", errors="surrogatepass")
        for url in (
            "/admin/replay",
            "/admin/events/stripe/evt_1/replay",
            f"/admin/destinations/{surrogate_quote(path)}/pause",
        ):
            response = client.post(
                url, data=encoded, content_type="application/x-www-form-urlencoded", headers=admin_headers()
            )
            check(response, url)
            assert response.status_code != 403, "the CSRF token should have been accepted"

    run()


# -- event ids of any shape ----------------------------------------------------------------------

HOSTILE_IDS = [
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
    "trail/",
    "%2e%2e",
    ".%2e",
    "back\\slash",
    "é/ü",
    "replay",
    "x/replay",
]


def links(page: str) -> dict[str, str]:
    """Event id → href of every event link in a page."""
    found = re.findall(r'<a href="(/admin/events/[^"]+)"[^>]*>([^<]*)</a>', page)
    return {html.unescape(text): html.unescape(href) for href, text in found}


def shown_id(page: str) -> str | None:
    match = re.search(r'<dt>Event id</dt><dd class="mono">([^<]*)</dd>', page)
    return html.unescape(match.group(1)) if match else None


def test_every_event_link_opens_its_own_event(client: FlaskClient) -> None:
    """``urljoin`` resolves ``.``/``..`` segments as a browser does (the browser test clicks them)."""
    for event_id in ["evt_legit", *HOSTILE_IDS]:
        deliver(client, event_id)
    hrefs = links(client.get("/admin/?limit=100", headers=admin_headers()).get_data(as_text=True))
    assert set(hrefs) == {"evt_legit", *HOSTILE_IDS}
    for event_id, href in hrefs.items():
        resolved = urljoin("http://console.example/admin/", href).removeprefix("http://console.example")
        response = client.get(resolved, headers=admin_headers())
        assert response.status_code == 200 and shown_id(response.get_data(as_text=True)) == event_id, (event_id, href)
        raw = re.search(r'<a href="([^"]+)">download the exact bytes', response.get_data(as_text=True))
        assert (
            raw and json.loads(client.get(html.unescape(raw.group(1)), headers=admin_headers()).data)["id"] == event_id
        )


def test_replay_form_of_an_odd_id_replays_that_event(app: Flask, client: FlaskClient) -> None:
    for event_id in ["evt_legit", "x/../../stripe/evt_legit", ".."]:
        deliver(client, event_id)
    for event_id in ["x/../../stripe/evt_legit", ".."]:
        page = client.get("/admin/events/stripe?id=" + quote(event_id, safe=""), headers=admin_headers())
        html_text = page.get_data(as_text=True)
        action = html.unescape(re.search(r'<form method="post" action="([^"]+)"', html_text).group(1))  # type: ignore[union-attr]
        token = re.search(r'name="csrf_token" value="([^"]+)"', html_text).group(1)  # type: ignore[union-attr]
        done = client.post(
            urljoin("http://h/admin/", action).removeprefix("http://h"),
            data={"reason": "odd id", "csrf_token": token},
            headers=admin_headers(),
        )
        assert done.status_code == 303
        landed = client.get(
            urljoin("http://h/", done.headers["Location"]).removeprefix("http://h"), headers=admin_headers()
        )
        assert shown_id(landed.get_data(as_text=True)) == event_id
    audited = rows(app, "SELECT event_ids FROM replays ORDER BY id")
    assert [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in audited] == [
        [["stripe", "x/../../stripe/evt_legit"]],
        [["stripe", ".."]],
    ]


def test_api_routes_events_exactly_by_path_or_by_id_parameter(client: FlaskClient) -> None:
    for event_id in ["a/b", "a//b", "/lead", ".", ".."]:
        deliver(client, event_id)

    def event_id_at(url: str) -> Any:
        response = client.get(url, headers=admin_headers())
        return response.get_json().get("event_id") if response.status_code == 200 else response.status_code

    assert event_id_at("/admin/api/events/stripe/a%2F%2Fb") == "a//b"  # not merged into a/b
    assert (
        shown_id(client.get("/admin/events/stripe/a%2F%2Fb", headers=admin_headers()).get_data(as_text=True)) == "a//b"
    )
    for event_id in ["a/b", "a//b", "/lead", ".", ".."]:
        assert event_id_at("/admin/api/events/stripe?id=" + quote(event_id, safe="")) == event_id
    assert event_id_at("/admin/api/events/stripe?id=nope") == 404
    assert event_id_at("/admin/api/events/stripe") == 400  # id_required
    replayed = client.post("/admin/api/events/stripe/replay?id=%2Flead", json={"reason": "x"}, headers=admin_headers())
    assert replayed.status_code == 202 and replayed.get_json()["event_id"] == "/lead"


# -- CSRF behind a TLS-terminating proxy ------------------------------------------------------------

PROXIED = {"X-Forwarded-Proto": "https", "Origin": "https://console.example", "Sec-Fetch-Site": "same-origin"}


def test_browser_posts_behind_a_tls_proxy_pass_both_guards(app: Flask, client: FlaskClient) -> None:
    deliver(client, "evt_1")
    host = {"Host": "console.example"}
    answer = client.post(
        "/admin/api/events/stripe/evt_1/replay", json={"reason": "proxied"}, headers=admin_headers() | host | PROXIED
    )
    assert answer.status_code == 202
    page = client.get("/admin/events/stripe/evt_1", headers=admin_headers() | host | {"X-Forwarded-Proto": "https"})
    assert "Secure" in page.headers["Set-Cookie"]  # the nonce cookie is marked Secure behind the proxy
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True)).group(1)  # type: ignore[union-attr]
    form = client.post(
        "/admin/events/stripe/evt_1/replay",
        data={"reason": "proxied form", "csrf_token": token},
        headers=admin_headers() | host | PROXIED,
    )
    assert form.status_code == 303
    assert rows(app, "SELECT reason FROM replays ORDER BY id") == [("proxied",), ("proxied form",)]


@pytest.mark.parametrize(
    "headers",
    [
        PROXIED | {"Origin": "https://evil.example"},  # another site, even behind the proxy
        PROXIED | {"Origin": "http://console.example"},  # our host over plain http, when the page is https
        {"Origin": "https://console.example"},  # https origin, but no proxy said the request was https
        PROXIED | {"Origin": "https://console.example:8443"},  # another port
        PROXIED | {"Origin": "null"},
        PROXIED | {"Sec-Fetch-Site": "cross-site"},
        PROXIED | {"Sec-Fetch-Site": "same-site", "Origin": "https://other.console.example"},
    ],
)
def test_foreign_origins_are_refused_by_both_guards(app: Flask, client: FlaskClient, headers: dict[str, str]) -> None:
    deliver(client, "evt_1")
    host = {"Host": "console.example"}
    answer = client.post(
        "/admin/api/events/stripe/evt_1/replay", json={"reason": "x"}, headers=admin_headers() | host | headers
    )
    assert (answer.status_code, answer.get_json()) == (403, {"error": "cross_site_request"})
    page = client.get("/admin/events/stripe/evt_1", headers=admin_headers() | host)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True)).group(1)  # type: ignore[union-attr]
    form = client.post(
        "/admin/events/stripe/evt_1/replay",
        data={"reason": "x", "csrf_token": token},
        headers=admin_headers() | host | headers,
    )
    assert form.status_code == 403 and "CSRF" in form.get_data(as_text=True)
    assert rows(app, "SELECT count(*) FROM replays") == [(0,)]


def test_same_origin_without_a_proxy_and_default_ports_pass(client: FlaskClient) -> None:
    deliver(client, "evt_1")
    for origin, host in [
        ("http://console.example", "console.example"),
        ("http://console.example", "console.example:80"),
        ("http://Console.Example:80", "console.example"),
    ]:
        answer = client.post(
            "/admin/api/events/stripe/evt_1/replay",
            json={"reason": "x"},
            headers=admin_headers() | {"Host": host, "Origin": origin},
        )
        assert answer.status_code == 202, (origin, host)
