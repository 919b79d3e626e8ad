"""``webhooks events list|show|replay``: the console's twins for a terminal.

They talk to the database and the queue named by the environment (like the web app does), and
write the same audit log, as ``cli:<login>``.
"""

from __future__ import annotations

import getpass
import json
from typing import Any

import click

from webhooks import tracing
from webhooks.admin import queries
from webhooks.admin.api import attempt_json, detail, object_json, summary
from webhooks.admin.destinations import deliveries_of
from webhooks.admin.queries import FilterError
from webhooks.admin.replay import ReplayError, replay_matching, replay_one
from webhooks.runtime import Runtime
from webhooks.service.cli import load_settings
from webhooks.tables.events import STATUSES, Event

NOT_QUEUED = "Redis is unavailable: the sweeper queues this replay when Redis is back"


def _runtime() -> Runtime:
    return Runtime(load_settings())


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a container with an unnamed uid)
        return "cli:unknown"


# What each reason code of ``queries`` means on the command line: (option, valid values).
UNUSABLE = "holds a character that cannot be stored (NUL or an unpaired surrogate)"
OPTION_ERRORS = {
    "bad_time": (
        "--since/--until",
        "takes an ISO 8601 time in the years 1 to 9999, UTC unless it has an offset, e.g. 2024-01-31T00:00:00Z",
    ),
    "bad_cursor": ("--cursor", "takes the next_cursor printed by the previous page"),
    "bad_limit": ("--limit", "takes a number"),
    "bad_reason": ("--reason", UNUSABLE),
}


def option_error(exc: FilterError) -> click.BadParameter:
    """A usage error naming the option and what it takes; the reason code stays at the end."""
    if exc.reason in OPTION_ERRORS:
        hint, text = OPTION_ERRORS[exc.reason]
    else:  # bad_endpoint, bad_type, bad_q, …: a value no database can compare
        hint, text = "--" + exc.reason.removeprefix("bad_").replace("provider", "endpoint"), UNUSABLE
    return click.BadParameter(f"{text} ({exc.reason})", param_hint=f"'{hint}'")


def _filters(**options: Any) -> queries.Filters:
    for name in ("since", "until"):  # the one bad_time names which option holds it
        if options.get(name) and queries.storable(options[name]):
            try:
                queries.parse_time(options[name])
            except FilterError as exc:
                hint, text = f"--{name}", OPTION_ERRORS["bad_time"][1]
                raise click.BadParameter(f"{text} ({exc.reason})", param_hint=f"'{hint}'") from exc
    try:
        return queries.parse_filters(options)
    except FilterError as exc:
        raise option_error(exc) from exc


def filter_options(func: Any) -> Any:
    for name, kind, text in reversed(
        [
            ("--endpoint", None, "endpoint (provider) name"),
            ("--status", click.Choice(STATUSES), "status"),
            ("--type", None, "event type"),
            ("--since", None, "ISO time, inclusive"),
            ("--until", None, "ISO time, exclusive"),
            ("--q", None, "event id, object id or provider reference (pspReference, merchantReference)"),
        ]
    ):
        func = click.option(name, type=kind, default=None, help=text)(func)
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
            found, next_cursor = queries.page(
                session,
                _filters(**options),
                limit=queries.parse_limit(limit),
                cursor=cursor,
                endpoints=rt.settings.endpoints,
            )
        except FilterError as exc:
            raise option_error(exc) from exc
    if as_json:
        click.echo(json.dumps({"events": [summary(e) for e in found], "next_cursor": next_cursor}, indent=2))
        return
    if not found:
        click.echo("no events match")
        return
    for line in table(
        HEADER,
        [
            (queries.iso(e.received_at) or "", e.status, e.endpoint, str(e.attempts), e.event_type, e.event_id)
            for e in found
        ],
    ):
        click.echo(line)
    if next_cursor:
        click.echo(f"more: --cursor {next_cursor}")


HEADER = ("RECEIVED", "STATUS", "ENDPOINT", "TRIES", "TYPE", "EVENT ID")


