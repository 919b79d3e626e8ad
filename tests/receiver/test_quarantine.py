"""Rejected requests: counted, kept bounded with credentials redacted, re-verifiable after a fix."""

from __future__ import annotations

import base64
import time

import sqlalchemy as sa
from flask import Flask

from tests.conftest import (
    admin_headers,
    adyen_body,
    adyen_item,
    base_config,
    drain,
    make_app,
    rows,
    runtime,
    stripe_event,
    stripe_headers,
)


def rejections(app: Flask, query: str = "") -> dict:  # type: ignore[type-arg]
    response = app.test_client().get(f"/admin/api/rejections{query}", headers=admin_headers())
    assert response.status_code == 200
    return response.get_json()  # type: ignore[no-any-return]


def test_rejections_are_listed_with_reason_and_counted(app: Flask) -> None:
    client = app.test_client()
    body = stripe_event("evt_wrong")
    client.post("/webhooks/stripe", data=body, headers=stripe_headers(body, secret="whsec_wrong"))
    client.post("/webhooks/stripe", data=body)
    client.post("/webhooks/nowhere", data=b"{}")
    listed = rejections(app)
    assert [r["reason"] for r in listed["rejections"]] == ["missing_signature", "signature_mismatch"]
    assert listed["counts"] == {
        "stripe": {"signature_mismatch": 1, "missing_signature": 1},
        "unknown/*": {"unknown_endpoint": 1},
    }  # counted, not kept
    detail = app.test_client().get(f"/admin/api/rejections/{listed['rejections'][1]['id']}", headers=admin_headers())
    assert detail.get_json()["body"] == body.decode()
    assert rows(app, "SELECT 1 FROM events") == []


def test_credentials_are_redacted(sqlite_url: str) -> None:
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["adyen"]["basic_auth"] = "user:pa55word"
    app = make_app(config)
    auth = "Basic " + base64.b64encode(b"user:pa55word").decode()
    item = adyen_item()
    item["amount"]["value"] = 1  # breaks the HMAC, not the auth
    app.test_client().post(
        "/webhooks/adyen", data=adyen_body(item), headers={"Authorization": auth, "X-Api-Key": "k-123"}
    )
    (rejection,) = rejections(app)["rejections"]
    detail = app.test_client().get(f"/admin/api/rejections/{rejection['id']}", headers=admin_headers()).get_json()
    assert detail["headers"]["Authorization"] == "[redacted]" and detail["headers"]["X-Api-Key"] == "[redacted]"
    assert "pa55word" not in str(rows(app, "SELECT headers FROM rejections"))


def test_quarantine_stays_bounded_under_a_flood(sqlite_url: str) -> None:
    # 100 rows shared by the two configured endpoints: 50 each (pruned to 45 when over). Four times
    # that proves the bound.
    app = make_app(base_config(sqlite_url, WEBHOOKS_QUARANTINE_ROWS="100"))
    client = app.test_client()
    for i in range(200):
        assert client.post("/webhooks/stripe", data=b'{"n": %d}' % i).status_code == 400
    ((kept,),) = rows(app, "SELECT count(*) FROM rejections")
    assert 45 <= kept <= 50
    newest = rows(app, "SELECT body FROM rejections ORDER BY id DESC LIMIT 1")[0][0]
    assert bytes(newest) == b'{"n": 199}'
    assert rejections(app)["counts"]["stripe"]["missing_signature"] == 200


def test_quarantine_prunes_by_age(sqlite_url: str) -> None:
    app = make_app(base_config(sqlite_url, WEBHOOKS_QUARANTINE_DAYS="1"))
    client = app.test_client()
    client.post("/webhooks/stripe", data=b"old")
    with runtime(app).engine.begin() as conn:
        conn.execute(sa.text("UPDATE rejections SET received_at = '2000-01-01 00:00:00'"))
    for _ in range(100):
        client.post("/webhooks/stripe", data=b"new")
    assert rows(app, "SELECT count(*) FROM rejections WHERE body = x'6f6c64'") == [(0,)]


