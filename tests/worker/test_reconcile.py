"""Issue #11: ``webhooks reconcile`` stores and processes the Stripe events an endpoint missed
(from a fake ``/v1/events`` on 127.0.0.1), exactly once, and handler idempotency keys do not
depend on how an event arrived."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask

from tests import state_handlers
from tests.conftest import STRIPE_SECRET, admin_headers, base_config, drain, make_app, rows, runtime, stripe_headers
from tests.fake_apis import serve
from webhooks.providers import stripe_api
from webhooks.service.cli import main
from webhooks.worker import reconcile
from webhooks.worker.sweeper import sweep

API_KEY = "sk_test_reconcile"


class FakeEvents:
    """Stripe's ``/v1/events``: newest first, ``limit``/``starting_after`` paging, ``created[gte]``
    and ``delivery_success`` filters; ``on_page`` runs before a page after the first is answered."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.undelivered: set[str] = set()
        self.pages: list[dict[str, list[str]]] = []
        self.on_page: Callable[[], None] | None = None

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes
    ) -> tuple[int, Any]:
        if headers.get("Authorization") != f"Bearer {API_KEY}" or path != "/v1/events":
            return 404, {"error": {"type": "invalid_request_error", "message": "no"}}
        self.pages.append(query)
        found = [e for e in self.events if e["created"] >= int(query["created[gte]"][0])]
        if query.get("delivery_success") == ["false"]:
            found = [e for e in found if e["id"] in self.undelivered]
        start = 0
        if "starting_after" in query:
            start = [e["id"] for e in found].index(query["starting_after"][0]) + 1
            if self.on_page is not None:
                self.on_page()
        limit = int(query["limit"][0])
        return 200, {
            "object": "list",
            "url": "/v1/events",
            "data": found[start : start + limit],
            "has_more": start + limit < len(found),
        }


@pytest.fixture(autouse=True)
def fast_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stripe_api, "API_RATE", 100_000.0)


@pytest.fixture
def fake() -> Iterator[tuple[FakeEvents, str]]:
    events = FakeEvents()
    with serve(events) as base:
        yield events, base


def stripe_config(config: dict[str, Any], base: str) -> dict[str, Any]:
    config["ENDPOINTS"]["stripe"].update(api_key=API_KEY, api_base=base)
    config["WEBHOOKS_HANDLERS"] = "tests.state_handlers"
    state_handlers.reset()
    return config


@pytest.fixture(params=["sqlite", "postgres"])
def both(request: pytest.FixtureRequest, fake: tuple[FakeEvents, str]) -> Flask:
    if request.param == "sqlite":
        config = base_config(request.getfixturevalue("sqlite_url"))
    else:
        config = base_config(request.getfixturevalue("pg_url"), REDIS_URL=request.getfixturevalue("redis_url"))
    return make_app(stripe_config(config, fake[1]))


def charge_events(count: int, now: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"evt_rec{i:03}",
            "object": "event",
            "created": now - 60 * i,
            "type": "charge.succeeded",
            "data": {"object": {"id": f"ch_{i:03}", "object": "charge", "amount": i}},
        }
        for i in range(count)
    ]


def deliver(app: Flask, event: dict[str, Any]) -> None:
    body = json.dumps(event).encode()
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def handled() -> list[str]:
    return [c["event_id"] for c in state_handlers.CALLS]


def test_reconcile_stores_and_processes_exactly_the_missed_events(both: Flask, fake: tuple[FakeEvents, str]) -> None:
    events, _ = fake
    now = int(time.time())
    events.events = charge_events(250, now)
    missed = {e["id"] for e in events.events[3::6][:40]}
    assert len(missed) == 40
    for event in events.events:
        if event["id"] not in missed:
            deliver(both, event)
    drain(both)
    assert len(handled()) == 210
    late = max(missed)  # on the last page: its delivery arrives while reconciliation runs
    events.on_page = lambda: deliver(both, next(e for e in events.events if e["id"] == late))

    summary = reconcile.reconcile(runtime(both), "stripe", now - 3 * 86400)
    assert (summary.seen, summary.stored, summary.added) == (250, 211, 39)
    assert len(events.pages) == 3  # 100 + 100 + 50
    drain(both)
    assert sorted(handled()) == sorted(e["id"] for e in events.events)  # each once, the 40 included
    reconciled = {r[0] for r in rows(both, "SELECT event_id FROM events WHERE scheme = 'stripe-reconcile'")}
    assert reconciled == missed - {late}
    assert rows(both, "SELECT count(*) FROM events WHERE status = 'processed'") == [(250,)]

    events.on_page = None
    again = reconcile.reconcile(runtime(both), "stripe", now - 3 * 86400)
    assert (again.seen, again.stored, again.added) == (250, 250, 0)
    drain(both)
    assert len(handled()) == 250


