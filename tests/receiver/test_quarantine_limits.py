"""The quarantine under hostile clients: a forged basic-auth mark, invented endpoint names, oversized
requests, junk that would evict genuine rejections, and signatures that must not be shown."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import uuid
from typing import Any

import pytest
from flask import Flask

from tests.conftest import (
    PAYLOADS,
    admin_headers,
    adyen_body,
    adyen_item,
    base_config,
    make_app,
    rows,
    stripe_event,
    stripe_headers,
)
from tests.support.catalogue import HOST, SENT, all_endpoints, genuine
from webhooks import providers
from webhooks.receiver import quarantine

SIZE = "length(body) + length(url) + length(CAST(headers AS TEXT))"  # what the byte budget counts


@pytest.fixture(params=["sqlite", "postgres"])
def config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A base configuration on the embedded default and on PostgreSQL + Redis."""
    if request.param == "sqlite":
        return base_config(request.getfixturevalue("sqlite_url"))
    return base_config(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"))


def api(app: Flask, path: str) -> Any:
    response = app.test_client().get(f"/admin/api/rejections{path}", headers=admin_headers())
    assert response.status_code == 200, response.get_data()
    return response


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


@pytest.mark.parametrize("mark", ["X-Webhooks-Authorization-Mark", "x-webhooks-authorization-mark"])
def test_a_client_sent_authorization_mark_never_passes_basic_auth(config: dict[str, Any], mark: str) -> None:
    config["ENDPOINTS"]["adyen"]["basic_auth"] = "user:pa55word"
    app = make_app(config)
    # The attack: a valid HMAC, wrong basic auth, and the mark older versions trusted on re-verify.
    response = app.test_client().post(
        "/webhooks/adyen",
        data=adyen_body(adyen_item("PSPATTACK")),
        headers={"Authorization": basic("user:guess"), mark: "verified"},
    )
    assert (response.status_code, response.get_json()) == (401, {"error": "bad_basic_auth"})
    (rejection,) = api(app, "").get_json()["rejections"]
    result = app.test_client().post(
        f"/admin/api/rejections/{rejection['id']}/reverify", json={}, headers=admin_headers()
    )
    assert (result.status_code, result.get_json().get("error")) == (422, "bad_basic_auth")
    assert rows(app, "SELECT count(*) FROM events") == [(0,)]
    assert rows(app, "SELECT basic_auth_ok FROM rejections") == [(False,)]
    stored = rows(app, "SELECT headers FROM rejections")[0][0]
    stored = stored if isinstance(stored, dict) else json.loads(stored)
    assert not [k for k in stored if k.lower() == mark.lower()]  # dropped before storing


def test_right_basic_auth_is_kept_as_a_fact_in_its_column(config: dict[str, Any]) -> None:
    config["ENDPOINTS"]["adyen"]["basic_auth"] = "user:pa55word"
    app = make_app(config)
    app.test_client().post(
        "/webhooks/adyen",
        data=adyen_body(adyen_item("PSPOK", key="AB" * 32)),
        headers={"Authorization": basic("user:pa55word")},
    )
    assert rows(app, "SELECT reason, basic_auth_ok FROM rejections") == [("signature_mismatch", True)]


def test_invented_endpoint_names_are_counted_under_one_key_and_not_kept(config: dict[str, Any]) -> None:
    app = make_app(config)
    client = app.test_client()
    for _ in range(300):
        assert client.post(f"/webhooks/{uuid.uuid4().hex}", data=b"x" * 1000).status_code == 404
    assert rows(app, "SELECT endpoint, reason, count FROM rejection_counts") == [("unknown/*", "unknown_endpoint", 300)]
    assert rows(app, "SELECT count(*) FROM rejections") == [(0,)]
    listed = api(app, "?limit=1")
    assert listed.get_json()["counts"] == {quarantine.UNKNOWN: {"unknown_endpoint": 300}}
    assert len(listed.get_data()) < 1000
    page = app.test_client().get("/admin/rejections", headers=admin_headers())
    assert page.status_code == 200 and quarantine.UNKNOWN.encode() in page.get_data()


def test_the_unknown_key_can_never_be_reached_as_an_endpoint(app: Flask) -> None:
    assert app.test_client().post("/webhooks/" + quarantine.UNKNOWN, data=b"{}").status_code == 404
    assert rows(app, "SELECT count(*) FROM rejection_counts") == [(0,)]  # Flask's 404: no endpoint named so


def test_counts_left_by_older_versions_are_capped_and_paginated(config: dict[str, Any]) -> None:
    app = make_app(config)
    names = sorted(f"old-{i:04d}" for i in range(250))
    with app.extensions["webhooks"].engine.begin() as conn:
        import sqlalchemy as sa

        conn.execute(
            sa.text(
                "INSERT INTO rejection_counts (endpoint, reason, count, last_at) "
                "VALUES (:e, 'unknown_endpoint', 1, CURRENT_TIMESTAMP)"
            ),
            [{"e": n} for n in names],
        )
    first = api(app, "?limit=1")
    body = first.get_json()
    assert len(body["counts"]) == 100 and len(first.get_data()) < 20_000
    seen, after = list(body["counts"]), body["counts_next"]
    while after:
        body = api(app, f"?limit=1&counts_limit=70&counts_after={after}").get_json()
        assert len(body["counts"]) <= 70
        seen += list(body["counts"])
        after = body["counts_next"]
    assert seen == names  # every endpoint once, in order
    page = app.test_client().get("/admin/rejections", headers=admin_headers())
    text = page.get_data(as_text=True)
    assert text.count("· unknown_endpoint") == 100 and "counts_after=old-0099" in text
    older = app.test_client().get("/admin/rejections?counts_after=old-0099", headers=admin_headers())
    assert "old-0100" in older.get_data(as_text=True) and "old-0099 ·" not in older.get_data(as_text=True)


@pytest.mark.parametrize("before", ["²", "-1", "99999999999999999999999", "1.5"])
def test_a_before_that_is_no_row_number_is_a_400(app: Flask, before: str) -> None:
    assert app.test_client().get(f"/admin/api/rejections?before={before}", headers=admin_headers()).status_code == 400
    assert app.test_client().get(f"/admin/rejections?before={before}", headers=admin_headers()).status_code == 400


def test_oversized_requests_are_kept_within_the_caps(config: dict[str, Any]) -> None:
    app = make_app(dict(config, WEBHOOKS_QUARANTINE_BYTES=str(2 * 1024 * 1024)))  # 1 MiB per endpoint
    junk = {f"X-Junk-{i}": "j" * 15_000 for i in range(90)} | {"X-Small": "kept"}
    body = stripe_event("evt_big")
    response = app.test_client().post(
        "/webhooks/stripe?" + "q" * 8000, data=body, headers=junk | stripe_headers(body, "whsec_other")
    )
    assert response.get_json() == {"error": "signature_mismatch"}
    ((url, detail, size),) = rows(app, f"SELECT url, detail, {SIZE} FROM rejections")
    assert len(url) == 4096 and "URL cut" in detail and "90 headers not kept" in detail
    assert size < len(body) + 4096 + 16 * 1024 + 2000  # URL and headers capped
    (rejection,) = api(app, "").get_json()["rejections"]
    headers = (
        app.test_client().get(f"/admin/api/rejections/{rejection['id']}", headers=admin_headers()).get_json()["headers"]
    )
    assert headers["X-Small"] == "kept" and "Stripe-Signature" in headers


def test_the_byte_budget_holds_under_large_bodies(config: dict[str, Any]) -> None:
    budget = 1024 * 1024
    app = make_app(dict(config, WEBHOOKS_QUARANTINE_BYTES=str(2 * budget)))  # two endpoints: 1 MiB each
    client = app.test_client()
    for i in range(12):
        body = b'{"n": %d, "pad": "%s"}' % (i, b"p" * 200_000)
        assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body, "whsec_x")).status_code == 400
    ((total, kept),) = rows(app, f"SELECT sum({SIZE}), count(*) FROM rejections")
    ((each,),) = rows(app, f"SELECT max({SIZE}) FROM rejections")
    assert total <= budget and kept >= (budget - budget // 10) // each  # pruned to 9/10 when over
    assert bytes(rows(app, "SELECT body FROM rejections ORDER BY id DESC")[0][0]).startswith(b'{"n": 11,')
    # One request bigger than the whole share keeps its row, without the body.
    small = make_app(dict(config, WEBHOOKS_QUARANTINE_BYTES=str(200_000)))
    body = b'{"pad": "%s"}' % (b"p" * 150_000)
    small.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body, "whsec_x"))
    newest = rows(small, "SELECT body, detail FROM rejections ORDER BY id DESC LIMIT 1")[0]
    assert bytes(newest[0]) == b"" and "not kept (over the quarantine budget)" in newest[1]


