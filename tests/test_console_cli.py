"""``webhooks events list|show|replay`` against the same database as the app."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from flask import Flask

from tests import sample_handlers
from tests.conftest import admin_headers, drain, stripe_event, stripe_headers
from webhooks.cli import main


@pytest.fixture
def cli_env(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setenv("DATABASE_URL", app.extensions["webhooks"].settings.database_url)
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", "whsec_test_secret")
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("WEBHOOKS_CONFIG", raising=False)
    sample_handlers.FAIL_TYPES.add("charge.refunded")
    client = app.test_client()
    for event_id, type_ in (("evt_ok", "payment_intent.succeeded"), ("evt_bad", "charge.refunded")):
        body = stripe_event(event_id, type_)
        client.post("/webhooks/stripe", data=body, headers=stripe_headers(body))
    drain(app)
    sample_handlers.FAIL_TYPES.clear()
    return app


def run(*args: str, input: str | None = None) -> str:
    result = CliRunner().invoke(main, ["events", *args], input=input, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_list_and_show(cli_env: Flask) -> None:
    assert [e["event_id"] for e in json.loads(run("list", "--json"))["events"]] == ["evt_bad", "evt_ok"]
    assert "evt_bad" in run("list", "--status", "failed") and "evt_ok" not in run("list", "--status", "failed")
    shown = json.loads(run("show", "stripe", "evt_bad"))
    assert shown["status"] == "failed" and len(shown["attempt_log"]) == 5


def test_bulk_replay_dry_run_then_confirmed_and_audited(cli_env: Flask) -> None:
    assert "1 event(s) match" in run("replay", "--status", "failed", "--dry-run")
    bad = CliRunner().invoke(main, ["events", "replay", "--status", "failed"])
    assert bad.exit_code != 0 and "--reason is required" in bad.output
    assert "queued 1 event(s)" in run("replay", "--status", "failed", "--reason", "fixed", input="y\n")
    entry = cli_env.test_client().get("/admin/api/replays", headers=admin_headers()).get_json()["replays"][0]
    assert entry["who"].startswith("cli:") and entry["reason"] == "fixed"
    assert json.loads(run("show", "stripe", "evt_bad"))["status"] == "queued"
    # Without REDIS_URL the CLI's queue is its own: the app's sweeper picks the queued row up.
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert cli_env.extensions["webhooks"].sweep(now=later) == 1
    drain(cli_env)
    assert json.loads(run("show", "stripe", "evt_bad"))["status"] == "processed"


def test_single_replay(cli_env: Flask) -> None:
    assert "queued stripe/evt_ok" in run("replay", "stripe", "evt_ok", "--reason", "check")


@pytest.mark.parametrize(("args", "reason"), [
    (["list", "--since", "0001-01-01T00:00:00+14:00"], "bad_time"),
    (["list", "--until", "9999-12-31T23:59:59-14:00"], "bad_time"),
    (["list", "--cursor", "²"], "bad_cursor"),
    (["replay", "--status", "failed", "--since", "9999-12-31T23:59:59-14:00", "--dry-run"], "bad_time"),
    (["replay", "stripe", "evt_bad", "--reason", "\udcff"], "bad_reason"),  # a non-UTF-8 argv byte
    (["show", "stripe", "evt_\udcff"], "no event"),
])
def test_hostile_options_are_a_usage_error_not_a_traceback(cli_env: Flask, args: list[str], reason: str) -> None:
    result = CliRunner().invoke(main, ["events", *args], catch_exceptions=False)
    assert result.exit_code in (1, 2) and reason in result.output, result.output
