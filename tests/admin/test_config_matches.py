"""Which secret matched (#32): an event records the matching database secret's id beside its
index (``secret_id``; null for the file's secrets, which have no id), and each database secret its
``last_matched_at``, noted in memory by the receiver and written every few seconds and at exit,
never by the request itself."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from flask import Flask

from tests.admin.test_runtime_config import KEYS, OTHER, SECRET, SHOP, api, config, deliver, rt, within_a_second
from tests.conftest import admin_headers, base_config, make_app, stripe_event, stripe_headers, wait_until
from tests.support.processes import clean_env, gunicorn_cmd, one, running, wait_http
from tests.support.servers import free_port
from webhooks.receiver import last_matched as matches


@pytest.fixture
def app(sqlite_url: str) -> Flask:
    return make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))


def secrets_of(app: Flask, name: str) -> dict[str, dict[str, Any]]:
    """The endpoint's secrets as listed, by id."""
    [found] = [e for e in api(app.test_client(), "GET", "/endpoints").get_json()["endpoints"] if e["name"] == name]
    return {s["id"]: s for s in found["secrets"]}


def two_secrets(app: Flask) -> tuple[str, str]:
    """``shop-eu`` made through the API with ``SECRET`` and then ``OTHER``: their ids, in that order."""
    client = app.test_client()
    assert api(client, "POST", "/endpoints", SHOP).status_code == 201
    added = api(client, "POST", "/endpoints/shop-eu/secrets", {"value": OTHER})
    assert added.status_code == 201
    [first] = [i for i in secrets_of(app, "shop-eu") if i != added.get_json()["id"]]
    return first, added.get_json()["id"]


def detail(app: Flask, name: str, event_id: str) -> Any:
    return api(app.test_client(), "GET", f"/events/{name}/{event_id}").get_json()


def test_an_event_names_the_database_secret_that_matched(app: Flask) -> None:
    first, second = two_secrets(app)
    assert deliver(app, "shop-eu", "evt_by_other", OTHER) == 200
    assert deliver(app, "shop-eu", "evt_by_first", SECRET) == 200
    by_other, by_first = detail(app, "shop-eu", "evt_by_other"), detail(app, "shop-eu", "evt_by_first")
    assert (by_other["secret_index"], by_other["secret_id"]) == (1, second)
    assert (by_first["secret_index"], by_first["secret_id"]) == (0, first)
    page = app.test_client().get("/admin/events/shop-eu/evt_by_other", headers=admin_headers())
    assert page.status_code == 200 and second in page.get_data(as_text=True)

    # The file's endpoint: its secrets have no id; secret_index alone says which matched.
    body = stripe_event("evt_file")
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    from_file = detail(app, "stripe", "evt_file")
    assert (from_file["secret_index"], from_file["secret_id"]) == (0, None)


def test_last_matched_is_written_from_memory_not_by_the_request(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matches.Matches, "FLUSH_SECONDS", 3600.0)  # no timer in this test: only the exit's flush
    first, second = two_secrets(app)
    assert deliver(app, "shop-eu", "evt_noted", OTHER) == 200
    assert secrets_of(app, "shop-eu")[second]["last_matched_at"] is None  # noted, not written
    matches.flush_all()  # what atexit runs when a web process exits
    listed = secrets_of(app, "shop-eu")
    assert listed[first]["last_matched_at"] is None
    assert listed[second]["last_matched_at"] is not None
    assert deliver(app, "shop-eu", "evt_refused", "whsec_not_one_of_them") == 400
    matches.flush_all()
    assert secrets_of(app, "shop-eu")[first]["last_matched_at"] is None  # a refused delivery matched nothing


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_last_matched_shows_on_every_process(db: str, request: pytest.FixtureRequest) -> None:
    """A delivery to one process; the secret's last match listed by another, within the flush's few
    seconds (polled with a deadline); the endpoint's other secret, never matched, stays null."""
    first = make_app(config(request, db))
    second = make_app(config(request, db))
    one_id, other_id = two_secrets(first)
    within_a_second(lambda: deliver(second, "shop-eu", "evt_on_second", OTHER) == 200)

    def listed() -> dict[str, dict[str, Any]]:
        return secrets_of(first, "shop-eu")

    found = wait_until(lambda: listed() if listed()[other_id]["last_matched_at"] else None, timeout=30)
    assert found[one_id]["last_matched_at"] is None
    assert rt(second).config_version == rt(first).config_version  # a match is no configuration change


@pytest.mark.slow
def test_last_matched_under_gunicorn_processes(sqlite_url: str, tmp_path: Any) -> None:
    """Two gunicorn web processes (the Procfile's web command): deliveries spread over both, each
    process's notes written, the secret never matched still null after they stop."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = clean_env(
        DATABASE_URL=sqlite_url,
        WEBHOOKS_ADMIN_PASSWORD=base_config(sqlite_url)["WEBHOOKS_ADMIN_PASSWORD"],
        WEBHOOKS_ENCRYPTION_KEYS=KEYS,
        WEBHOOKS_EMBEDDED_WORKER="false",
        WEB_CONCURRENCY="2",
    )
    make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=KEYS))  # migrated
    with running(gunicorn_cmd(port), env):
        wait_http(f"{base}/healthz")
        auth = {"headers": admin_headers(), "timeout": 30}
        assert requests.post(f"{base}/admin/api/endpoints", json=SHOP, **auth).status_code == 201  # type: ignore[arg-type]
        added = requests.post(f"{base}/admin/api/endpoints/shop-eu/secrets", json={"value": OTHER}, **auth)  # type: ignore[arg-type]
        other_id = added.json()["id"]

        def sent(n: int) -> bool:
            body = stripe_event(f"evt_gunicorn_{n}")
            answer = requests.post(
                f"{base}/webhooks/shop-eu", data=body, headers=stripe_headers(body, OTHER), timeout=30
            )
            return answer.status_code == 200

        for n in range(10):  # each process has the endpoint within a second (a loaded machine: retried)
            wait_until(lambda n=n: sent(n), timeout=30)
        wait_until(
            lambda: one(sqlite_url, f"SELECT last_matched_at FROM config_secrets WHERE id = '{other_id}'")[0],
            timeout=30,
        )  # type: ignore[index]
    never = one(
        sqlite_url, f"SELECT count(*) FROM config_secrets WHERE id != '{other_id}' AND last_matched_at IS NOT NULL"
    )
    assert never[0] == 0  # type: ignore[index]
