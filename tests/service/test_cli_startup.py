"""The command starts fast because it imports only what the command it runs needs, and the
handler API is importable from the package itself."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from webhooks.service.cli import main

HEAVY = ("flask", "sqlalchemy", "redis", "rq", "cryptography", "alembic", "werkzeug")


def loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_help_loads_no_web_framework_database_or_queue() -> None:
    code = (
        "from click.testing import CliRunner\nfrom webhooks.service.cli import main\n"
        "result = CliRunner().invoke(main, ['--help'])\nassert result.exit_code == 0, result.output"
    )
    assert loaded_after(code) == []


def test_help_lists_every_command_with_its_line() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in ("serve", "worker", "db", "send", "events", "purge"):
        assert f"  {name} " in result.output
    assert "List, show and replay stored events." in result.output


def test_lazy_commands_still_run() -> None:
    for name, words in (("events", "list"), ("send", "PAYLOAD_FILE"), ("purge", "--older-than")):
        result = CliRunner().invoke(main, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert words in result.output


def test_handlers_register_with_from_webhooks_import_on() -> None:
    import webhooks
    from webhooks.worker import handlers

    assert webhooks.on is handlers.on
    assert webhooks.HandlerEvent is handlers.HandlerEvent
