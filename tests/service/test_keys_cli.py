"""``webhooks keys status|rotate`` (#32): rows counted per key id, every row re-encrypted under the
first key in small batches and audited as one ``keys_rotated``; a key not configured is one line
naming it; deliveries keep being accepted while it runs."""

from __future__ import annotations

import base64
import getpass
import logging
import threading
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner, Result

from tests.admin.test_runtime_config import api, deliver
from tests.conftest import base_config, make_app
from tests.service.test_config_cli import session
from tests.support.templates import migrated
from webhooks.configuration.keys import Keyring, key_id_of
from webhooks.store.configuration import items as store

OLD = "k1:" + base64.b64encode(b"1" * 32).decode()
NEW = "k2:" + base64.b64encode(b"2" * 32).decode()
OLD_RING = Keyring([("k1", b"1" * 32)])
NEW_ONLY = Keyring([("k2", b"2" * 32)])
SECRET = "whsec_" + base64.b64encode(b"shop-secret-bytes-0024").decode()


def keys(url: str, value: str, *args: str) -> Result:
    from webhooks.service.cli import main

    env = {"DATABASE_URL": url, "WEBHOOKS_ENCRYPTION_KEYS": value, "WEBHOOKS_CONFIG": "", "REDIS_URL": ""}
    # An RQ worker thread of an earlier test in this process, still winding down, logs at INFO
    # into whatever stdout is at that moment: here, the command's captured output.
    quiet = [logging.getLogger(name) for name in ("rq", "rq.worker", "rq.scheduler")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.WARNING)
    try:
        return CliRunner().invoke(main, ["keys", *args], env=env)
    finally:
        for log, level in zip(quiet, levels, strict=True):
            log.setLevel(level)


def seed(url: str, count: int) -> None:
    """``count`` endpoints, each with a signing secret and an API key, sealed under k1."""
    now = datetime.now(UTC)
    with session(url) as s:
        for n in range(count):
            table = {"provider": "mailgun", "secrets": [f"signing-{n}"], "api_key": f"key-{n}", "domain": "mg.example"}
            store.create(s, OLD_RING, "endpoint", f"m-{n:04d}", table, label=None, who="t", now=now)


def rotate_and_check(url: str) -> None:
    seed(url, 130)  # 260 rows: three batches
    before = keys(url, f"{NEW},{OLD}", "status")
    assert before.exit_code == 0, before.output
    assert [line.split() for line in before.output.splitlines()] == [
        ["KEY", "ID", "ROWS", "ROLE"],
        ["k2", "0", "first:", "encrypts"],
        ["k1", "260", "decrypts"],
    ]
    rotated = keys(url, f"{NEW},{OLD}", "rotate")
    assert rotated.exit_code == 0, rotated.output
    assert rotated.output == "re-encrypted 260 secrets under k2\n"
    after = keys(url, f"{NEW},{OLD}", "status").output.splitlines()
    assert after[1].split()[:2] == ["k2", "260"] and after[2].split()[:2] == ["k1", "0"]
    with session(url) as s:
        snap = store.snapshot(s, NEW_ONLY, now=datetime.now(UTC))  # the old key is no longer needed
        audit = store.changes(s, limit=1)[0]
    assert len(snap.items) == 130 and not snap.broken
    assert next(i.table for i in snap.items if i.name == "m-0007")["api_key"] == "key-7"
    assert (audit.who, audit.action, audit.after["rotated"]) == (f"cli:{getpass.getuser()}", "keys_rotated", 260)
    assert keys(url, f"{NEW},{OLD}", "rotate").output == "re-encrypted 0 secrets under k2\n"


def test_rotate_moves_every_row_to_the_first_key(sqlite_url: str) -> None:
    migrated(sqlite_url)
    rotate_and_check(sqlite_url)


@pytest.mark.slow
def test_rotate_on_postgresql(pg_url: str) -> None:
    migrated(pg_url)
    rotate_and_check(pg_url)


def test_a_key_not_configured_is_one_line_naming_it(sqlite_url: str) -> None:
    migrated(sqlite_url)
    seed(sqlite_url, 2)
    status = keys(sqlite_url, NEW, "status")
    assert status.exit_code == 0 and status.output.splitlines()[2].split() == ["k1", "4", "NOT", "CONFIGURED"]
    result = keys(sqlite_url, NEW, "rotate")
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1 and "'k1'" in result.output
    with session(sqlite_url) as s:  # nothing was changed
        assert {key_id_of(x.ciphertext) for xs in store.secrets_of(s).values() for x in xs} == {"k1"}


@pytest.mark.slow
def test_deliveries_are_accepted_while_rotate_runs(sqlite_url: str) -> None:
    migrated(sqlite_url)
    # Every process has the new key first (the runbook's first step) before the rotation starts.
    first = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=OLD))
    shop = {"name": "shop-eu", "provider": "stripe", "secrets": [SECRET]}
    assert api(first.test_client(), "POST", "/endpoints", shop).status_code == 201
    seed(sqlite_url, 300)
    app = make_app(base_config(sqlite_url, WEBHOOKS_ENCRYPTION_KEYS=f"{NEW},{OLD}"))
    answers: list[int] = []
    done = threading.Event()

    def post() -> None:
        n = 0
        while not done.is_set() or n < 20:
            answers.append(deliver(app, "shop-eu", f"evt_rot_{n}", SECRET))
            if n % 5 == 0:  # a snapshot read mid-rotation opens rows under either key
                app.extensions["webhooks"].reload_config()
            n += 1

    poster = threading.Thread(target=post)
    poster.start()
    try:
        result = keys(sqlite_url, f"{NEW},{OLD}", "rotate")
    finally:
        done.set()
        poster.join(60)
    # The poster's own log lines share the runner's captured output: the command's is one of its lines.
    assert result.exit_code == 0 and "re-encrypted 601 secrets under k2" in result.output.splitlines()
    assert len(answers) >= 20 and set(answers) == {200}
    assert deliver(app, "shop-eu", "evt_after", SECRET) == 200
