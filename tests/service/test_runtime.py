"""Each app and each worker owns its runtime: nothing is process-wide, so two never cross."""

from __future__ import annotations

import contextvars
import threading
from pathlib import Path

import pytest
from flask import Flask

from tests.conftest import base_config, make_app, rows, stripe_event, stripe_headers, wait_until
from webhooks import runtime
from webhooks.errors import NoRuntimeError
from webhooks.jobs.process import process_event
from webhooks.jobs.worker import Worker


def post(app: Flask, event_id: str) -> None:
    body = stripe_event(event_id)
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


def outcome(app: Flask) -> tuple[list[tuple[str, str]], list[str]]:
    """The app's events with their status, and the events its handlers ran for."""
    events = [(r.event_id, r.status) for r in rows(app, "SELECT event_id, status FROM events")]
    return events, [r.event_id for r in rows(app, "SELECT event_id FROM test_handler_calls")]


@pytest.mark.parametrize("embedded", [False, True], ids=["worker", "embedded"])
def test_two_apps_in_one_process_each_process_their_own_event(tmp_path: Path, embedded: bool) -> None:
    """Two apps on two databases: each event is processed by its own app's worker, with that
    app's runtime (a shared one would look for the other app's event in the wrong database)."""
    flag = {"WEBHOOKS_EMBEDDED_WORKER": str(embedded).lower()}
    apps = {f"evt_{name}": make_app(base_config(f"sqlite:///{tmp_path / name}.db", **flag)) for name in "ab"}
    for event_id, app in apps.items():
        post(app, event_id)  # the embedded worker starts with the first request
    if embedded:
        wait_until(lambda: all(outcome(app)[0] == [(e, "processed")] for e, app in apps.items()))
    else:

        def work() -> None:  # the production worker class, in a context where nothing is bound
            for app in reversed(apps.values()):
                rt = app.extensions["webhooks"]
                Worker([rt.queue.queue], connection=rt.queue.connection, runtime=rt).work(burst=True)

        contextvars.Context().run(work)
    for event_id, app in apps.items():
        assert outcome(app) == ([(event_id, "processed")], [event_id])


def test_creating_an_app_changes_no_global_runtime_state(sqlite_url: str) -> None:
    before = dict(vars(runtime))
    refused: list[NoRuntimeError] = []

    def look() -> None:
        try:
            runtime.current()
        except NoRuntimeError as exc:
            refused.append(exc)

    def create_and_look() -> None:
        make_app(base_config(sqlite_url))
        look()

    contextvars.Context().run(create_and_look)  # not in the context that made it either
    thread = threading.Thread(target=look)  # nor in another thread
    thread.start()
    thread.join()
    assert len(refused) == 2
    assert dict(vars(runtime)) == before


def test_a_job_run_with_no_runtime_in_scope_fails_naming_the_cause(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a worker, and not in a plain ``rq worker``'s environment (no ``REDIS_URL``)."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    post(app, "evt_unscoped")

    def unscoped() -> None:
        with pytest.raises(NoRuntimeError, match="no webhooks runtime in scope: run jobs with `webhooks worker`"):
            process_event("stripe", "evt_unscoped")

    contextvars.Context().run(unscoped)
    assert outcome(app) == ([("evt_unscoped", "queued")], [])  # untouched: a worker with a runtime runs it
