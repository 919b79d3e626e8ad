"""The ``webhooks`` command: ``serve``, ``worker``, ``db upgrade|current``, ``events …``, ``tokens …``."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import secrets
import signal
import sys
from typing import TYPE_CHECKING, Any

import click

from webhooks.service.process_setup import version

if TYPE_CHECKING:
    from webhooks.configuration.settings import Settings

# Commands that live in other modules load on first use: `webhooks --help` imports neither
# SQLAlchemy, Flask nor the providers (name → (module, attribute, one-line help)).
LAZY = {
    "send": ("webhooks.service.send", "send", "Sign PAYLOAD_FILE as ENDPOINT's provider would and POST it."),
    "listen": ("webhooks.service.listen", "listen", "Post a deployed receiver's events to a local URL, live."),
    "events": ("webhooks.service.events_cli", "events", "List, show and replay stored events."),
    "tokens": ("webhooks.service.tokens_cli", "tokens_group", "Create, list and revoke the admin API's named tokens."),
    "config": (
        "webhooks.service.config_cli",
        "config_group",
        "Plan, apply and export the database's endpoints and destinations as a file.",
    ),
    "keys": ("webhooks.service.keys_cli", "keys_group", "Count and re-encrypt stored secrets per encryption key."),
    "purge": ("webhooks.service.purge_cli", "purge_command", "Delete old processed, ignored and failed events."),
    "reconcile": (
        "webhooks.service.reconcile_cli",
        "reconcile_command",
        "Store and process the Stripe events an endpoint missed.",
    ),
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

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            message = explain(exc)
            if message is None:
                raise
            logging.getLogger("webhooks.cli").debug("%s", message, exc_info=True)
            raise click.ClickException(message) from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, command.get_short_help_str(80)) for name, command in self.commands.items() if not command.hidden]
        rows += [(name, text) for name, (_, _, text) in LAZY.items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


def _where(url: str | None) -> str:
    """A service URL fit to print: no password."""
    if not url:
        return "the default"
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(unparsable URL)"


def explain(exc: Exception) -> str | None:
    """One line for an error a person can fix (what failed, what to do); None for a bug."""
    import redis
    from sqlalchemy.exc import DBAPIError, NoSuchTableError

    from webhooks.configuration import settings as config
    from webhooks.errors import ConfigError

    if isinstance(exc, ConfigError):
        return f"configuration: {exc}"
    settings = None
    try:
        settings = config.load()
    except ConfigError:
        pass
    if isinstance(exc, redis.RedisError):
        where = settings.redis_url if settings else None
        return (
            f"cannot reach Redis at {_where(where)} ({exc.__class__.__name__}: {str(exc).splitlines()[0][:200]}); "
            "check that it runs and that REDIS_URL is right"
        )
    if isinstance(exc, DBAPIError | NoSuchTableError):
        url = settings.database_url if settings else None
        problem = _schema_problem(url) if url else None
        if problem and not problem.startswith("database unreachable"):
            return problem  # a database that answers but was not migrated (or is behind)
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        return f"database error at {_where(url)}: {detail}; check that it runs and that DATABASE_URL is right"
    return None


def _schema_problem(url: str) -> str | None:
    from webhooks.engines import make_engine
    from webhooks.tables import revisions

    engine = make_engine(url)
    try:
        return revisions.problem(engine)
    finally:
        engine.dispose()


def alembic_config(url: str) -> Any:
    from webhooks.tables.revisions import alembic_config

    return alembic_config(url)


def upgrade(url: str, revision: str = "head") -> None:
    from webhooks.tables.revisions import upgrade

    upgrade(url, revision)


def load_settings() -> Settings:
    """The configuration, or the command's one-line ``configuration: …`` error (every command
    loads it here)."""
    from webhooks.configuration import settings as config
    from webhooks.errors import ConfigError

    try:
        return config.load()
    except ConfigError as exc:
        raise click.ClickException(f"configuration: {exc}") from exc


def _print_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"webhooks {version()}")
        ctx.exit()


@click.group(cls=LazyGroup)
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version."
)
def main() -> None:
    """Receive, verify, store and process webhooks.

    A failure prints one line saying what failed and what to do; WEBHOOKS_LOG_LEVEL=DEBUG adds the
    traceback.
    """
    from webhooks.configuration.settings import log_options
    from webhooks.service.process_setup import configure_logging, warn_unknown_variables

    level, fmt = log_options()
    configure_logging(level, fmt)
    warn_unknown_variables()


def _default_port() -> str:
    from webhooks.configuration import settings as config

    return config.port()


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    type=int,
    default=lambda: _default_port(),  # click's check: a usage error naming --port, not a traceback
    show_default="$PORT or 8000",
)
def serve(host: str, port: int) -> None:
    """Run it all, nothing to install: SQLite, web and worker processes, the console."""
    from webhooks.service import process_setup as setup
    from webhooks.service.process_setup import admin_password_file, kept_password, prepare_metrics_dir, quiet

    # Several processes: /metrics adds up their samples. First, before anything imports
    # prometheus_client, which decides at import whether its values go to files (every process).
    prepare_metrics_dir()
    from gunicorn.app.base import BaseApplication  # type: ignore[import-untyped]

    from webhooks.configuration import encryption
    from webhooks.service import gunicorn_conf, serving
    from webhooks.worker import handlers

    settings = load_settings()
    require_job()
    refuse_taken(host, port)
    if problem := serving.taken(settings.database_url):  # one serve per database: it takes back every claim
        raise click.ClickException(problem)
    if settings.redis_url:  # as `webhooks worker` does: one line, not the banner and retries without end
        refuse_unreachable_redis(settings.redis_url)
    handlers.load(settings.handler_modules)  # refuse to start on a module it cannot import
    handlers.announce(settings.handler_modules)
    kept = None
    if not settings.admin_password:  # one password for this database, not a new one every start
        kept = admin_password_file(settings.database_url).resolve()
        settings = dataclasses.replace(settings, admin_password=kept_password(kept, lambda: secrets.token_urlsafe(12)))
    key_file = None  # secrets stored through the API: sealed by a key kept beside the database
    if settings.keyring is None and (problem := setup.key_file_missing(settings.database_url)):
        raise click.ClickException(problem)  # never a new key for rows sealed under another
    if settings.keyring is None and (local := encryption.local_keyring(settings.database_url)) is not None:
        settings, key_file = dataclasses.replace(settings, keyring=local[0]), local[1].resolve()
    # Alembic's and the embedded worker's INFO lines would bury the banner; DEBUG shows them.
    quiet("alembic.runtime.migration", "rq.worker", "rq.scheduler")
    upgrade(settings.database_url)
    if problem := setup.missing_key_problem(settings):  # a stored secret's key is not configured
        raise click.ClickException(f"configuration: {problem}")
    # -P: the worker process runs the installed package, never a webhooks/ in the working
    # directory (``-m`` would put it first on sys.path: a clone's has no jobs).
    worker = serving.WorkerProcess([sys.executable, "-P", "-m", "webhooks", "serve-worker"])
    workers = gunicorn_conf.workers

    def ready(process: Any) -> None:
        # In the last web process of the first start, once its app is loaded: after every start-up line.
        if process.age == workers:
            stored = setup.stored_endpoints(settings.database_url)
            click.echo(serving.banner(settings, [str(s) for s in process.sockets], kept, key_file, stored))
            sys.stdout.flush()

    class Server(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type hints
        """gunicorn with the Procfile's web settings; its master also runs the worker process."""

        def load_config(self) -> None:
            names = (
                "timeout",
                "graceful_timeout",
                "keepalive",
                "limit_request_line",
                "limit_request_fields",
                "limit_request_field_size",
                "control_socket_disable",
                "worker_class",
                "workers",
                "threads",
                "logger_class",
            )
            for name in names:
                self.cfg.set(name, getattr(gunicorn_conf, name))
            self.cfg.set("bind", [f"{host}:{port}"])
            self.cfg.set("post_worker_init", ready)
            self.cfg.set("when_ready", lambda server: worker.start(lambda: bool(server.LISTENERS)))
            self.cfg.set("on_exit", lambda server: worker.stop())
            self.cfg.set("child_exit", lambda server, process: _process_exited(process.pid))

        def load(self) -> Any:
            # In each web process (threads and SQLite connections do not survive a fork).
            return serving.web_app(settings)

    Server().run()


