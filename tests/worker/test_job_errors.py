"""A job the worker cannot run (its function does not import, its data does not read) is never
silent: counted in ``webhooks_job_errors_total{reason}``, written on its event as "worker could not
run this job: …", shown on the console's overview, and the event ends ``failed`` after the usual
attempts instead of staying ``queued`` with 0 tries. A worker that cannot import the job function
refuses to start, in one line naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask
from rq.job import Job

from tests import sample_handlers
from tests.conftest import ADMIN_PASSWORD, admin_headers, base_config, make_app, rows, stripe_event, stripe_headers
from webhooks import metrics
from webhooks.queue import JOB, job_id
from webhooks.runtime import Runtime
from webhooks.service.cli import main
from webhooks.vocabulary import JOB_ERROR
from webhooks.worker.loop import Worker


def unimportable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job function's package cannot be imported, as when a clone's webhooks/ (no jobs/)
    shadowed the installed package: RQ ends in "module 'webhooks' has no attribute 'jobs.process'"."""
    monkeypatch.setitem(sys.modules, "webhooks.jobs", None)
    monkeypatch.setitem(sys.modules, "webhooks.jobs.process", None)


def job_errors(reason: str) -> float:
    return float(metrics.JOB_ERRORS.labels(reason)._value.get())


def stored(sqlite_url: str, event_id: str, type_: str = "payment_intent.succeeded", attempts: str = "3") -> Flask:
    """An app on SQLite (at most ``attempts`` tries) holding one delivered Stripe event, its job queued."""
    app = make_app(base_config(sqlite_url, WEBHOOKS_MAX_ATTEMPTS=attempts))
    body = stripe_event(event_id, type_)
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    return app


def work(rt: Runtime) -> None:
    Worker([rt.queue.queue], connection=rt.queue.connection, runtime=rt).work(burst=True)