def table(header: tuple[str, ...], body: list[tuple[str, ...]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart; the last one unpadded."""
    widths = [max(len(row[n]) for row in (header, *body)) for n in range(len(header) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in (header, *body)
    ]


@events.command("show")
@click.argument("endpoint")
@click.argument("event_id")
def show(endpoint: str, event_id: str) -> None:
    """Everything about one event, as JSON (the API's detail)."""
    rt = _runtime()
    with rt.sessions() as session:
        event = session.get(Event, (endpoint, event_id)) if queries.keys_fit((endpoint, event_id)) else None
        if event is None:
            raise click.ClickException(f"no event {endpoint}/{event_id}")
        obj, _ = queries.object_history(session, event)
        out = detail(event, queries.received(session, event)) | {
            "attempt_log": [
                attempt_json(a, tracing.trace_id(event.traceparent))
                for a in queries.attempts(session, endpoint, event_id)
            ],
            "object": object_json(obj) if obj else None,
            "deliveries": deliveries_of(session, endpoint, event_id),
        }
    click.echo(json.dumps(out, indent=2))


@events.command("replay")
@click.argument("endpoint_name", metavar="[ENDPOINT]", required=False)  # --endpoint is a filter option
@click.argument("event_id", required=False)
@filter_options
@click.option("--reason", default=None, help="why (written to the audit log); required for a bulk replay")
@click.option("--dry-run", is_flag=True, help="only count what a bulk replay would queue")
@click.option("--destination", default=None, help="send the events' deliveries to this destination again instead")
@click.option("--force", is_flag=True, help="with --destination: send even what its events/filter refuse now")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
def replay(
    endpoint_name: str | None,
    event_id: str | None,
    reason: str | None,
    dry_run: bool,
    destination: str | None,
    force: bool,
    yes: bool,
    **options: Any,
) -> None:
    """Replay one event (ENDPOINT EVENT_ID) or every event matching the filter options; with
    --destination, send their deliveries there again instead of processing them again."""
    rt = _runtime()
    try:
        if endpoint_name and event_id:
            single = replay_one(
                rt, endpoint_name, event_id, who=_who(), reason=reason, destination=destination, force=force
            )
            click.echo(
                f"re-sending {endpoint_name}/{event_id} to {destination} (audit #{single.replay_id})"
                if destination
                else f"queued {endpoint_name}/{event_id}"
                if single.queued
                else f"recorded {endpoint_name}/{event_id} (audit #{single.replay_id}); {NOT_QUEUED}"
            )
            return
        if endpoint_name:
            raise click.UsageError("give ENDPOINT and EVENT_ID, or filter options only")
        filters = _filters(**options)
        count = replay_matching(rt, filters, who=_who(), reason=None, dry_run=True, destination=destination).count
        to = f" (re-send to {destination})" if destination else ""
        click.echo(f"{count} event(s) match {json.dumps(filters.as_dict())}{to}")
        if dry_run or not count:
            return
        if not reason:
            raise click.UsageError("--reason is required for a bulk replay")
        if not yes:
            click.confirm(f"replay {count} event(s){to}?", abort=True)
        outcome = replay_matching(
            rt, filters, who=_who(), reason=reason, dry_run=False, destination=destination, force=force
        )
        left = f"; {len(outcome.refused)} left out: {destination} refuses them now (--force)" if outcome.refused else ""
        click.echo(
            f"re-sending {outcome.count} event(s) to {destination} (audit #{outcome.replay_id}){left}"
            if destination
            else f"queued {outcome.count} event(s) (audit #{outcome.replay_id})"
            if outcome.queued
            else f"recorded {outcome.count} event(s) (audit #{outcome.replay_id}); {NOT_QUEUED}"
        )
    except ReplayError as exc:
        if exc.reason == "bad_reason":
            raise option_error(FilterError("bad_reason")) from exc
        words = {
            "not_found": f"no event {endpoint_name}/{event_id}",
            "in_progress": f"{endpoint_name}/{event_id} is being processed or sent right now; try again in a moment",
            "filter_required": "give at least one filter option (--endpoint, --status, --type, --since, --until, --q)",
            "too_many": "too many events match: narrow the filter (--since/--until) and replay in steps",
            "unknown_destination": f"no destination {destination!r} is configured",
            "not_processed": f"{endpoint_name}/{event_id} has not been processed: nothing to send yet",
            "filtered": str(exc.detail),
        }
        raise click.ClickException(f"{words.get(exc.reason, 'not replayed')} ({exc.reason})") from exc