def test_reverify_after_the_secret_fix_stores_and_processes(sqlite_url: str) -> None:
    broken = make_app(base_config(sqlite_url))  # configured with the old secret
    body = stripe_event("evt_rotated")
    response = broken.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body, "whsec_rotated"))
    assert response.get_json() == {"error": "signature_mismatch"}
    (rejection,) = rejections(broken)["rejections"]

    config = base_config(sqlite_url)
    config["ENDPOINTS"]["stripe"]["secrets"] = ["whsec_rotated"]  # the fix
    fixed = make_app(config)
    client = fixed.test_client()
    result = client.post(f"/admin/api/rejections/{rejection['id']}/reverify", json={}, headers=admin_headers())
    assert (result.status_code, result.get_json()["events"]) == (200, ["evt_rotated"])
    drain(fixed)
    assert rows(fixed, "SELECT status FROM events") == [("processed",)]
    assert rejections(fixed)["rejections"][0]["outcome"] == "stored"


def test_reverify_judges_the_timestamp_against_arrival_not_now(sqlite_url: str) -> None:
    app = make_app(base_config(sqlite_url))
    hour_ago = int(time.time()) - 3600
    body = stripe_event("evt_late_fix")
    app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body, "whsec_new", hour_ago))
    with runtime(app).engine.begin() as conn:  # it arrived an hour ago, when its timestamp was fresh
        conn.execute(
            sa.text("UPDATE rejections SET received_at = :t"),
            {"t": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(hour_ago + 2))},
        )
    (rejection,) = rejections(app)["rejections"]
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["stripe"]["secrets"] = ["whsec_new"]
    fixed = make_app(config)
    fresh = fixed.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body, "whsec_new", hour_ago))
    assert fresh.get_json() == {"error": "timestamp_out_of_tolerance"}  # the same bytes arriving now are stale
    result = fixed.test_client().post(
        f"/admin/api/rejections/{rejection['id']}/reverify", json={}, headers=admin_headers()
    )
    assert result.status_code == 200, result.get_json()


def test_reverify_that_still_fails_says_why(app: Flask) -> None:
    body = stripe_event("evt_still_bad")
    app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body, "whsec_nobody_has"))
    (rejection,) = rejections(app)["rejections"]
    result = app.test_client().post(
        f"/admin/api/rejections/{rejection['id']}/reverify", json={}, headers=admin_headers()
    )
    assert (result.status_code, result.get_json()["error"]) == (422, "signature_mismatch")
    assert rows(app, "SELECT 1 FROM events") == []
    assert (
        app.test_client().post("/admin/api/rejections/999/reverify", json={}, headers=admin_headers()).status_code
        == 404
    )


def test_reverify_keeps_basic_auth_without_keeping_the_password(sqlite_url: str) -> None:
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["adyen"]["basic_auth"] = "user:pa55word"
    config["ENDPOINTS"]["adyen"]["secrets"] = ["AB" * 32]  # the wrong HMAC key
    app = make_app(config)
    auth = {"Authorization": "Basic " + base64.b64encode(b"user:pa55word").decode()}
    app.test_client().post("/webhooks/adyen", data=adyen_body(adyen_item("PSPQ")), headers=auth)
    app.test_client().post(
        "/webhooks/adyen",
        data=adyen_body(adyen_item("PSPW")),
        headers={"Authorization": "Basic " + base64.b64encode(b"user:guess").decode()},
    )
    bad_hmac, bad_auth = sorted(rejections(app)["rejections"], key=lambda r: r["id"])
    assert (bad_hmac["reason"], bad_auth["reason"]) == ("signature_mismatch", "bad_basic_auth")
    from tests.conftest import ADYEN_KEY

    config["ENDPOINTS"]["adyen"]["secrets"] = [ADYEN_KEY]
    fixed = make_app(config)
    ok = fixed.test_client().post(f"/admin/api/rejections/{bad_hmac['id']}/reverify", json={}, headers=admin_headers())
    assert ok.status_code == 200
    refused = fixed.test_client().post(
        f"/admin/api/rejections/{bad_auth['id']}/reverify", json={}, headers=admin_headers()
    )
    assert refused.get_json()["error"] == "bad_basic_auth"