def test_junk_to_one_endpoint_never_evicts_another_s_rejections(config: dict[str, Any]) -> None:
    app = make_app(dict(config, WEBHOOKS_QUARANTINE_ROWS="100"))
    client = app.test_client()
    genuine_failure = adyen_body(adyen_item("PSPKEEP", key="AB" * 32))  # signed with a key not (yet) configured
    client.post("/webhooks/adyen", data=genuine_failure)
    for i in range(200):
        client.post("/webhooks/stripe", data=b'{"junk": %d}' % i)
    ((junk,),) = rows(app, "SELECT count(*) FROM rejections WHERE endpoint = 'stripe'")
    assert 45 <= junk <= 50  # its own share of 50 rows
    assert [bytes(b) for (b,) in rows(app, "SELECT body FROM rejections WHERE endpoint = 'adyen'")] == [genuine_failure]


REPLAY_KEYED = ["github", "shopify", "twilio", "paypal", "hmac_by_header", "razorpay", "plaid"]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    config = base_config(f"sqlite:///{tmp_path_factory.mktemp('shown') / 'webhooks.db'}")
    config["ENDPOINTS"] = {k: v for k, v in all_endpoints().items() if k in [*REPLAY_KEYED, "stripe"]}
    return make_app(config)


@pytest.mark.parametrize("name", REPLAY_KEYED)
def test_signatures_of_schemes_without_a_timestamp_are_not_shown(keyed: Flask, name: str) -> None:
    body, headers, path = genuine(keyed, name)
    endpoint = keyed.extensions["webhooks"].settings.endpoints[name]
    signed = {n.lower() for n in providers.get(endpoint.kind).signature_headers(endpoint)}
    values = {k: v for k, v in headers.items() if k.lower() in signed}
    assert values, headers
    response = keyed.test_client().post(path, data=body + b" ", headers=headers, base_url=f"https://{HOST}")
    assert response.status_code in (400, 401, 403), response.get_data()
    (rejection,) = api(keyed, f"?endpoint={name}&limit=1").get_json()["rejections"]
    detail = keyed.test_client().get(f"/admin/api/rejections/{rejection['id']}", headers=admin_headers())
    page = keyed.test_client().get(f"/admin/rejections/{rejection['id']}", headers=admin_headers())
    for header, value in values.items():
        shown = {k.lower(): v for k, v in detail.get_json()["headers"].items()}[header.lower()]
        assert shown == f"[signature: {len(value)} chars]"
        assert value not in detail.get_data(as_text=True) and value not in page.get_data(as_text=True)
        assert f"[signature: {len(value)} chars]" in page.get_data(as_text=True)
    stored = rows(keyed, "SELECT headers FROM rejections WHERE id = :i", i=rejection["id"])[0][0]
    assert all(v in str(stored) for v in values.values())  # kept for re-verify


def test_a_hidden_signature_still_re_verifies_after_the_secret_fix(config: dict[str, Any]) -> None:
    config["ENDPOINTS"] = {"github": all_endpoints()["github"]}
    broken = make_app(config)
    endpoint = broken.extensions["webhooks"].settings.endpoints["github"]
    rotated = dataclasses.replace(endpoint, secrets=("new-gh-secret",))
    body, headers = providers.get("github").sign(
        rotated, (PAYLOADS / SENT["github"]).read_bytes(), now=time.time(), url=f"https://{HOST}/webhooks/github"
    )
    refused = broken.test_client().post("/webhooks/github", data=body, headers=headers)
    assert refused.get_json() == {"error": "signature_mismatch"}
    (rejection,) = api(broken, "").get_json()["rejections"]
    config["ENDPOINTS"]["github"] = dict(config["ENDPOINTS"]["github"], secrets=["new-gh-secret"])
    fixed = make_app(config)
    result = fixed.test_client().post(
        f"/admin/api/rejections/{rejection['id']}/reverify", json={}, headers=admin_headers()
    )
    assert result.status_code == 200, result.get_json()
    assert rows(fixed, "SELECT count(*) FROM events") == [(1,)]