def test_a_job_whose_function_does_not_import_ends_failed_counted_and_said(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = stored(sqlite_url, "evt_unimportable")
    rt: Runtime = app.extensions["webhooks"]
    client = app.test_client()
    before = job_errors("import")
    unimportable(monkeypatch)

    work(rt)  # RQ retries the job at once (WEBHOOKS_RETRY_BASE_SECONDS=0) until its tries are spent

    ((status, attempts, error),) = rows(
        app, "SELECT status, attempts, last_error FROM events WHERE event_id = 'evt_unimportable'"
    )
    assert (status, attempts) == ("failed", 3)
    assert error.startswith(JOB_ERROR) and "process_event" in error  # RQ's ValueError after the AttributeError
    # Each of its three tries counted and logged under its job's id. The counter is the process's:
    # another test's embedded worker still running a job while webhooks.jobs is unimportable here
    # counts too (seen once: 5), so the exact count is the log's, for this job.
    said = f"worker could not run job {job_id('stripe', 'evt_unimportable')} (import)"
    assert sum(r.getMessage().startswith(said) for r in caplog.records) == 3
    assert job_errors("import") - before >= 3
    recorded = rows(app, "SELECT status, error FROM attempts WHERE event_id = 'evt_unimportable' ORDER BY number")
    assert [r[0] for r in recorded] == ["error", "error", "error"]
    assert all(r[1].startswith(JOB_ERROR) for r in recorded)

    monkeypatch.undo()
    page = client.get("/admin/events/stripe/evt_unimportable", headers=admin_headers())
    assert page.status_code == 200 and "worker could not run this job: ValueError" in page.text
    overview = client.get("/admin/overview", headers=admin_headers())
    assert overview.status_code == 200
    assert 'Worker could not run <b id="job-errors">3</b> jobs in the last day' in overview.text
    detail = client.get("/admin/api/events/stripe/evt_unimportable", auth=("admin", ADMIN_PASSWORD)).get_json()
    assert detail["status"] == "failed" and detail["last_error"].startswith(JOB_ERROR)


def test_a_job_whose_data_does_not_read_is_counted(sqlite_url: str) -> None:
    app = make_app(base_config(sqlite_url))
    rt: Runtime = app.extensions["webhooks"]
    job = rt.queue.queue.enqueue(JOB, "stripe", "evt_unreadable", job_id="wh-unreadable")
    rt.queue.connection.hset(Job.key_for(job.id), "data", b"not a pickle")  # a corrupted job hash
    before = job_errors("deserialize")

    work(rt)

    assert job_errors("deserialize") - before == 1
    assert Job.fetch(job.id, connection=rt.queue.connection).get_status() == "failed"


def test_an_error_before_the_claim_is_other_and_recorded(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app = stored(sqlite_url, "evt_before_claim", attempts="1")
    rt: Runtime = app.extensions["webhooks"]
    before = job_errors("other")

    def broken(*args: object) -> str:
        raise RuntimeError("no label for you")

    monkeypatch.setattr(metrics, "endpoint_label", broken)  # jobs.process asks it before its claim
    work(rt)

    assert job_errors("other") - before == 1
    ((status, error),) = rows(app, "SELECT status, last_error FROM events WHERE event_id = 'evt_before_claim'")
    assert status == "failed" and error == JOB_ERROR + "RuntimeError: no label for you"


def test_a_job_that_fails_in_its_handler_is_no_job_error(sqlite_url: str) -> None:
    app = stored(sqlite_url, "evt_handler_fails", "charge.refunded", attempts="1")
    sample_handlers.FAIL_TYPES.add("charge.refunded")  # after make_app, which resets them; before the job runs
    rt: Runtime = app.extensions["webhooks"]
    before = {reason: job_errors(reason) for reason in ("import", "deserialize", "other")}

    work(rt)

    ((status, error),) = rows(app, "SELECT status, last_error FROM events WHERE event_id = 'evt_handler_fails'")
    assert status == "failed" and not error.startswith(JOB_ERROR)
    assert {reason: job_errors(reason) for reason in before} == before


@pytest.mark.parametrize("command", [["worker"], ["serve-worker"], ["serve", "--port", "1"]])
def test_a_worker_that_cannot_import_the_job_refuses_to_start_in_one_line(
    command: list[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    unimportable(monkeypatch)
    (tmp_path / "empty.toml").write_text("")
    env = {
        "DATABASE_URL": sqlite_url,
        "REDIS_URL": "redis://127.0.0.1:1/0",  # never reached: the check comes first
        "WEBHOOKS_CONFIG": str(tmp_path / "empty.toml"),
        "WEBHOOKS_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    if command[0] != "worker":
        env["REDIS_URL"] = ""
    result = CliRunner().invoke(main, command, env=env)
    assert result.exit_code != 0
    # A JSON log record here is another thread's (an earlier test's worker in this process, still
    # winding down, writes into whatever stdout is then): the command's own answer is plain text.
    lines = [line for line in result.output.strip().splitlines() if not line.startswith('{"ts": ')]
    assert len(lines) == 1, result.output
    assert f"cannot import the job function {JOB}" in lines[0]
    assert "pip install ." in lines[0]


def test_the_procfiles_web_that_runs_jobs_itself_refuses_to_start_in_one_line(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without ``REDIS_URL`` each web process of the Procfile's gunicorn runs the jobs itself (its
    embedded worker): the master checks the job function once, before it forks any."""
    import logging
    from types import SimpleNamespace

    from webhooks.service import gunicorn_conf

    root = logging.getLogger()  # the master configures logging: this test's change only
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    (tmp_path / "empty.toml").write_text("")
    for name, value in {
        "DATABASE_URL": sqlite_url,
        "WEBHOOKS_CONFIG": str(tmp_path / "empty.toml"),
        "WEBHOOKS_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("REDIS_URL", raising=False)
    make_app(base_config(sqlite_url))  # the database at its head, as the release step leaves it
    server = SimpleNamespace(master_pid=0, cfg=SimpleNamespace(address=[]))
    gunicorn_conf.on_starting(server)  # importable: it starts
    unimportable(monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        gunicorn_conf.on_starting(server)
    said = str(stopped.value)
    assert said.startswith(f"Error: cannot import the job function {JOB}") and "\n" not in said
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # jobs are the worker's: no check here
    gunicorn_conf.on_starting(server)
