"""A person running the command gets one line saying what failed and what to do, and a non-zero
exit; the traceback only with WEBHOOKS_LOG_LEVEL=DEBUG."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import free_port
from webhooks.service.cli import explain, main
from webhooks.tables import revisions


@pytest.fixture(autouse=True)
def empty_config(tmp_path: Path) -> None:
    (tmp_path / "webhooks.toml").write_text("")
    CONFIG["path"] = str(tmp_path / "webhooks.toml")


CONFIG: dict[str, str] = {}


def run(*args: str, **env: str) -> tuple[int, list[str]]:
    base = {"WEBHOOKS_CONFIG": CONFIG["path"], "REDIS_URL": "", "WEBHOOKS_LOG_LEVEL": "INFO"}
    result = CliRunner().invoke(main, list(args), env=base | env)
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("{")]
    return result.exit_code, lines


def test_unreachable_database_is_one_line_without_the_password() -> None:
    url = f"postgresql://postgres:s3cret@127.0.0.1:{free_port()}/x"
    for args in (["events", "list"], ["db", "upgrade"], ["purge", "--older-than", "30d"]):
        code, lines = run(*args, DATABASE_URL=url)
        assert code == 1, lines
        assert len(lines) == 1, lines
        assert lines[0].startswith("Error: database error at postgresql+psycopg://postgres:***@127.0.0.1:")
        assert "check that it runs and that DATABASE_URL is right" in lines[0]
        assert "s3cret" not in lines[0]


def test_unmigrated_database_says_to_upgrade(tmp_path: Path) -> None:
    code, lines = run("events", "list", DATABASE_URL=f"sqlite:///{tmp_path}/fresh.db")
    assert code == 1
    assert lines == [f"Error: database schema never migrated, head is {revisions.head()}: run `webhooks db upgrade`"]


def test_unreachable_redis_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import redis

    url = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("WEBHOOKS_CONFIG", CONFIG["path"])
    monkeypatch.setenv("REDIS_URL", url)
    try:
        redis.Redis.from_url(url).ping()
    except redis.RedisError as exc:
        line = explain(exc)
    assert line is not None
    assert line.startswith(f"cannot reach Redis at {url} (ConnectionError")
    assert line.endswith("check that it runs and that REDIS_URL is right")
    assert "\n" not in line


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "WEBHOOKS_LOG_LEVEL",
            "LOUD",
            "Error: configuration: WEBHOOKS_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, not 'LOUD'",
        ),
        (
            "WEBHOOKS_LOG_FORMAT",
            "xml",
            "Error: configuration: WEBHOOKS_LOG_FORMAT must be one of json, text, not 'xml'",
        ),
        ("WEBHOOKS_MAX_ATTEMPTS", "many", "Error: configuration: WEBHOOKS_MAX_ATTEMPTS must be a number, not 'many'"),
    ],
)
def test_bad_settings_are_one_line(tmp_path: Path, variable: str, value: str, expected: str) -> None:
    code, lines = run("events", "list", DATABASE_URL=f"sqlite:///{tmp_path}/wh.db", **{variable: value})
    assert (code, lines) == (1, [expected])


def test_debug_adds_the_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["events", "list"],
        env={
            "DATABASE_URL": f"sqlite:///{tmp_path}/fresh.db",
            "WEBHOOKS_LOG_LEVEL": "DEBUG",
            "WEBHOOKS_LOG_FORMAT": "text",
            "WEBHOOKS_CONFIG": CONFIG["path"],
            "REDIS_URL": "",
        },
    )
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.output
    assert result.output.rstrip().endswith("run `webhooks db upgrade`")