def test_cli_reconciles_only_undelivered_events_and_prints_a_summary(
    sqlite_url: str, fake: tuple[FakeEvents, str], tmp_path: Path
) -> None:
    events, base = fake
    now = int(time.time())
    events.events = charge_events(30, now) + charge_events(300, now - 5 * 86400)[29:]  # 29 older than 3 days
    events.events = [dict(e, id=f"{e['id']}_{n}") for n, e in enumerate(events.events)]
    events.undelivered = {e["id"] for e in events.events[:12]}
    app = make_app(stripe_config(base_config(sqlite_url), base))
    config = tmp_path / "webhooks.toml"
    config.write_text(
        f'[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["{STRIPE_SECRET}"]\n'
        f'api_key = "{API_KEY}"\napi_base = "{base}"\n'
    )
    env = {
        "DATABASE_URL": sqlite_url,
        "WEBHOOKS_CONFIG": str(config),
        "WEBHOOKS_HANDLERS": "tests.state_handlers",
        "REDIS_URL": "",
    }
    result = CliRunner().invoke(main, ["reconcile", "stripe", "--since", "3d", "--undelivered"], env=env)
    assert result.exit_code == 0, result.output
    assert "seen 12, already stored 0, added 12" in result.output
    assert all(page["delivery_success"] == ["false"] for page in events.pages)
    stored = {r[0] for r in rows(app, "SELECT event_id FROM events")}
    assert stored == events.undelivered
    result = CliRunner().invoke(main, ["reconcile", "stripe", "--since", "3d"], env=env)
    assert "seen 30, already stored 12, added 18" in result.output
    # The CLI's embedded queue ends with it: the service's sweeper enqueues the rows.
    sweep(runtime(app), age=0)
    drain(app)
    assert sorted(handled()) == sorted(e["id"] for e in events.events[:30])


def test_cli_refuses_an_endpoint_without_api_key(sqlite_url: str, tmp_path: Path) -> None:
    config = tmp_path / "webhooks.toml"
    config.write_text(f'[endpoints.stripe]\nprovider = "stripe"\nsecrets = ["{STRIPE_SECRET}"]\n')
    result = CliRunner().invoke(
        main, ["reconcile", "stripe"], env={"DATABASE_URL": sqlite_url, "WEBHOOKS_CONFIG": str(config)}
    )
    assert result.exit_code == 2 and "needs a stripe endpoint with an api_key" in result.output


def test_idempotency_key_is_the_same_across_a_retry_a_replay_and_a_reconciled_copy(
    sqlite_url: str, tmp_path: Path, fake: tuple[FakeEvents, str]
) -> None:
    events, base = fake
    event = charge_events(1, int(time.time()))[0]
    events.events = [event]
    app = make_app(stripe_config(base_config(sqlite_url), base))
    state_handlers.FAIL_ONCE.add(event["id"])
    deliver(app, event)
    drain(app)  # attempt 1 fails, the retry succeeds
    replayed = app.test_client().post(
        f"/admin/api/events/stripe/{event['id']}/replay", json={"reason": "test"}, headers=admin_headers()
    )
    assert replayed.status_code == 202
    drain(app)
    delivered = [(c["attempt"], c["key"]) for c in state_handlers.CALLS]
    assert [a for a, _ in delivered] == [1, 2, 3]  # the retry, then the replay

    other = make_app(stripe_config(base_config(f"sqlite:///{tmp_path / 'other.db'}"), base))  # it missed the event
    assert reconcile.reconcile(runtime(other), "stripe", int(time.time()) - 3600).added == 1
    drain(other)
    keys = {k for _, k in delivered} | {c["key"] for c in state_handlers.CALLS}
    assert len(state_handlers.CALLS) == 1 and len(keys) == 1 and keys.pop().startswith("whk_")


def test_scheduled_reconciliation_runs_once_per_interval_across_workers(
    sqlite_url: str, fake: tuple[FakeEvents, str]
) -> None:
    import threading

    from tests.conftest import wait_until

    events, base = fake
    events.events = charge_events(3, int(time.time()))
    config = stripe_config(base_config(sqlite_url), base)
    config["ENDPOINTS"]["stripe"]["reconcile_every"] = "10m"
    app = make_app(config)

    def idle() -> bool:
        return not any(t.name == "reconcile-stripe" for t in threading.enumerate())

    first, second = reconcile.scheduled(runtime(app)), reconcile.scheduled(runtime(app))  # two workers' ticks
    first()
    wait_until(lambda: rows(app, "SELECT count(*) FROM events") == [(3,)] and idle())
    second()
    first()
    wait_until(idle)
    assert len(events.pages) == 1  # the interval's run is taken
    window = time.time() - int(events.pages[0]["created[gte]"][0])
    assert 1200 <= window < 1200 + 300  # two intervals back
    drain(app)
    assert sorted(handled()) == sorted(e["id"] for e in events.events)
