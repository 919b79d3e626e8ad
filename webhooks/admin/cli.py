"""``webhooks events list|show|replay``: the console's twins for a terminal.

They talk to the database and the queue named by the environment (like the web app does), and
write the same audit log, as ``cli:<login>``.
"""

from __future__ import annotations

import getpass
import json
from typing import Any

import click

from webhooks import config
from webhooks.admin import queries
from webhooks.admin.api import attempt_json, detail, object_json, summary
from webhooks.admin.queries import FilterError
from webhooks.admin.replay import ReplayError, replay_matching, replay_one
from webhooks.errors import ConfigError
from webhooks.models import Event
from webhooks.runtime import Runtime

NOT_QUEUED = "Redis is unavailable: the sweeper queues this replay when Redis is back"


def _runtime() -> Runtime:
    try:
        return Runtime(config.load())
    except ConfigError as exc:
        raise click.ClickException(f"configuration: {exc}") from exc


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a container with an unnamed uid)
        return "cli:unknown"


def _filters(**options: Any) -> queries.Filters:
    try:
        return queries.parse_filters(options)
    except FilterError as exc:
        raise click.BadParameter(exc.reason) from exc


def filter_options(func: Any) -> Any:
    for name, text in reversed([
        ("--endpoint", "endpoint (provider) name"), ("--status", "status word"), ("--type", "event type"),
        ("--since", "ISO time, inclusive"), ("--until", "ISO time, exclusive"),
        ("--q", "event id, object id or provider reference (pspReference, merchantReference)"),
    ]):
        func = click.option(name, default=None, help=text)(func)
    return func


@click.group()
def events() -> None:
    """Find, inspect and replay stored events."""


@events.command("list")
@filter_options
@click.option("--limit", default=50, show_default=True, type=int)
@click.option("--cursor", default=None, help="next_cursor of the previous page")
@click.option("--json", "as_json", is_flag=True, help="print JSON like the API")
def list_events(limit: int, cursor: str | None, as_json: bool, **options: Any) -> None:
    """Newest first, one line per event."""
    rt = _runtime()
    with rt.sessions() as session:
        try:
            found, next_cursor = queries.page(session, _filters(**options), limit=queries.parse_limit(limit),
                                              cursor=cursor, providers=rt.settings.endpoints)
        except FilterError as exc:
            raise click.BadParameter(exc.reason) from exc
    if as_json:
        click.echo(json.dumps({"events": [summary(e) for e in found], "next_cursor": next_cursor}, indent=2))
        return
    for event in found:
        click.echo(f"{queries.iso(event.received_at)}  {event.status:<10} {event.provider:<10} "
                   f"{event.event_type:<32} {event.event_id}")
    if next_cursor:
        click.echo(f"more: --cursor {next_cursor}")


@events.command("show")
@click.argument("provider")
@click.argument("event_id")
def show(provider: str, event_id: str) -> None:
    """Everything about one event, as JSON (the API's detail)."""
    rt = _runtime()
    with rt.sessions() as session:
        event = session.get(Event, (provider, event_id)) if queries.keys_fit((provider, event_id)) else None
        if event is None:
            raise click.ClickException(f"no event {provider}/{event_id}")
        obj, _ = queries.object_history(session, event)
        out = detail(event) | {
            "attempt_log": [attempt_json(a) for a in queries.attempts(session, provider, event_id)],
            "object": object_json(obj) if obj else None,
        }
    click.echo(json.dumps(out, indent=2))


@events.command("replay")
@click.argument("provider", required=False)
@click.argument("event_id", required=False)
@filter_options
@click.option("--reason", default=None, help="why (written to the audit log); required for a bulk replay")
@click.option("--dry-run", is_flag=True, help="only count what a bulk replay would queue")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
def replay(provider: str | None, event_id: str | None, reason: str | None, dry_run: bool, yes: bool,
           **options: Any) -> None:
    """Replay one event (PROVIDER EVENT_ID) or every event matching the filter options."""
    rt = _runtime()
    try:
        if provider and event_id:
            single = replay_one(rt, provider, event_id, who=_who(), reason=reason)
            click.echo(f"queued {provider}/{event_id}" if single.queued
                       else f"recorded {provider}/{event_id} (audit #{single.replay_id}); {NOT_QUEUED}")
            return
        if provider:
            raise click.UsageError("give PROVIDER and EVENT_ID, or filter options only")
        filters = _filters(**options)
        count = replay_matching(rt, filters, who=_who(), reason=None, dry_run=True).count
        click.echo(f"{count} event(s) match {json.dumps(filters.as_dict())}")
        if dry_run or not count:
            return
        if not reason:
            raise click.UsageError("--reason is required for a bulk replay")
        if not yes:
            click.confirm(f"replay {count} event(s)?", abort=True)
        outcome = replay_matching(rt, filters, who=_who(), reason=reason, dry_run=False)
        click.echo(f"queued {outcome.count} event(s) (audit #{outcome.replay_id})" if outcome.queued
                   else f"recorded {outcome.count} event(s) (audit #{outcome.replay_id}); {NOT_QUEUED}")
    except ReplayError as exc:
        raise click.ClickException(exc.reason) from exc
