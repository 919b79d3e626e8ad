"""Named API tokens: ``webhooks tokens create|list|revoke`` and ``Authorization: Bearer`` on
``/admin/api`` — 401 unknown or revoked, 403 ``read_only`` on changes, the audit's ``who``, the
throttle, no password needed; and the CSRF rule on POST, PATCH and DELETE with Basic auth."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import admin_headers, base_config, drain, make_app, rows, runtime, stripe_event, stripe_headers
from webhooks.admin import tokens
from webhooks.admin.throttle import FREE
from webhooks.service.cli import main

TOKEN = re.compile(r"wht_[A-Za-z0-9_-]{43}")
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("WEBHOOKS_CONFIG", "")
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", "whsec_test_secret")
    return monkeypatch


def cli(app: Flask, *args: str) -> Result:
    """``webhooks tokens …`` against the app's database."""
    env = {"DATABASE_URL": app.extensions["webhooks"].settings.database_url}
    return CliRunner().invoke(main, ["tokens", *args], env=env, catch_exceptions=False)


def create(app: Flask, name: str, *flags: str) -> str:
    result = cli(app, "create", name, *flags)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[-1]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def deliver(client: FlaskClient, event_id: str) -> None:
    body = stripe_event(event_id)
    assert client.post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def test_create_prints_the_token_alone_on_its_last_line_and_stores_only_its_hash(app: Flask, cli_env: object) -> None:
    result = cli(app, "create", "deploy-bot")
    lines = result.stdout.splitlines()
    assert result.exit_code == 0 and TOKEN.fullmatch(lines[-1]) and len(lines) <= 3
    token = lines[-1]
    stored = rows(app, "SELECT name, token_hash, read_only, last_used_at, revoked_at FROM api_tokens")
    assert [tuple(r) for r in stored] == [("deploy-bot", hashlib.sha256(token.encode()).hexdigest(), False, None, None)]
    assert token[4:] not in str([tuple(r) for r in rows(app, "SELECT * FROM api_tokens")])
    assert create(app, "other") != token  # a fresh random token each time


def test_a_token_reads_the_api_and_its_use_is_recorded(app: Flask, client: FlaskClient, cli_env: object) -> None:
    token = create(app, "grafana")
    deliver(client, "evt_1")
    answer = client.get("/admin/api/events", headers=bearer(token))
    assert answer.status_code == 200 and [e["event_id"] for e in answer.get_json()["events"]] == ["evt_1"]
    listed = client.get("/admin/api/tokens", headers=bearer(token)).get_json()["tokens"]
    assert [set(t) for t in listed] == [{"name", "read_only", "created_at", "last_used_at", "revoked_at"}]
    assert (listed[0]["name"], listed[0]["read_only"], listed[0]["revoked_at"]) == ("grafana", False, None)
    assert listed[0]["last_used_at"] is not None
    assert "grafana" in cli(app, "list").stdout and "never" not in cli(app, "list").stdout
    page = client.get("/admin/tokens", headers=admin_headers()).get_data(as_text=True)
    assert "grafana" in page and 'href="/admin/tokens"' in page and token not in page  # listed, in the nav
    assert client.get("/admin/tokens", headers=bearer(token)).status_code == 401  # the console keeps the password


def test_last_use_is_written_at_most_once_a_minute(app: Flask, cli_env: object) -> None:
    token = create(app, "poller")
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    sessions = runtime(app).sessions

    def last_used() -> object:
        return rows(app, "SELECT last_used_at FROM api_tokens")[0][0]

    for now in (t0, t0 + timedelta(seconds=59)):
        with sessions() as session:
            assert tokens.authenticate(session, token, now=now) is not None
    first = last_used()
    assert first is not None and str(first).startswith("2030-01-01 00:00:00")
    with sessions() as session:
        tokens.authenticate(session, token, now=t0 + timedelta(seconds=61))
    assert str(last_used()).startswith("2030-01-01 00:01:01")


def test_unknown_and_revoked_tokens_are_401(app: Flask, client: FlaskClient, cli_env: object) -> None:
    token = create(app, "leaver")
    assert client.get("/admin/api/events", headers=bearer(token)).status_code == 200
    revoked = cli(app, "revoke", "leaver")
    assert revoked.exit_code == 0, revoked.output
    for wrong in (token, "wht_" + "A" * 43, "not-a-token", ""):
        answer = client.get("/admin/api/events", headers=bearer(wrong))
        assert answer.status_code == 401 and answer.get_json()["error"] == "unauthorized"
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert rows(app, "SELECT revoked_at IS NOT NULL FROM api_tokens")[0][0]
    assert cli(app, "list", "--json").stdout.count('"revoked_at": null') == 0


def test_a_read_only_token_reads_but_changes_nothing(app: Flask, client: FlaskClient, cli_env: object) -> None:
    token = create(app, "auditor", "--read-only")
    deliver(client, "evt_1")
    drain(app)
    assert client.get("/admin/api/events/stripe/evt_1", headers=bearer(token)).status_code == 200
    for url in ("/admin/api/events/stripe/evt_1/replay", "/admin/api/events/replay", "/admin/api/destinations/x/pause"):
        answer = client.post(url, json={"reason": "x", "endpoint": "stripe"}, headers=bearer(token))
        assert (answer.status_code, answer.get_json()["error"]) == (403, "read_only"), url
    assert client.get("/admin/api/replays", headers=bearer(token)).get_json()["replays"] == []
    assert rows(app, "SELECT status FROM events")[0][0] == "processed"


