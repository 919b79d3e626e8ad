"""``webhooks purge``: the command over ``webhooks.store.purge`` (its options, its progress bar)."""

from __future__ import annotations

from typing import Any

import click

from webhooks.errors import ConfigError
from webhooks.store.purge import Plan, PurgeRefusedError, parse_age, purge
from webhooks.tables.events import COUNT_CAP


@click.command("purge")
@click.option("--older-than", required=True, help="Delete processed/ignored events older than this (30d, 12h…).")
@click.option("--failed-older-than", help="Delete failed events older than this [default: 2 × older-than]")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--tombstones-older-than",
    help="Forget purged ids older than this [default: the longer of 365d and 2 × each window]",
)
@click.option(
    "--pause",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 100),
    help="Pause after each batch, as a multiple of the batch's own time (0: no pause).",
)
@click.option("--force", is_flag=True, help="Purge even inside a provider's retry horizon.")
def purge_command(
    older_than: str,
    failed_older_than: str | None,
    batch_size: int,
    tombstones_older_than: str | None,
    pause: float,
    force: bool,
) -> None:
    """Delete old finished events, in batches (never unfinished ones), leaving tombstones."""
    from webhooks.configuration import settings as config
    from webhooks.engines import make_engine, make_sessionmaker

    try:
        settings = config.load()
        window = parse_age(older_than)
        plan = Plan(
            window,
            parse_age(failed_older_than) if failed_older_than else 2 * window,
            batch_size,
            parse_age(tombstones_older_than) if tombstones_older_than else None,
            pause,
        )
        if plan.tombstone_window() < max(plan.older_than, plan.failed_older_than):
            raise ConfigError("--tombstones-older-than must be at least as long as the events' windows")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    engine = make_engine(settings.database_url)
    kinds = {endpoint.kind for endpoint in settings.endpoints.values()}
    bars: list[Any] = []  # click's ProgressBar, opened once the count is known

    def start(count: int) -> None:
        label = f"purging {count} events" if count <= COUNT_CAP else f"purging more than {COUNT_CAP} events"
        bars.append(click.progressbar(length=count, label=label).__enter__())

    try:
        deleted = purge(
            make_sessionmaker(engine), plan, kinds=kinds, force=force, total=start, progress=lambda n: bars[0].update(n)
        )
    except PurgeRefusedError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if bars:
            bars[0].__exit__(None, None, None)
        engine.dispose()
    click.echo(f"deleted {deleted} events")
