"""Where the fold meets forwarding (the seams issue, finding 1): an Adyen payment's notifications
fold into one object whose version counts them, and that version is the one handlers see
(``HandlerEvent.version``) and every delivery carries (its row, ``Webhooks-Object-Version``, a bus
entry's field, the ordering check), on both databases. An ordered destination receives
AUTHORISATION, CAPTURE and REFUND as versions 1, 2, 3; before the fix the SQLite path handed on
the version from before the fold (1 each time), so CAPTURE and REFUND ended ``superseded``."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from tests import state_handlers
from tests.conftest import adyen_body, adyen_item, base_config, drain, make_app, rows, wait_until
from tests.forward.conftest import Script, forwarding, serving, settle_all, statuses
from tests.support import destination

pytestmark = pytest.mark.slow
PSP = "8815000000000001"
NOTES = [  # one payment's life: the CAPTURE and REFUND name it by originalReference
    adyen_item(psp=PSP, code="AUTHORISATION", event_date="2024-01-01T10:00:00+01:00"),
    adyen_item(psp="8815000000000002", code="CAPTURE", original=PSP, event_date="2024-01-01T10:05:00+01:00"),
    adyen_item(psp="8815000000000003", code="REFUND", original=PSP, event_date="2024-01-01T10:09:00+01:00"),
]


def adyen_app(request: pytest.FixtureRequest, db: str, dests: dict[str, Any]) -> Flask:
    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")
    extra: dict[str, Any] = {} if db == "sqlite" else {"REDIS_URL": request.getfixturevalue("redis_url")}
    config = base_config(url, DESTINATIONS=dests, WEBHOOKS_HANDLERS="tests.state_handlers", **extra)
    config["ENDPOINTS"]["adyen"]["forward"] = list(dests)
    state_handlers.reset()
    return make_app(config)


def post_note(app: Flask, item: dict[str, Any]) -> None:
    answer = app.test_client().post("/webhooks/adyen", data=adyen_body(item), content_type="application/json")
    assert answer.status_code == 200, answer.data


def versions_by_code(app: Flask) -> dict[str, int]:
    found = rows(app, "SELECT event_type, object_version FROM events WHERE endpoint = 'adyen'")
    return {r[0]: r[1] for r in found}


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1)], ids=["in-order", "refund-first"])
def test_an_ordered_destination_receives_each_fold_of_a_payment(
    request: pytest.FixtureRequest, db: str, order: tuple[int, ...]
) -> None:
    script = Script()
    with serving(script) as service:
        app = adyen_app(request, db, {"o": destination.config(service, ordered=True)})
        with forwarding(app):
            for i in order:
                post_note(app, NOTES[i])
                drain(app)  # each processed before the next arrives
                count = order.index(i) + 1
                wait_until(lambda c=count: len(script.ok()) == c, timeout=60)
        settle_all(app)
        # Each event is its payment's next fold: versions 1, 2, 3 in the order they came.
        assert [a.version for a in script.ok()] == [1, 2, 3]
        assert {a.object for a in script.ok()} == {f"payment/{PSP}"}
        assert set(statuses(app).values()) == {"delivered"}
        codes = [NOTES[i]["eventCode"] for i in order]
        assert versions_by_code(app) == {code: n + 1 for n, code in enumerate(codes)}
        delivered = rows(app, "SELECT d.object_version FROM deliveries d ORDER BY d.object_version")
        assert [r[0] for r in delivered] == [1, 2, 3]
        # The handler saw the same numbers.
        assert [c["version"] for c in state_handlers.CALLS] == [1, 2, 3]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_unordered_destination_gets_the_folded_version_in_its_header(
    request: pytest.FixtureRequest, db: str
) -> None:
    script = Script()
    with serving(script) as service:
        app = adyen_app(request, db, {"u": destination.config(service)})
        for item in NOTES:
            post_note(app, item)
            drain(app)
        settle_all(app)
    assert sorted(a.version or 0 for a in script.ok()) == [1, 2, 3]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_bus_entry_carries_the_folded_version(request: pytest.FixtureRequest, db: str) -> None:
    """The same on a bus (a Redis stream of the test's own server): each entry's
    ``webhooks-object-version`` field is its fold's count, in order, ordered destination."""
    import uuid

    from tests.forward.test_bus_redis_stream import entries, started, table

    bus = started()
    try:
        stream = f"folds-{uuid.uuid4().hex[:8]}"
        app = adyen_app(request, db, {"bus": table(bus, stream, ordered=True)})
        with forwarding(app):
            for n, item in enumerate(NOTES, 1):
                post_note(app, item)
                drain(app)
                wait_until(lambda n=n: len(entries(bus, stream)) == n, timeout=60)
        got = entries(bus, stream)
        assert [int(e["webhooks-object-version"]) for e in got] == [1, 2, 3]
        assert set(statuses(app).values()) == {"delivered"}
    finally:
        bus.remove()


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_replay_sends_a_wrongly_superseded_delivery_with_the_objects_version(
    request: pytest.FixtureRequest, db: str
) -> None:
    """Deployments that hold the old fault's rows (deliveries of version 1, ``superseded``): the
    documented replay to the destination (``webhooks events replay ... --destination``) sends the
    newest event with the version its row holds, so the destination gets the payment's newest state."""
    from datetime import UTC, datetime

    from tests.conftest import runtime
    from webhooks.forward import deliveries

    script = Script()
    with serving(script) as service:
        app = adyen_app(request, db, {"o": destination.config(service, ordered=True)})
        post_note(app, NOTES[0])
        drain(app)
        settle_all(app)
        for item in NOTES[1:]:
            post_note(app, item)
        drain(app)
        # What eea6681 left on SQLite: the later deliveries carry version 1 and ended superseded.
        with runtime(app).sessions.begin() as session:
            session.execute(
                deliveries.update(deliveries.Delivery)
                .where(deliveries.Delivery.object_version > 1)
                .values(object_version=1, status="superseded")
            )
        settle_all(app)
        assert [a.version for a in script.ok()] == [1]
        newest = rows(app, "SELECT event_id FROM events WHERE event_type = 'REFUND'")[0][0]
        with runtime(app).sessions.begin() as session:
            assert deliveries.replay(session, [("adyen", newest)], "o", datetime.now(UTC)) == [("adyen", newest)]
        settle_all(app)
        assert [a.version for a in script.ok()] == [1, 3]
        assert rows(app, "SELECT status, object_version FROM deliveries WHERE event_id = :e", e=newest)[0] == (
            "delivered",
            3,
        )
