"""The test suite itself (issue #29): its outcome does not depend on the developer's working
directory or shell, SIGINT and SIGTERM stop it after any test, and a stopped run leaves none of its
servers or ``wh-test-*`` directories behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask

from tests import conftest
from tests.conftest import ROOT, STRIPE_SECRET, drain, free_port, stripe_event, stripe_headers, wait_until
from tests.service.test_safe_servers import processes_in
from tests.support.processes import clean_env, gunicorn_cmd, running, wait_http
from webhooks.configuration import settings as config
from webhooks.service.cli import upgrade

HERE = "tests/service/test_suite_isolation.py"
# What a developer following the README and examples/orders may well have in the clone's root.
DEVELOPERS_TOML = """\
[endpoints.stripe]
secrets = ["whsec_the_developers_own"]
forward = ["orders"]

[destinations.orders]
url = "http://127.0.0.1:8001/webhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
allow_private = true
"""


@pytest.mark.slow
def test_a_web_process_started_in_the_root_sees_only_the_tests_configuration(tmp_path: Path) -> None:
    """Run as it is by the next test, from a copy of the tree with a developer's webhooks.toml."""
    assert config.load().endpoints == config.load({}).endpoints == {}  # no file, no shell shorthand
    url = f"sqlite:///{tmp_path / 'webhooks.db'}"
    upgrade(url)
    port = free_port()
    env = clean_env(DATABASE_URL=url, STRIPE_WEBHOOK_SECRET=STRIPE_SECRET, WEB_CONCURRENCY="1", WEB_THREADS="4")
    with running(gunicorn_cmd(port), env) as proc:  # cwd: the root of the tree the suite runs from
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        wait_http(f"http://127.0.0.1:{port}/healthz")
        body = stripe_event("evt_isolated")
        response = requests.post(
            f"http://127.0.0.1:{port}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30
        )
        assert response.status_code == 200, response.text


def copy_of_the_tree(to: Path) -> Path:
    """The checkout's files (tracked and new, not ignored) as they are now, in ``to``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    return to


@pytest.mark.slow
def test_a_developers_webhooks_toml_and_shell_variables_change_no_outcome(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout, to copy its tree")
    clone = copy_of_the_tree(tmp_path / "clone")
    (clone / "webhooks.toml").write_text(DEVELOPERS_TOML)  # never in the checkout's own root
    env = {k: v for k, v in os.environ.items() if k != "WEBHOOKS_CONFIG"}  # the developer names none
    env.update(
        STRIPE_WEBHOOK_SECRET="whsec_the_developers_shell",
        DATABASE_URL="postgresql://nobody@127.0.0.1:9/nowhere",
        REDIS_URL="redis://127.0.0.1:9/0",
        WEB_CONCURRENCY="9",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{HERE}::{test_a_web_process_started_in_the_root_sees_only_the_tests_configuration.__name__}",
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout, done.stdout[-2000:]


def test_an_in_process_rq_worker_leaves_sigint_and_sigterm_to_pytest(app: Flask) -> None:
    """RQ's worker, run in this process, installed its warm-shutdown handlers and kept them."""
    body = stripe_event("evt_signals")
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    drain(app)
    assert signal.getsignal(signal.SIGINT) is conftest.SIGNAL_HANDLERS[signal.SIGINT]
    assert signal.getsignal(signal.SIGTERM) is conftest.SIGNAL_HANDLERS[signal.SIGTERM]


def test_a_signal_handler_a_test_leaves_is_undone() -> None:
    """As ``webhooks worker``'s loop and ``webhooks serve`` do when run in-process: the handlers are
    left on purpose (the suite's hook, not a fixture of this test, must undo them; the next test checks)."""
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_after_any_test_sigint_and_sigterm_are_the_suites_again() -> None:
    """Runs after the two above (file order, and in the stopped runs below)."""
    assert signal.getsignal(signal.SIGINT) is conftest.SIGNAL_HANDLERS[signal.SIGINT]
    assert signal.getsignal(signal.SIGTERM) is conftest.SIGNAL_HANDLERS[signal.SIGTERM]


@pytest.fixture
def scratch_tmp() -> Iterator[Path]:
    """The inner run's TMPDIR: what it leaves is what it made (the ``postgres`` user can enter it)."""
    path = Path(tempfile.mkdtemp(prefix="wh-stop-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_run_stopped_mid_way_ends_with_its_summary_and_leaves_nothing(signum: int, scratch_tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEST_")}  # the suite's own servers
    env.update(TMPDIR=str(scratch_tmp), CI="true")
    selection = [
        f"{HERE}::test_an_in_process_rq_worker_leaves_sigint_and_sigterm_to_pytest",
        f"{HERE}::test_a_signal_handler_a_test_leaves_is_undone",
        f"{HERE}::test_after_any_test_sigint_and_sigterm_are_the_suites_again",
        "tests/store/test_conformance.py",  # both adapters: starts PostgreSQL and Redis, then works a while
    ]
    out = scratch_tmp / "out.txt"
    with out.open("w") as log:
        inner = subprocess.Popen(
            # In one process (-n 0): the order is the selection's, so the signal comes after the
            # handler tests ran. A parallel run (the default -n 3) ends the same way on SIGINT and
            # SIGTERM: xdist's controller stops its workers, whose teardown removes their servers.
            [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-v", *selection],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            def servers_up() -> bool:
                made = {p.name.split("-")[2] for p in scratch_tmp.glob("wh-test-*")}
                return {"pg", "redis"} <= made and "test_conformance.py" in out.read_text()

            wait_until(servers_up, timeout=180, interval=0.1)
            assert inner.poll() is None, out.read_text()[-3000:]
            inner.send_signal(signum)
            wait_until(lambda: inner.poll() is not None, timeout=60, interval=0.1)
        finally:
            if inner.poll() is None:
                inner.kill()
                inner.wait()
    text = out.read_text()
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, text[-3000:]
    assert ("KeyboardInterrupt" in text or "stopped by signal" in text) and " passed" in text.splitlines()[-1], text[
        -3000:
    ]
    # Verbose lines read "…::name PASSED" in one process, "[gw0] [ 9%] PASSED …::name" under xdist.
    after = "::test_after_any_test_sigint_and_sigterm_are_the_suites_again"
    assert any(after in line and "PASSED" in line for line in text.splitlines()), text[-3000:]
    wait_until(lambda: processes_in(scratch_tmp) == [], timeout=30)
    assert not [p.name for p in scratch_tmp.iterdir() if p.name.startswith("wh-test-")], text[-3000:]


def test_compiled_modules_are_cached_whatever_the_shell_says() -> None:
    """``PYTHONDONTWRITEBYTECODE`` in the shell (this machine's sets it) made every test process
    rewrite every test module and every child compile the package again: the suite lifts it."""
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert "PYTHONDONTWRITEBYTECODE" not in clean_env()
    assert sys.dont_write_bytecode is False
    here = Path(__file__)
    assert list(
        (here.parent / "__pycache__").glob(f"{here.stem}.*pytest*.pyc")
    )  # pytest's rewritten copy of this module