def _process_exited(pid: int) -> None:
    from webhooks.metrics import process_exited

    process_exited(pid)


def require_job() -> None:
    """Stop with one line when this process cannot import the job function (every worker)."""
    from webhooks.worker.job_errors import check_job

    problem = check_job()
    if problem:
        raise click.ClickException(problem)


def refuse_taken(host: str, port: int) -> None:
    """Stop ``serve`` with one line if its address is taken (gunicorn would log eleven over 5 s)."""
    from webhooks.service.process_setup import bind_problem

    problem = bind_problem(host, port)
    if problem:
        raise click.ClickException(f"{problem}; choose another port with --port N (or PORT=N)")


@main.command("serve-worker", hidden=True)
def serve_worker() -> None:
    """The worker process ``serve`` starts (not for use on its own)."""
    from webhooks.service import serving
    from webhooks.service.process_setup import quiet
    from webhooks.worker import handlers

    settings = load_settings()
    require_job()
    handlers.load(settings.handler_modules)
    quiet("rq.worker", "rq.scheduler")
    serving.work(settings)


@main.command()
@click.option("--burst", is_flag=True, help="Drain the queue, then exit.")
def worker(burst: bool) -> None:
    """Run an RQ worker on REDIS_URL (with the retry scheduler and the sweeper)."""
    from webhooks.service.process_setup import missing_key_problem, prepare_metrics_dir

    prepare_metrics_dir()  # before the jobs import prometheus_client: the web's /metrics adds these up

    from webhooks.service import worker_probe
    from webhooks.tables import revisions
    from webhooks.worker.loop import run

    settings = load_settings()
    if problem := worker_probe.problem():  # WEBHOOKS_WORKER_PORT: a port number, free
        raise click.ClickException(problem)
    if not settings.redis_url:
        raise click.ClickException("REDIS_URL is not set (`webhooks serve` runs its own worker)")
    require_job()
    refuse_unreachable_redis(settings.redis_url)
    revisions.wait_for_head(settings.database_url, logging.getLogger("webhooks.worker"))
    if problem := missing_key_problem(settings):  # a stored secret's key is not configured
        raise click.ClickException(f"configuration: {problem}")
    run(settings, burst=burst, started=None if burst else worker_probe.start)  # its /healthz and /metrics


