"""``webhooks db current``: the database's schema revision and the head, in one line; a database
that is not at the head (or cannot be read) is one line and a non-zero exit. A process waiting for
the schema warns while it waits and says at ``info`` that the database is ready."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import free_port, wait_until
from webhooks.service.cli import main
from webhooks.tables import revisions


def run(tmp_path: Path, *args: str, database_url: str) -> tuple[int, list[str]]:
    config = tmp_path / "webhooks.toml"
    config.write_text("")
    env = {"DATABASE_URL": database_url, "WEBHOOKS_CONFIG": str(config), "REDIS_URL": "", "WEBHOOKS_LOG_LEVEL": "ERROR"}
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def test_db_current_prints_the_revision_and_the_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/webhooks.db"
    assert run(tmp_path, "db", "upgrade", database_url=url)[0] == 0
    head = revisions.head()
    assert run(tmp_path, "db", "current", database_url=url) == (0, [f"database at {head}, head {head}"])


def test_db_current_on_a_database_behind_says_to_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/webhooks.db"
    assert run(tmp_path, "db", "upgrade", "0011", database_url=url)[0] == 0
    code, lines = run(tmp_path, "db", "current", database_url=url)
    assert (code, lines) == (1, [f"Error: database at 0011, head {revisions.head()}: run `webhooks db upgrade`"])


def test_db_current_on_an_unmigrated_database_is_one_line(tmp_path: Path) -> None:
    code, lines = run(tmp_path, "db", "current", database_url=f"sqlite:///{tmp_path}/fresh.db")
    assert (code, lines) == (1, [f"Error: database never migrated, head {revisions.head()}: run `webhooks db upgrade`"])


def test_db_current_on_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql://postgres:s3cret@127.0.0.1:{free_port()}/x"
    code, lines = run(tmp_path, "db", "current", database_url=url)
    assert code == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: database error at postgresql+psycopg://postgres:***@127.0.0.1:")
    assert lines[0].endswith("check that it runs and that DATABASE_URL is right")
    assert "s3cret" not in lines[0]


def test_the_wait_for_the_schema_ends_with_an_info_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path}/webhooks.db"
    log = logging.getLogger("webhooks.test_wait")
    waiter = threading.Thread(target=revisions.wait_for_head, args=(url, log), kwargs={"interval": 0.05}, daemon=True)
    with caplog.at_level(logging.INFO, logger=log.name):
        waiter.start()
        wait_until(lambda: any(r.getMessage().startswith("waiting for the database") for r in caplog.records))
        revisions.upgrade(url)
        waiter.join(timeout=60)
    assert not waiter.is_alive()
    levels = {r.getMessage().split(":")[0]: r.levelname for r in caplog.records if r.name == log.name}
    assert levels == {"waiting for the database": "WARNING", f"database ready at {revisions.head()}": "INFO"}
