"""Genuine, signed events carrying values PostgreSQL cannot store (SQLite can): the outcome is the
same on both databases, and never a 5xx loop or a ``failed`` loop.

- Event ids and types over 255 characters, or with NUL / lone surrogates: refused at receive time
  with 400 ``malformed_payload`` and quarantined (nothing could key on them).
- Object types and ids that do not fit their key column, or hold NUL / lone surrogates: keyed
  ``sha256:<hex>`` of the id as sent.
- Object state with NUL / lone surrogates (U+FFFD in the stored copy) or NaN / Infinity (null);
  versions beyond a 64-bit integer (clamped). The raw payload stays byte-exact and handlers get
  the event's data as sent.
- Errors with NUL / lone surrogates are recorded on the row (U+FFFD), not lost.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from flask import Flask

from tests import sample_handlers
from tests.conftest import admin_headers, base_config, drain, make_app, rows, stripe_event, stripe_headers
from webhooks import HandlerEvent, on

SEEN: list[Any] = []  # what the handler below was given: (data, state)


@on("stripe", "test.capture")
def capture(event: HandlerEvent, state: Any) -> None:
    SEEN.append((event.data, state, event.object_type, event.object_id))


@on("stripe", "test.explode")
def explode(event: HandlerEvent) -> None:
    raise RuntimeError(event.data["data"]["object"]["note"])


@pytest.fixture(params=["sqlite", "postgres"])
def any_app(request: pytest.FixtureRequest) -> Flask:
    """The conftest's ``any_app`` (SQLite + embedded queue, PostgreSQL + Redis), with the handlers
    of this module enabled too, and one attempt per event (a failure is final at once)."""
    SEEN.clear()
    extra = {
        "WEBHOOKS_HANDLERS": "tests.sample_handlers,tests.receiver.test_hostile_values",
        "WEBHOOKS_MAX_ATTEMPTS": "1",
    }
    if request.param == "sqlite":
        return make_app(base_config(request.getfixturevalue("sqlite_url"), **extra))
    pg, rurl = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
    return make_app(base_config(pg, REDIS_URL=rurl, **extra))


def post(app: Flask, body: bytes) -> tuple[int, Any]:
    response = app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    return response.status_code, response.get_json(silent=True)


def event_row(app: Flask, event_id: str) -> Any:
    found = rows(
        app,
        "SELECT status, attempts, object_type, object_id, payload, last_error FROM events WHERE event_id = :e",
        e=event_id,
    )
    assert len(found) == 1, found
    return found[0]


def stored_object(app: Flask, object_type: str, object_id: str) -> dict[str, Any]:
    response = app.test_client().get(f"/admin/api/objects/stripe/{object_type}/{object_id}", headers=admin_headers())
    assert response.status_code == 200, response.data
    return response.get_json()  # type: ignore[no-any-return]


def key(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def stored_key(value: str, width: int) -> str:
    storable = len(value) <= width and value.isprintable() and not value.startswith("sha256:")
    return value if storable else key(value)


# -- receive side: ids and types no database can key on ------------------------------------------


@pytest.mark.parametrize(
    ("event_id", "event_type"),
    [
        ("evt_" + "x" * 252, "payment_intent.succeeded"),  # 256 characters
        ("evt_surrogate_\ud800", "payment_intent.succeeded"),
        ("evt_lone_low_\udfff", "payment_intent.succeeded"),
        ("evt_nul_\u0000", "payment_intent.succeeded"),
        ("evt_long_type", "payment_intent." + "y" * 241),  # 256 characters
        ("evt_type_surrogate", "payment_intent.\ud83d"),
        ("evt_type_nul", "payment_intent\u0000succeeded"),
    ],
    ids=["long-id", "surrogate-id", "low-surrogate-id", "nul-id", "long-type", "surrogate-type", "nul-type"],
)
def test_unkeyable_event_ids_and_types_are_refused_and_quarantined(
    any_app: Flask, event_id: str, event_type: str
) -> None:
    body = stripe_event(event_id, event_type)
    for _ in range(2):  # a provider retry gets the same answer: no 5xx loop
        assert post(any_app, body) == (400, {"error": "malformed_payload"})
    assert rows(any_app, "SELECT count(*) FROM events") == [(0,)]
    assert rows(any_app, "SELECT reason FROM rejections") == [("malformed_payload",), ("malformed_payload",)]


def test_ids_and_types_of_exactly_255_characters_are_stored_and_processed(any_app: Flask) -> None:
    event_id, event_type = "evt_" + "x" * 251, "test.capture." + "z" * 242
    body = stripe_event(event_id, event_type, obj={"id": "o" * 255, "object": "t" * 100})
    assert post(any_app, body)[0] == 200
    drain(any_app)
    status, attempts, object_type, object_id, payload, _ = event_row(any_app, event_id)
    assert (status, attempts, object_type, object_id, payload) == ("processed", 1, "t" * 100, "o" * 255, body)


# -- worker side: object keys, state, versions, errors -------------------------------------------


@pytest.mark.parametrize(
    ("object_type", "object_id"),
    [
        ("charge", "ch_" + "l" * 300),
        ("charge", "ch_surrogate_\udc00"),
        ("charge", "ch_nul_\u0000"),
        ("c" * 101, "ch_long_type"),
        ("charge\ud800", "ch_surrogate_type"),
        ("charge", "sha256:" + "0" * 64),  # looks like a mapped key: mapped too, so none can collide
    ],
    ids=["long-id", "surrogate-id", "nul-id", "long-type", "surrogate-type", "key-lookalike"],
)
def test_unkeyable_object_keys_map_to_a_stable_hash(any_app: Flask, object_type: str, object_id: str) -> None:
    obj = {"id": object_id, "object": object_type, "amount": 100}
    first, second = (
        stripe_event("evt_1", "test.capture", 1700000000, obj),
        stripe_event("evt_2", "test.capture", 1700000060, {**obj, "amount": 200}),
    )
    for body in (first, second):
        assert post(any_app, body)[0] == 200
        drain(any_app)
    expected_type, expected_id = stored_key(object_type, 100), stored_key(object_id, 255)
    assert (expected_type, expected_id) != (object_type, object_id)
    for event_id, body in (("evt_1", first), ("evt_2", second)):
        status, attempts, stored_type, stored_id, payload, _ = event_row(any_app, event_id)
        assert (status, attempts, stored_type, stored_id) == ("processed", 1, expected_type, expected_id)
        assert payload == body  # the raw bytes stay exact
    # Both events moved one object (the key is stable), which holds the newer state.
    state = stored_object(any_app, expected_type, expected_id)
    assert (state["last_event_id"], state["state"]["amount"]) == ("evt_2", 200)
    assert rows(any_app, "SELECT count(*) FROM objects") == [(1,)]
    # The handler got the event as sent, and the stored key.
    assert [data["data"]["object"]["id"] for data, *_ in SEEN] == [object_id, object_id]
    assert {(t, i) for *_, t, i in SEEN} == {(expected_type, expected_id)}


def test_object_state_with_nul_surrogates_and_nan_is_stored_cleaned(any_app: Flask) -> None:
    obj = {
        "id": "ch_hostile",
        "object": "charge",
        "description": "a\u0000b",
        "nested": {"k\ud800": ["\udfff", 1.5]},
        "amount": float("nan"),
        "limit": float("inf"),
    }
    body = stripe_event("evt_hostile", "test.capture", obj=obj)
    assert post(any_app, body)[0] == 200
    drain(any_app)
    status, attempts, *_, payload, error = event_row(any_app, "evt_hostile")
    assert (status, attempts, error) == ("processed", 1, None)
    assert payload == body
    cleaned = {
        "id": "ch_hostile",
        "object": "charge",
        "description": "a\ufffdb",
        "nested": {"k\ufffd": ["\ufffd", 1.5]},
        "amount": None,
        "limit": None,
    }
    assert stored_object(any_app, "charge", "ch_hostile")["state"] == cleaned
    ((data, state, *_),) = SEEN
    assert data == json.loads(body)  # as sent (NUL and surrogates included)
    assert state == cleaned  # the stored copy


def test_a_charge_refund_with_a_hostile_object_still_runs_its_handler_once(any_app: Flask) -> None:
    object_id = "ch_\ud800" + "r" * 300
    body = stripe_event("evt_refund", "charge.refunded", obj={"id": object_id, "object": "charge", "x": "\u0000"})
    assert post(any_app, body)[0] == 200
    drain(any_app)
    assert event_row(any_app, "evt_refund")[:2] == ("processed", 1)
    assert list(sample_handlers.DOWNSTREAM_EFFECTS.values()) == [f"refund {object_id}"]  # the id as sent
    assert rows(any_app, "SELECT count(*) FROM test_handler_calls WHERE event_id = 'evt_refund'") == [(1,)]


def test_a_version_beyond_64_bits_is_clamped_not_a_failure(any_app: Flask) -> None:
    body = stripe_event("evt_far", "test.capture", 10**17, {"id": "ch_far", "object": "charge"})
    assert post(any_app, body)[0] == 200
    drain(any_app)
    assert event_row(any_app, "evt_far")[:2] == ("processed", 1)
    assert stored_object(any_app, "charge", "ch_far")["version"] == 2**63 - 1


def test_an_error_with_nul_and_surrogates_is_recorded_on_the_row(any_app: Flask) -> None:
    body = stripe_event(
        "evt_boom", "test.explode", obj={"id": "ch_boom", "object": "charge", "note": "bad\u0000\ud800"}
    )
    assert post(any_app, body)[0] == 200
    drain(any_app)
    status, attempts, *_, error = event_row(any_app, "evt_boom")
    assert (status, attempts, error) == ("failed", 1, "RuntimeError: bad\ufffd\ufffd")
    (traceback,) = rows(any_app, "SELECT last_traceback FROM events")[0]
    assert "RuntimeError: bad\ufffd\ufffd" in traceback
    assert rows(any_app, "SELECT status, error FROM attempts") == [("error", "RuntimeError: bad\ufffd\ufffd")]
    assert rows(any_app, "SELECT count(*) FROM objects") == [(0,)]  # rolled back with the failure
