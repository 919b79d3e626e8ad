"""Every 4xx under ``/admin/api`` is JSON with a reason, never Flask's HTML page, never a 5xx; the
paging parameters read alike on every paged route."""

from __future__ import annotations

import re
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import admin_headers, drain, stripe_event, stripe_headers

HUGE = "99999999999999999999999"
# What a variable of a route could be sent instead of a sane value.
MALFORMED = ["abc", "-1", "0", "1.5", HUGE, "%00", "%C2%9B", "%ED%A0%80", "a%2Fb", "%20"]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
# Every value the README allows for a paging parameter, and some it does not.
PAGING = {
    "before": ["0", "00", "1", "", str(2**63 - 1), "0" * 30 + "7", "-1", "x", "²", HUGE],
    "limit": ["0", "1", "", "-5", "1000", "100000", "x", "1e3"],
    "cursor": ["", "x", "%00"],
    "counts_limit": ["0", "", "x", "5000"],
    "counts_after": ["", "zzz", "%C2%85"],
    "before_id": ["", "stripe/nope", "x"],
}


def api_rules(app: Flask) -> list[Any]:
    return sorted((r for r in app.url_map.iter_rules() if r.rule.startswith("/admin/api")), key=lambda r: r.rule)


def url_of(rule: Any, value: str) -> str:
    return re.sub(r"<[^>]+>", value, rule.rule)


def assert_json_error(response: Any, what: str) -> None:
    """Below 500; a 4xx is JSON with a string ``error`` (and no HTML anywhere in it)."""
    assert response.status_code < 500, (what, response.status_code, response.data[:200])
    if response.status_code >= 400:
        assert response.mimetype == "application/json", (what, response.status_code, response.data[:200])
        body = response.get_json()
        assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], (what, body)
        assert b"<" not in response.data, what


def seed(app: Flask, client: FlaskClient) -> None:
    body = stripe_event("evt_1")
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    bad = stripe_event("evt_2")
    client.post("/webhooks/stripe", data=bad, headers={**stripe_headers(bad), "Stripe-Signature": "t=1,v1=00"})
    drain(app)


def test_the_issues_url_answers_json_404(app: Flask) -> None:
    client = app.test_client()
    response = client.get("/admin/api/rejections/abc", headers=admin_headers())
    assert (response.status_code, response.mimetype, response.get_json()) == (
        404,
        "application/json",
        {"error": "not_found"},
    )
    wrong = client.delete("/admin/api/events", headers=admin_headers())
    assert (wrong.status_code, wrong.get_json()) == (405, {"error": "method_not_allowed"})
    assert "GET" in wrong.headers["Allow"]
    for url in ("/admin/api", "/admin/api/", "/admin/api/nope", "/admin/api/rejections/1/nope"):
        assert_json_error(client.get(url, headers=admin_headers()), url)
        assert client.get(url).status_code == 404, url
    # The pages and the rest of the app keep their own answers.
    assert client.get("/admin/nope", headers=admin_headers()).mimetype == "text/html"
    assert client.get("/admin/apix", headers=admin_headers()).mimetype == "text/html"


def test_a_body_over_the_limit_is_json_413(app: Flask) -> None:
    big = b'{"reason": "' + b"x" * (1024 * 1024) + b'"}'
    for url in ("/admin/api/events/replay", "/admin/api/events/stripe/evt_1/replay"):
        response = app.test_client().post(url, data=big, content_type="application/json", headers=admin_headers())
        assert (response.status_code, response.get_json()) == (413, {"error": "payload_too_large"}), url


def test_sweep_of_every_route_with_malformed_ids_wrong_methods_and_odd_paging(any_app: Flask) -> None:
    client = any_app.test_client()
    seed(any_app, client)
    rules = api_rules(any_app)
    assert len(rules) >= 12  # the walk sees the routes (events, objects, rejections, replays, gaps, …)
    seen: set[int] = set()
    for rule in rules:
        for value in MALFORMED if rule.arguments else [""]:
            url = url_of(rule, value)
            for method in METHODS:
                for headers in (admin_headers(), {}):
                    response = client.open(url, method=method, headers=headers, json={} if method != "GET" else None)
                    assert_json_error(response, f"{method} {url}")
                    seen.add(response.status_code)
        if "GET" in rule.methods and not rule.arguments:
            for name, choices in PAGING.items():
                for choice in choices:
                    url = f"{rule.rule}?{name}={choice}"
                    assert_json_error(client.get(url, headers=admin_headers()), url)
    assert {401, 404, 405} <= seen


def test_paging_values_the_readme_allows_are_accepted_alike(any_app: Flask) -> None:
    client = any_app.test_client()
    seed(any_app, client)
    for route in ("/admin/api/replays", "/admin/api/rejections"):
        for before in ("0", "00", "", "1", str(2**63 - 1)):
            response = client.get(f"{route}?before={before}", headers=admin_headers())
            assert response.status_code == 200, (route, before, response.get_json())
        for before in ("-1", "²", str(2**63), HUGE):
            response = client.get(f"{route}?before={before}", headers=admin_headers())
            assert (response.status_code, response.get_json()) == (400, {"error": "bad_before"}), (route, before)
    everything = client.get("/admin/api/rejections?before=" + str(2**63 - 1), headers=admin_headers()).get_json()
    assert len(everything["rejections"]) == 1
    assert client.get("/admin/api/rejections?before=0", headers=admin_headers()).get_json()["rejections"] == []
    for route in ("/admin/api/events", "/admin/api/rejections"):
        for limit in ("", "0", "-5", "100000"):
            assert client.get(f"{route}?limit={limit}", headers=admin_headers()).status_code == 200, (route, limit)
        response = client.get(f"{route}?limit=x", headers=admin_headers())
        assert (response.status_code, response.get_json()) == (400, {"error": "bad_limit"}), route
    for counts_limit in ("", "0"):
        url = f"/admin/api/rejections?counts_limit={counts_limit}"
        assert client.get(url, headers=admin_headers()).status_code == 200, url
    assert client.get("/admin/audit?before=0", headers=admin_headers()).status_code == 200
