"""``webhooks tokens create|list|revoke``: the named tokens of the admin API (``webhooks.admin.tokens``).

They use the database ``DATABASE_URL`` names, like the service; a token is live on every process
at its next request (each request looks its token up).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click
from sqlalchemy.orm import Session

from webhooks.admin import tokens
from webhooks.admin.token_views import token_json
from webhooks.engines import make_engine, make_sessionmaker
from webhooks.service.cli import load_settings
from webhooks.service.events_cli import table


@contextmanager
def _session() -> Iterator[Session]:
    engine = make_engine(load_settings().database_url)
    try:
        with make_sessionmaker(engine)() as session:
            yield session
    finally:
        engine.dispose()


@click.group("tokens")
def tokens_group() -> None:
    """Create, list and revoke the admin API's named tokens."""


@tokens_group.command("create")
@click.argument("name")
@click.option("--read-only", is_flag=True, help="GET only: every POST, PATCH or DELETE is refused (403)")
def create(name: str, read_only: bool) -> None:
    """Create the token NAME and print it, once, alone on the last line."""
    with _session() as session:
        try:
            token = tokens.create(session, name, read_only, now=datetime.now(UTC))
        except tokens.TokenError as exc:
            raise click.ClickException(str(exc)) from exc
    access = "read-only" if read_only else "read and write"
    click.echo(f"token {name} created ({access}); it is shown this once and stored only as a hash.")
    click.echo("Send it to /admin/api as 'Authorization: Bearer <token>':")
    click.echo(token)


@tokens_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="print JSON like GET /admin/api/tokens")
def list_tokens(as_json: bool) -> None:
    """Every token, revoked ones too, oldest first (never the token or its hash)."""
    with _session() as session:
        found = [token_json(t) for t in tokens.listed(session)]
    if as_json:
        click.echo(json.dumps({"tokens": found}, indent=2))
        return
    if not found:
        click.echo("no tokens")
        return
    rows: list[tuple[str, ...]] = [
        (
            t["name"],
            "read-only" if t["read_only"] else "read-write",
            t["created_at"] or "",
            t["last_used_at"] or "never",
            t["revoked_at"] or "-",
        )
        for t in found
    ]
    for line in table(("NAME", "ACCESS", "CREATED", "LAST USED", "REVOKED"), rows):
        click.echo(line)


@tokens_group.command("revoke")
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke the token NAME: its next request is refused (401). Its name is not reused."""
    with _session() as session:
        try:
            tokens.revoke(session, name, now=datetime.now(UTC))
        except tokens.TokenError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(f"token {name} revoked")
