"""``webhooks reconcile``: the command over ``webhooks.worker.reconcile`` (its options, its progress bar)."""

from __future__ import annotations

import sys
import time

import click

from webhooks.errors import ConfigError
from webhooks.providers.api import ApiError
from webhooks.providers.base import Missed
from webhooks.runtime import Runtime
from webhooks.store.purge import parse_age
from webhooks.worker.reconcile import endpoint_of, reconcile


@click.command("reconcile")
@click.argument("endpoint")
@click.option("--since", default="3d", show_default=True, help="How far back (30m, 12h, 3d; Stripe keeps 30 days).")
@click.option("--undelivered", is_flag=True, help="Only events Stripe has not delivered (delivery_success=false).")
def reconcile_command(endpoint: str, since: str, undelivered: bool) -> None:
    """Store and process the Stripe events ENDPOINT missed (from Stripe's event log)."""
    from webhooks.configuration import settings as config

    try:
        start = int(time.time() - parse_age(since).total_seconds())
        rt = Runtime(config.load())
        endpoint_of(rt, endpoint)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    span = max(1, int(time.time()) - start)
    # Events come newest first: the bar moves with the creation time reached.
    with click.progressbar(length=span, label=f"reconciling {endpoint}", file=sys.stderr) as bar:  # hidden off a tty
        reached = [0]

        def advance(missed: Missed) -> None:
            created = missed.created
            if created is not None:
                done = min(span, max(0, int(time.time()) - created))
                bar.update(max(0, done - reached[0]))
                reached[0] = max(reached[0], done)

        try:
            summary = reconcile(rt, endpoint, start, undelivered=undelivered, progress=advance)
        except ApiError as exc:  # the API's name, as the kind is configured (``Stripe API: …``)
            raise click.ClickException(f"{rt.settings.endpoints[endpoint].kind.capitalize()} API: {exc}") from exc
        finally:
            rt.engine.dispose()
    click.echo(str(summary))
