"""Checkout.com, Paystack and Lemon Squeezy through the app: genuine → stored once (also when ten
copies race); a tampered body, a wrong secret, no signature → 4xx with its reason, nothing stored;
a captured delivery re-labelled (headers, URL, Host) never becomes a second event. No timestamp is
signed by these kinds, so there is no stale-timestamp rule: their ids are signed (Checkout.com) or
are the signed body's digest (Paystack, Lemon Squeezy)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from flask import Flask

from tests.conftest import PAYLOADS, base_config, make_app, rows
from tests.support.catalogue import HOST, SENT, all_endpoints, genuine
from webhooks import providers

KINDS = ["checkout", "paystack", "lemonsqueezy"]


@pytest.fixture
def app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, ENDPOINTS={k: all_endpoints()[k] for k in KINDS}))


def post(app: Flask, path: str, body: bytes, headers: dict[str, str], host: str = HOST) -> tuple[int, str | None]:
    response = app.test_client().post(path, data=body, headers=headers, base_url=f"https://{host}")
    assert response.status_code < 500, response.get_data()
    return response.status_code, (response.get_json(silent=True) or {}).get("error")


def count(app: Flask, name: str) -> int:
    return int(rows(app, "SELECT count(*) FROM events WHERE endpoint = :e", e=name)[0][0])


@pytest.mark.parametrize("kind", KINDS)
def test_refusals_store_nothing(app: Flask, kind: str) -> None:
    body, headers, path = genuine(app, kind)
    header = next(iter(providers.get(kind).signature_header_names))
    endpoint = app.extensions["webhooks"].settings.endpoints[kind]
    _, foreign = providers.get(kind).sign(
        replace(endpoint, secrets=(endpoint.secrets[0] + "-wrong",)), body, now=time.time()
    )
    cases = [
        (body.replace(b"1", b"2", 1), headers, "signature_mismatch"),
        (body, {**headers, header: foreign[header]}, "signature_mismatch"),
        (body, {k: v for k, v in headers.items() if k != header}, "missing_signature"),
        (body, {**headers, header: "not hex"}, "malformed_signature"),
    ]
    for sent, sent_headers, reason in cases:
        status, error = post(app, path, sent, sent_headers)
        assert 400 <= status < 500 and error == reason, (kind, reason, status, error)
    assert count(app, kind) == 0
    assert post(app, path, body, headers) == (200, None)
    assert count(app, kind) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_ten_concurrent_duplicates_are_stored_once(app: Flask, kind: str) -> None:
    body, headers, path = genuine(app, kind)
    start = threading.Barrier(10)
    answers: list[int] = []

    def send() -> None:
        client = app.test_client()
        start.wait(timeout=30)
        answers.append(client.post(path, data=body, headers=headers, base_url=f"https://{HOST}").status_code)

    threads = [threading.Thread(target=send) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert answers == [200] * 10
    assert count(app, kind) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_relabelled_capture_is_no_second_event(app: Flask, kind: str) -> None:
    raw = (PAYLOADS / SENT[kind]).read_bytes()
    body, headers, path = genuine(app, kind, raw)
    assert post(app, path, body, headers) == (200, None)
    relabels = [
        {"X-Event-Name": "order_refunded"},
        {"X-Request-Id": "another", "Idempotency-Key": "another"},
        {"Authorization": "Bearer minted", "Content-Type": "text/plain"},
    ]
    for extra in relabels:
        for target, host in ((path, HOST), (f"{path}?id=minted", "evil.example")):
            assert post(app, target, body, headers | extra, host=host)[0] == 200  # a duplicate
    assert count(app, kind) == 1
    (stored_type,) = rows(app, "SELECT event_type FROM events WHERE endpoint = :e", e=kind)[0]
    assert stored_type not in {"order_refunded"}