def refuse_unreachable_redis(url: str) -> None:
    """At the first start only: a wrong REDIS_URL is one line and exit 1, not retries without end."""
    from webhooks.worker.loop import unreachable

    problem = unreachable(url)
    if problem:
        raise click.ClickException(f"{problem}; check that it runs and that REDIS_URL is right")


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.argument("revision", default="head")
@click.option("--wait", type=click.FloatRange(0, 3600), default=0, help="Wait up to N seconds for the database.")
def db_upgrade(revision: str, wait: float) -> None:
    """Apply migrations up to REVISION (default: head)."""
    from webhooks.tables.revisions import wait_for_database

    settings = load_settings()
    if wait and (problem := wait_for_database(settings.database_url, wait, logging.getLogger("webhooks.db"))):
        raise click.ClickException(problem)
    upgrade(settings.database_url, revision)
    click.echo(f"database at {revision}")
    from webhooks.configuration import settings as config

    manager = config.process_manager()
    if manager.startswith("release"):
        # honcho and foreman run every Procfile line side by side and stop them all when one
        # exits; a release phase (Heroku) sets neither variable and goes on to the deploy.
        click.echo("release done; staying up because this process manager stops every process when one exits")
        sys.stdout.flush()
        stop = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)


@db.command("current")
def db_current() -> None:
    """Print the database's revision and the head; exit 1 if behind."""
    from sqlalchemy.exc import SQLAlchemyError

    from webhooks.engines import make_engine
    from webhooks.tables import revisions

    settings = load_settings()
    engine = make_engine(settings.database_url)
    try:
        at = revisions.current(engine)
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        raise click.ClickException(
            f"database error at {_where(settings.database_url)}: {detail}; "
            "check that it runs and that DATABASE_URL is right"
        ) from exc
    finally:
        engine.dispose()
    head = revisions.head()
    if at is None:
        raise click.ClickException(f"database never migrated, head {head}: run `webhooks db upgrade`")
    if at == head:
        click.echo(f"database at {at}, head {head}")
    elif at in revisions.known():
        raise click.ClickException(f"database at {at}, head {head}: run `webhooks db upgrade`")
    else:
        raise click.ClickException(f"database at {at}, head {head}: a newer release migrated it; run that release")
