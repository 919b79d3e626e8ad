"""The receiver's HTTP contract beyond signatures: 404, 413, 503, rate limits, short reads (Redis down and the
sweeper: ``tests/worker/test_sweeper.py``)."""

from __future__ import annotations

import io

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import base_config, free_port, make_app, rows, stripe_event, stripe_headers
from webhooks import create_app
from webhooks.errors import ConfigError


def test_unknown_endpoint_is_404(client: FlaskClient) -> None:
    response = client.post("/webhooks/nope", data=b"{}")
    assert (response.status_code, response.get_json()) == (404, {"error": "unknown_endpoint"})


def test_body_over_the_limit_is_413_and_not_stored(sqlite_url: str) -> None:
    app = make_app(base_config(sqlite_url, WEBHOOKS_MAX_BODY_BYTES="1000"))
    body = stripe_event(obj={"id": "pi_big", "object": "payment_intent", "pad": "x" * 2000})
    response = app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert (response.status_code, response.get_json()) == (413, {"error": "payload_too_large"})
    assert rows(app, "SELECT 1 FROM events") == []


def test_chunked_body_over_the_limit_is_413_not_truncated(sqlite_url: str) -> None:
    """No Content-Length (chunked): the limit is enforced while reading."""
    app = make_app(base_config(sqlite_url, WEBHOOKS_MAX_BODY_BYTES="1000"))
    body = stripe_event(obj={"id": "pi_big", "object": "payment_intent", "pad": "x" * 2000})
    environ = {"wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True}
    response = app.test_client().post(
        "/webhooks/stripe",
        headers=stripe_headers(body) | {"Transfer-Encoding": "chunked"},
        environ_overrides=environ,
    )
    assert (response.status_code, response.get_json()) == (413, {"error": "payload_too_large"})


def test_database_down_is_503_with_retry_after() -> None:
    config = base_config(f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    app = create_app(config)
    body = stripe_event()
    response = app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert (response.status_code, response.get_json()) == (503, {"error": "unavailable"})
    assert response.headers["Retry-After"].isdigit()


def test_rate_limited_endpoint_answers_429_with_retry_after(sqlite_url: str) -> None:
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["stripe"]["rate_limit"] = 2
    client = make_app(config).test_client()
    statuses = []
    for n in range(3):
        body = stripe_event(f"evt_rate_{n}")
        statuses.append(client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)))
    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert statuses[2].get_json() == {"error": "rate_limited"}
    assert int(statuses[2].headers["Retry-After"]) >= 1
    # Other endpoints have their own budget (none here: unlimited).
    assert client.post("/webhooks/adyen", data=b"{}").status_code == 400


def test_rate_limit_must_be_positive(sqlite_url: str) -> None:
    config = base_config(sqlite_url)
    config["ENDPOINTS"]["stripe"]["rate_limit"] = 0
    with pytest.raises(ConfigError, match="rate_limit"):
        create_app(config)


def test_unexpected_error_in_verify_is_400_not_500(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    from webhooks import providers

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("provider bug")

    monkeypatch.setattr(providers.PROVIDERS["stripe"], "verify", broken)
    body = stripe_event()
    response = app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert (response.status_code, response.get_json()) == (400, {"error": "malformed_payload"})


def test_body_read_in_short_chunks_is_whole(app: Flask) -> None:
    """A WSGI stream may return short reads: the body is still read whole, then verified."""

    class Trickle(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            return super().read(min(7, size if size is not None and size >= 0 else 7))

    body = stripe_event("evt_trickle")
    environ = {"wsgi.input": Trickle(body), "wsgi.input_terminated": True}
    response = app.test_client().post(
        "/webhooks/stripe",
        headers=stripe_headers(body) | {"Transfer-Encoding": "chunked"},
        environ_overrides=environ,
    )
    assert response.status_code == 200
    assert rows(app, "SELECT event_id FROM events") == [("evt_trickle",)]


def test_the_wsgi_front_answers_as_flask_did(app: Flask) -> None:
    """Deliveries are answered by ``receive.Front`` ahead of Flask: the same bytes and headers as
    Flask's ``jsonify``, and everything that is not a delivery still goes to Flask's routing."""
    from flask import jsonify

    client = app.test_client()
    unknown = client.post("/webhooks/nope", data=b"{}")
    with app.app_context():
        flask_made = jsonify(error="unknown_endpoint")
    assert (unknown.status_code, unknown.data, unknown.content_type) == (404, flask_made.data, flask_made.content_type)
    assert unknown.headers["Content-Length"] == str(len(flask_made.data))
    body = stripe_event("evt_front")
    stored = client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert (stored.status_code, stored.get_json(), stored.content_type) == (200, {"received": True}, "application/json")
    assert client.get("/webhooks/stripe").status_code == 405  # Flask's route: POST only
    assert client.post("/webhooks/stripe/more", data=body, headers=stripe_headers(body)).status_code == 404
    assert client.post("/webhooks/", data=body).status_code == 404
    assert rows(app, "SELECT event_id FROM events") == [("evt_front",)]


def test_an_unexpected_error_while_storing_is_json_503_never_a_500_page(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhooks.receiver import batch

    def bug(self: object, item: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(batch.GroupCommit, "store", bug)
    body = stripe_event("evt_bug")
    response = app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    assert (response.status_code, response.get_json()) == (503, {"error": "unavailable"})
    assert response.headers["Retry-After"] == "30"
    assert rows(app, "SELECT count(*) FROM events") == [(0,)]  # nothing acknowledged, nothing stored
