"""``webhooks keys status|rotate`` (#32): stored secrets per encryption key, and their
re-encryption under the first key of ``WEBHOOKS_ENCRYPTION_KEYS`` (``webhooks.store.configuration.key_rotation``).

The rotation runbook: put the new key first in ``WEBHOOKS_ENCRYPTION_KEYS`` on every process, run
``webhooks keys rotate``, then ``webhooks keys status`` until the old key counts 0; remove it then.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click

from webhooks.service.cli import load_settings
from webhooks.service.config_cli import session_for, who
from webhooks.service.events_cli import table
from webhooks.store.configuration import key_rotation


@click.group("keys")
def keys_group() -> None:
    """Count and re-encrypt stored secrets per encryption key."""


@keys_group.command("status")
def status() -> None:
    """Rows per key id: the configured keys (the first encrypts) and any other a row names."""
    settings = load_settings()
    with session_for(settings) as session:
        found = key_rotation.counts(session)
    configured = settings.keyring.key_ids if settings.keyring is not None else ()
    rows: list[tuple[str, ...]] = [
        (kid, str(found.get(kid, 0)), "first: encrypts" if n == 0 else "decrypts") for n, kid in enumerate(configured)
    ]
    rows += [(kid, str(count), "NOT CONFIGURED") for kid, count in sorted(found.items()) if kid not in configured]
    if not rows:
        click.echo("no encryption key is configured and no secret is stored")
        return
    for line in table(("KEY ID", "ROWS", "ROLE"), rows):
        click.echo(line)


@keys_group.command("rotate")
def rotate() -> None:
    """Re-encrypt every stored secret under the first key, in small batches, online."""
    settings = load_settings()
    if settings.keyring is None:
        raise click.ClickException("no encryption key is configured: set WEBHOOKS_ENCRYPTION_KEYS")
    with session_for(settings) as session:
        rotated, left = key_rotation.rotate(session, settings.keyring, who=who(), now=datetime.now(UTC))
    click.echo(f"re-encrypted {rotated} secret{'s' if rotated != 1 else ''} under {settings.keyring.current_key_id}")
    if left:
        raise click.ClickException(
            f"{left} secret(s) do not open (altered, or copied from another row) and keep their old key: re-create them"
        )