def test_the_replay_audit_names_the_token(app: Flask, client: FlaskClient, cli_env: object) -> None:
    token = create(app, "ops-bot")
    deliver(client, "evt_1")
    drain(app)
    answer = client.post("/admin/api/events/stripe/evt_1/replay", json={"reason": "retry"}, headers=bearer(token))
    assert answer.status_code == 202
    client.post("/admin/api/events/stripe/evt_1/replay", json={"reason": "again"}, headers=admin_headers())
    audit = client.get("/admin/api/replays", headers=bearer(token)).get_json()["replays"]
    assert [(r["who"], r["reason"]) for r in audit] == [("admin", "again"), ("ops-bot", "retry")]


def test_tokens_work_without_a_password_while_the_console_stays_off(sqlite_url: str, cli_env: object) -> None:
    app = make_app(base_config(sqlite_url, WEBHOOKS_ADMIN_PASSWORD=""))
    token = create(app, "headless")
    client = app.test_client()
    assert client.get("/admin/api/events", headers=bearer(token)).status_code == 200
    assert client.get("/admin/api/events", headers=bearer("wht_nope")).status_code == 401
    for url in ("/admin/", "/admin/tokens", "/admin/api/events"):  # no token: off, as before
        assert client.get(url, headers=admin_headers()).status_code == 404, url
    assert client.get("/admin/", headers=bearer(token)).status_code == 404


def probe(app: Flask) -> None:
    """A PATCH/DELETE route on each admin blueprint (the endpoints API that brings real ones comes
    later): the blueprints' own before_request guards run for it, as for any of their routes."""
    methods = ["PATCH", "DELETE", "POST"]
    app.add_url_rule("/admin/api/probe", endpoint="admin_api.probe", view_func=lambda: ("", 204), methods=methods)
    app.add_url_rule("/admin/probe", endpoint="admin_pages.probe", view_func=lambda: ("", 204), methods=methods)


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
def test_patch_and_delete_are_guarded_like_post(app: Flask, method: str, cli_env: object) -> None:
    probe(app)
    client = app.test_client()
    token = create(app, "automation")
    foreign = [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}]
    for headers in foreign:
        answer = client.open("/admin/api/probe", method=method, headers=admin_headers() | headers)
        assert (answer.status_code, answer.get_json()) == (403, {"error": "cross_site_request"})
        assert client.open("/admin/probe", method=method, headers=admin_headers() | headers).status_code == 403
        # A Bearer token is no browser's cached credential: the origin rule does not judge it.
        assert client.open("/admin/api/probe", method=method, headers=bearer(token) | headers).status_code == 204
    assert client.open("/admin/api/probe", method=method, headers=admin_headers()).status_code == 204
    refused = client.open("/admin/api/probe", method=method, data=b"x=1", headers=admin_headers())
    assert (refused.status_code, refused.get_json()) == (415, {"error": "json_required"})
    assert client.open("/admin/probe", method=method, headers=admin_headers()).status_code == 403  # no CSRF token
    read_only = create(app, "viewer", "--read-only")
    answer = client.open("/admin/api/probe", method=method, headers=bearer(read_only))
    assert (answer.status_code, answer.get_json()["error"]) == (403, "read_only")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("admin", "reserved"),
        ("cli:alice", "reserved"),
        ("two words", "bad token name"),
        ("x" * 101, "bad token name"),
    ],
)
def test_reserved_and_malformed_names_are_refused(app: Flask, cli_env: object, name: str, says: str) -> None:
    result = CliRunner().invoke(
        main, ["tokens", "create", name], env={"DATABASE_URL": app.extensions["webhooks"].settings.database_url}
    )
    assert result.exit_code == 1 and says in result.output and len(result.output.strip().splitlines()) == 1
    assert rows(app, "SELECT count(*) FROM api_tokens")[0][0] == 0


def test_a_taken_or_revoked_name_is_refused(app: Flask, cli_env: object) -> None:
    create(app, "ci")
    assert cli(app, "create", "ci").exit_code == 1
    cli(app, "revoke", "ci")
    again = cli(app, "create", "ci")
    assert again.exit_code == 1 and "revoked" in again.output
    assert cli(app, "revoke", "ci").exit_code == 1 and cli(app, "revoke", "nobody").exit_code == 1


def test_wrong_tokens_are_throttled_like_wrong_passwords(app: Flask, client: FlaskClient, cli_env: object) -> None:
    token = create(app, "real")
    attacker, operator = {"REMOTE_ADDR": "203.0.113.7"}, {"REMOTE_ADDR": "198.51.100.9"}
    for n in range(FREE):
        guess = client.get("/admin/api/events", headers=bearer(f"wht_guess{n}"), environ_overrides=attacker)
        assert guess.status_code == 401
    blocked = client.get("/admin/api/events", headers=bearer(token), environ_overrides=attacker)
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) > 0  # even the right token
    assert blocked.get_json() == {"error": "login_throttled"}
    assert client.get("/admin/api/events", headers=admin_headers(), environ_overrides=attacker).status_code == 429
    assert client.get("/admin/api/events", headers=bearer(token), environ_overrides=operator).status_code == 200


def test_tokens_on_postgresql(pg_url: str, cli_env: object) -> None:
    app = make_app(base_config(pg_url))
    client = app.test_client()
    token = create(app, "pg-bot")
    assert client.get("/admin/api/events", headers=bearer(token)).status_code == 200
    listed = client.get("/admin/api/tokens", headers=admin_headers()).get_json()["tokens"]
    assert [(t["name"], t["last_used_at"] is not None) for t in listed] == [("pg-bot", True)]
    assert cli(app, "create", "pg-bot").exit_code == 1
    assert cli(app, "revoke", "pg-bot").exit_code == 0
    assert client.get("/admin/api/events", headers=bearer(token)).status_code == 401
