"""``webhooks events list|show|replay`` against the same database as the app."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from flask import Flask

from tests import sample_handlers
from tests.conftest import admin_headers, drain, stripe_event, stripe_headers
from webhooks.service.cli import main
from webhooks.worker.sweeper import sweep


@pytest.fixture
def cli_env(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setenv("DATABASE_URL", app.extensions["webhooks"].settings.database_url)
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", "whsec_test_secret")
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("WEBHOOKS_CONFIG", "")
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
    assert sweep(cli_env.extensions["webhooks"], now=later) == 1
    drain(cli_env)
    assert json.loads(run("show", "stripe", "evt_bad"))["status"] == "processed"


def test_single_replay(cli_env: Flask) -> None:
    assert "queued stripe/evt_ok" in run("replay", "stripe", "evt_ok", "--reason", "check")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["list", "--since", "0001-01-01T00:00:00+14:00"], "bad_time"),
        (["list", "--until", "9999-12-31T23:59:59-14:00"], "bad_time"),
        (["list", "--cursor", "²"], "bad_cursor"),
        (["replay", "--status", "failed", "--since", "9999-12-31T23:59:59-14:00", "--dry-run"], "bad_time"),
        (["replay", "stripe", "evt_bad", "--reason", "\udcff"], "bad_reason"),  # a non-UTF-8 argv byte
        (["show", "stripe", "evt_\udcff"], "no event"),
    ],
)
def test_hostile_options_are_a_usage_error_not_a_traceback(cli_env: Flask, args: list[str], reason: str) -> None:
    result = CliRunner().invoke(main, ["events", *args], catch_exceptions=False)
    assert result.exit_code in (1, 2) and reason in result.output, result.output


def test_list_prints_a_header_and_aligned_columns(cli_env: Flask) -> None:
    lines = run("list").splitlines()
    assert lines[0].split() == ["RECEIVED", "STATUS", "ENDPOINT", "TRIES", "TYPE", "EVENT", "ID"]
    assert [line.split()[1:] for line in lines[1:]] == [
        ["failed", "stripe", "5", "charge.refunded", "evt_bad"],
        ["processed", "stripe", "1", "payment_intent.succeeded", "evt_ok"],
    ]
    for column in ("STATUS", "ENDPOINT", "TRIES", "TYPE", "EVENT ID"):  # every cell starts under its heading
        start = lines[0].index(column)
        assert all(line[start - 2 : start] == "  " and line[start] != " " for line in lines), column
    assert run("list", "--status", "ignored") == "no events match\n"
    assert run("list", "--endpoint", "adyen") == "no events match\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["list", "--status", "bogus"],
            "Error: Invalid value for '--status': 'bogus' is not one of 'received', "
            "'queued', 'processing', 'processed', 'failed', 'ignored'.",
        ),
        (
            ["replay", "--status", "done", "--dry-run"],
            "Error: Invalid value for '--status': 'done' is not one of "
            "'received', 'queued', 'processing', 'processed', 'failed', "
            "'ignored'.",
        ),
        (
            ["list", "--since", "yesterday"],
            "Error: Invalid value for '--since': takes an ISO 8601 time in the years 1 "
            "to 9999, UTC unless it has an offset, e.g. 2024-01-31T00:00:00Z (bad_time)",
        ),
        (
            ["list", "--until", "9999-12-31T23:59:59-14:00"],
            "Error: Invalid value for '--until': takes an ISO 8601 time "
            "in the years 1 to 9999, UTC unless it has an offset, e.g. "
            "2024-01-31T00:00:00Z (bad_time)",
        ),
        (
            ["list", "--cursor", "nope"],
            "Error: Invalid value for '--cursor': takes the next_cursor printed by the previous page (bad_cursor)",
        ),
        (
            ["list", "--type", "a\x00b"],
            "Error: Invalid value for '--type': holds a character that cannot be stored "
            "(NUL or an unpaired surrogate) (bad_type)",
        ),
        (
            ["replay", "stripe", "evt_bad", "--reason", "\udcff"],
            "Error: Invalid value for '--reason': holds a character "
            "that cannot be stored (NUL or an unpaired surrogate) "
            "(bad_reason)",
        ),
    ],
)
def test_option_errors_name_the_option_and_the_valid_values(cli_env: Flask, args: list[str], line: str) -> None:
    result = CliRunner().invoke(main, ["events", *args], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == line


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["replay", "stripe", "evt_nope", "--reason", "x"], "Error: no event stripe/evt_nope (not_found)"),
        (["show", "stripe", "evt_nope"], "Error: no event stripe/evt_nope"),
    ],
)
def test_missing_events_are_one_line(cli_env: Flask, args: list[str], line: str) -> None:
    result = CliRunner().invoke(main, ["events", *args], catch_exceptions=False)
    assert (result.exit_code, result.output) == (1, line + "\n")
