"""The ``webhooks`` command: ``serve``, ``worker``, ``db upgrade``, ``events …``."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import secrets
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from webhooks.config import Settings

# Commands that live in other modules load on first use: `webhooks --help` imports neither
# SQLAlchemy, Flask nor the providers (name → (module, attribute, one-line help)).
LAZY = {
    "send": ("webhooks.send", "send", "Sign PAYLOAD_FILE as ENDPOINT's provider would and POST it."),
    "events": ("webhooks.admin.cli", "events", "List, show and replay stored events."),
    "purge": ("webhooks.purge", "purge_command", "Delete old processed, ignored and failed events."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY:
            module, attribute, _ = LAZY[cmd_name]
            command: click.Command = getattr(importlib.import_module(module), attribute)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, command.get_short_help_str(80)) for name, command in self.commands.items()]
        rows += [(name, text) for name, (_, _, text) in LAZY.items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


def alembic_config(url: str) -> Any:
    from webhooks.schema import alembic_config

    return alembic_config(url)


def upgrade(url: str, revision: str = "head") -> None:
    from webhooks.schema import upgrade

    upgrade(url, revision)


def _settings() -> Settings:
    from webhooks import config
    from webhooks.errors import ConfigError

    try:
        return config.load()
    except ConfigError as exc:
        raise click.ClickException(f"configuration: {exc}") from exc


@click.group(cls=LazyGroup)
def main() -> None:
    """Receive, verify, store and process webhooks."""
    logging.basicConfig(
        level=os.environ.get("WEBHOOKS_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=lambda: int(os.environ.get("PORT", "8000")), show_default="$PORT or 8000")
def serve(host: str, port: int) -> None:
    """Run everything in one process: SQLite, an in-process queue and worker, the admin console."""
    from werkzeug.serving import make_server

    from webhooks import create_app

    settings = _settings()
    generated = not settings.admin_password
    if generated:
        settings = dataclasses.replace(settings, admin_password=secrets.token_urlsafe(12))
    upgrade(settings.database_url)
    app = create_app(settings)
    rt = app.extensions["webhooks"]
    # The in-process queue starts empty: whatever the last run left unfinished is stranded now.
    rt.sweep(age=0)
    rt.queue.start_embedded(rt.bind, rt.sweep)
    server = make_server(host, port, app, threaded=True)
    endpoints = ", ".join(f"/webhooks/{name}" for name in settings.endpoints) or "none configured"
    click.echo(f"webhooks serving on http://{host}:{server.server_port} (endpoints: {endpoints})")
    if generated:
        click.echo(f"admin console: user admin, password {settings.admin_password}")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


@main.command()
@click.option("--burst", is_flag=True, help="Drain the queue, then exit.")
def worker(burst: bool) -> None:
    """Run an RQ worker on REDIS_URL (with the retry scheduler and the sweeper)."""
    from jobs.worker import run

    settings = _settings()
    if not settings.redis_url:
        raise click.ClickException("REDIS_URL is not set (`webhooks serve` runs its own worker)")
    run(settings, burst=burst)


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.argument("revision", default="head")
def db_upgrade(revision: str) -> None:
    """Apply migrations up to REVISION (default: head)."""
    settings = _settings()
    upgrade(settings.database_url, revision)
    click.echo(f"database at {revision}")
