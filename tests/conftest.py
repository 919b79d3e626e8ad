"""Fixtures: apps on SQLite (embedded queue) and on real PostgreSQL + Redis, and signers.

Real services are the suite's own throwaway PostgreSQL cluster and redis-server (tests/support/servers.py:
temporary directories, free ports, started once per session when a test first needs them, stopped
after); a server the user names with ``TEST_DATABASE_URL`` / ``TEST_REDIS_URL`` is used instead, and
only then. Without the binaries (or the named server) those tests skip on a laptop but fail under ``CI=true``.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, settings
from rq.worker import base as rq_base

from tests import sample_handlers
from tests.support import environment, lanes, servers, slow_check, templates
from tests.support.templates import migrated
from webhooks import create_app
from webhooks.runtime import Runtime
from webhooks.worker.burst import run_queued

# pytester: tests/testing/test_user_project.py runs the handler-testing example as a project of its own.
pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PAYLOADS = Path(__file__).resolve().parent / "payloads"
# Servers the user named; unset (the default), the suite starts its own and never touches the machine's.
PG_URL = os.environ.get("TEST_DATABASE_URL", "")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "")
# Before any app or process starts: nothing from the developer's shell or working directory
# (a webhooks.toml, STRIPE_WEBHOOK_SECRET, DATABASE_URL…) reaches them (tests/support/environment.py).
environment.isolate(os.environ)
environment.keep_bytecode(os.environ)  # before the test processes start: they inherit it
atexit.register(servers.stop_all)  # a session cut short (Ctrl-C in a fixture) still leaves no server


STOP_SIGNALS: list[int] = []  # SIGINT/SIGTERM received by this run


def _stop(signum: int, frame: Any) -> None:
    """SIGINT and SIGTERM end the run with pytest's summary, then its fixtures' teardown and the
    ``atexit`` hook remove the suite's servers and their ``wh-test-*`` directories (SIGTERM used to
    kill pytest where it stood and leave them). Python drops an exception raised where it cannot
    propagate (an at-fork callback, a finalizer): ``pytest_runtest_protocol`` then stops the run
    after the current test."""
    STOP_SIGNALS.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGINT, _stop)
signal.signal(signal.SIGTERM, _stop)
# What SIGINT and SIGTERM do between tests. RQ's worker (run in-process by ``drain`` and the
# worker tests), ``webhooks worker``'s loop and ``webhooks serve`` install handlers of their own and
# left them: Ctrl-C and SIGTERM then no longer stopped pytest. ``pytest_runtest_protocol`` puts these back.
SIGNAL_HANDLERS = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}


@pytest.fixture(autouse=True, scope="session")
def _rq_workers_leave_signals_to_pytest() -> Iterator[None]:
    """An RQ worker run in this process (``drain``, the worker tests) does not take SIGINT and SIGTERM
    for its warm shutdown: a Ctrl-C in the middle of a job only stopped that worker, and the run went
    on. As ``webhooks.worker.embedded``'s worker does, it installs none; RQ keeps the hook's name
    (``monkeypatch`` fails if it goes), and ``webhooks worker``'s own loop is undone after its test."""
    patch = pytest.MonkeyPatch()
    patch.setattr(rq_base.BaseWorker, "_install_signal_handlers", lambda self: None)
    yield
    patch.undo()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every module the tests import is loaded: what lives now lives for the run (#39)."""
    _freeze()


def _freeze() -> None:
    """A full collection, then what survived moves to the interpreter's permanent generation
    (``gc.freeze``), which no later collection walks. A collection walked every object the imports
    made (the SDKs, SQLAlchemy, Flask: a few hundred thousand), 0.1–0.2 s each; ``pg_url`` collects
    twice per test, the interpreter on its own now and then. After a freeze it walks only what the
    tests made since: a few milliseconds. A test's garbage is collected before its end is frozen."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    from webhooks.receiver import duplicates
    from webhooks.runtime import watch as config_watch

    config_watch.stop_all()  # a test's runtimes end with it: no watcher tries its dropped database
    duplicates.drop_all()  # nor a duplicate count's timer (it logged after a run's summary once)
    _freeze()  # the test's fixtures are gone (pytest dropped them): what is left lives on
    for signum, handler in SIGNAL_HANDLERS.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
    if STOP_SIGNALS:
        pytest.exit(f"stopped by signal {STOP_SIGNALS[0]}", returncode=pytest.ExitCode.INTERRUPTED)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--containers",
        action="store_true",
        help="run tests/containers (the image, compose and the chart under podman: .ci/run, after the README's command)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/containers only with ``--containers`` (#40: .ci/run runs them after the README's command)."""
    if collection_path.name == "containers" and collection_path.parent == Path(__file__).parent:
        return not config.getoption("--containers")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests (servers, processes, real time) run in ``lanes.LANES`` lanes, one test at a
    time each (``--dist loadgroup``; tests/support/lanes.py); the fast ones spread over every process."""
    found = slow_check.unmarked(
        (item.path, getattr(item, "originalname", item.name), getattr(item, "fixturenames", ()), _slow(item))
        for item in items
        if isinstance(item, pytest.Function)
    )
    if found:
        raise pytest.UsageError(f"these tests start a process or a server: mark them @pytest.mark.slow: {found}")
    if not getattr(config.option, "loadgroup", False):  # set in xdist's test processes; -n 0: no lanes
        return
    slow = [item for item in items if _slow(item)]
    lane = lanes.assign(_module(item) for item in slow)
    for item in slow:
        lanes.put(item, lane[_module(item)])


def _slow(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None


def _module(item: pytest.Item) -> str:
    return Path(str(item.fspath)).relative_to(Path(__file__).parent.parent).as_posix()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test's captured output may hold what a hostile payload carried (a lone surrogate): written
    with backslash escapes, so a report can always be encoded (pytest-xdist sends it as UTF-8)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [
        (name, text.encode("utf-8", "backslashreplace").decode("utf-8")) for name, text in report.sections
    ]


STRIPE_SECRET = "whsec_test_secret"
ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
ADMIN_PASSWORD = "admin-test-password"

# No property test times its examples (Hypothesis' default deadline is 200 ms): on a loaded machine
# a slow example is not a failure. A test's own ``settings`` still overrides the other fields.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


def unavailable(what: str, exc: Exception) -> None:
    message = f"{what} not reachable ({exc.__class__.__name__}: {exc})"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " — required under CI=true")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05) -> Any:
    """``predicate``'s first truthy value, polled until ``timeout`` seconds pass.

    Only for something that will happen: the deadline is generous (a loaded 2-core machine running
    two copies of the suite is several times slower than an idle one) and costs nothing when the
    condition comes true, which is the only case that passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file that does not exist yet (``migrated`` makes it a copy of the session's template)."""
    return f"sqlite:///{tmp_path / 'webhooks.db'}"


@pytest.fixture(scope="session", autouse=True)
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[templates.SqliteTemplate]:
    """This session's migrated SQLite file (tests/support/templates.py), built by the first test that needs it."""
    template = templates.SqliteTemplate(tmp_path_factory.mktemp("template"))
    templates.SQLITE.append(template)
    yield template
    templates.SQLITE.remove(template)


def _server(named: str | None, make: Callable[[], Any], what: str) -> Iterator[str]:
    """``named`` when the user named a server, else one ``make`` builds, started now (the first
    test that needs it) and removed at the session's end."""
    if named:
        yield named
        return
    try:
        server = make()
        server.start()
    except servers.Unavailable as exc:
        unavailable(what, exc)
    yield server.url
    server.remove()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """The PostgreSQL server test databases are made on: ``TEST_DATABASE_URL`` or a throwaway cluster."""
    yield from _server(PG_URL, servers.Postgres, "PostgreSQL")


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    """The Redis database tests use: ``TEST_REDIS_URL`` or a throwaway redis-server's."""
    yield from _server(REDIS_URL, servers.Redis, "Redis")


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> Iterator[templates.PostgresTemplate]:
    """This session's migrated PostgreSQL database, built by the first test that needs it, dropped at the end."""
    template = templates.PostgresTemplate(pg_admin_url)
    yield template
    template.remove()


@pytest.fixture
def pg_url(pg_template: templates.PostgresTemplate) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test (``migrated`` makes it a copy of the session's
    template); given back to the session's pool afterwards (tests/support/templates.py)."""
    try:
        name = pg_template.fresh()
    except sa.exc.OperationalError as exc:
        unavailable("PostgreSQL", exc)
    url = pg_template.admin.url.set(database=name).render_as_string(hide_password=False)
    templates.FRESH_PG[url] = pg_template
    yield url
    templates.FRESH_PG.pop(url, None)
    # Connections the test left to the garbage collector are closed now, not by a finaliser that
    # runs inside a later test: CPython 3.11.7 raises "AST constructor recursion depth mismatch"
    # when one runs (a ROLLBACK on a dropped database) while ast.parse builds a tree (Werkzeug's
    # url_for compiles its builders so; seen once in a full run).
    gc.collect()
    pg_template.give_back(name)
    gc.collect()


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    """A real Redis, on a database index reserved for tests and emptied first."""
    client = redis.Redis.from_url(redis_server_url)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        unavailable("Redis", exc)
    finally:
        client.close()
    return redis_server_url


def base_config(database_url: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "DATABASE_URL": database_url,
        "WEBHOOKS_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "WEBHOOKS_HANDLERS": "tests.sample_handlers",
        "WEBHOOKS_EMBEDDED_WORKER": "false",
        "WEBHOOKS_RETRY_BASE_SECONDS": "0",
        "ENDPOINTS": {
            "stripe": {"provider": "stripe", "secrets": [STRIPE_SECRET]},
            "adyen": {"provider": "adyen", "secrets": [ADYEN_KEY]},
        },
    }
    config.update(extra)
    return config


def make_app(config: dict[str, Any]) -> Flask:
    migrated(config["DATABASE_URL"])
    app = create_app(config)
    sample_handlers.create_tables(app.extensions["webhooks"].engine)
    sample_handlers.reset()
    return app


@pytest.fixture
def app(sqlite_url: str) -> Flask:
    """The embedded default: SQLite and the in-process queue (drained by ``drain``)."""
    return make_app(base_config(sqlite_url))


@pytest.fixture(params=["sqlite", "postgres"])
def any_app(request: pytest.FixtureRequest) -> Flask:
    """The same tests on the embedded default and on PostgreSQL + Redis."""
    if request.param == "sqlite":
        return make_app(base_config(request.getfixturevalue("sqlite_url")))
    pg, rurl = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
    return make_app(base_config(pg, REDIS_URL=rurl))


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def runtime(app: Flask) -> Runtime:
    rt: Runtime = app.extensions["webhooks"]
    rt.bind()
    return rt


def at_once(*calls: Any) -> list[Any]:
    """Each call on a thread of its own, released together; their answers in order."""
    start = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        answers[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def drain(app: Flask) -> None:
    """Run every queued job to completion in this thread (RQ's own worker, burst mode, with the
    bounded stop of the production worker and no command thread: ``webhooks.worker.burst``)."""
    run_queued(runtime(app))


def rows(app: Flask, sql: str, **params: Any) -> list[Any]:
    with runtime(app).engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params))


def admin_headers() -> dict[str, str]:
    import base64

    token = base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


# -- signing: the one correct signer per provider, from the official SDKs -----------------------


def stripe_event(
    event_id: str = "evt_1",
    type_: str = "payment_intent.succeeded",
    created: int = 1700000000,
    obj: dict[str, Any] | None = None,
) -> bytes:
    obj = obj or {"id": "pi_1", "object": "payment_intent", "status": "succeeded"}
    body = {"id": event_id, "object": "event", "created": created, "type": type_, "data": {"object": obj}}
    return json.dumps(body).encode()


def stripe_headers(body: bytes, secret: str = STRIPE_SECRET, timestamp: int | None = None) -> dict[str, str]:
    import stripe

    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=timestamp if timestamp is not None else int(time.time())
    )
    return {"Stripe-Signature": header, "Content-Type": "application/json"}


def adyen_item(
    psp: str = "7914073381342284",
    code: str = "AUTHORISATION",
    success: str = "true",
    original: str = "",
    event_date: str = "2024-01-01T10:00:00+01:00",
    value: int = 1130,
    key: str = ADYEN_KEY,
    reference: str = "TestPayment-1407325143704",
) -> dict[str, Any]:
    import Adyen.util

    item: dict[str, Any] = {
        "additionalData": {},
        "amount": {"currency": "EUR", "value": value},
        "eventCode": code,
        "eventDate": event_date,
        "merchantAccountCode": "TestMerchant",
        "merchantReference": reference,
        "originalReference": original,
        "paymentMethod": "visa",
        "pspReference": psp,
        "reason": "",
        "success": success,
    }
    item["additionalData"]["hmacSignature"] = Adyen.util.generate_notification_sig(item, key).decode()
    return item


def adyen_body(*items: dict[str, Any]) -> bytes:
    return json.dumps({"live": "false", "notificationItems": [{"NotificationRequestItem": i} for i in items]}).encode()
