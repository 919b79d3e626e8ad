"""The database schema's revision: where Alembic's scripts are, the head, and what a database is at."""

from __future__ import annotations

import importlib.util
import logging
import time
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError


def migrations_dir() -> Path:
    """Where the Alembic scripts are: the package ``webhooks.migrations`` (the repository's
    top-level ``migrations/``, mapped there by pyproject.toml), found without importing it."""
    spec = importlib.util.find_spec("webhooks.migrations")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("webhooks.migrations is not installed (pip install -e . or the wheel)")
    return Path(next(iter(spec.submodule_search_locations)))


def alembic_config(url: str) -> Any:  # alembic.config.Config, imported lazily (alembic is slow to import)
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


@cache
def head() -> str:
    """The newest revision this code ships (one head: the migrations never branch)."""
    from alembic.script import ScriptDirectory

    return str(ScriptDirectory.from_config(alembic_config("")).get_current_head())


@cache
def known() -> frozenset[str]:
    """Every revision this code ships."""
    from alembic.script import ScriptDirectory

    return frozenset(script.revision for script in ScriptDirectory.from_config(alembic_config("")).walk_revisions())


def current(engine: Engine) -> str | None:
    """The database's revision; None when it was never migrated. Raises SQLAlchemyError when down."""
    with engine.connect() as conn:
        if not engine.dialect.has_table(conn, "alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def problem(engine: Engine) -> str | None:
    """Why the schema cannot serve this code, in one line with what to do; None when it can."""
    try:
        at = current(engine)
    except SQLAlchemyError as exc:
        return f"database unreachable ({exc.__class__.__name__})"
    want = head()
    if at == want:
        return None
    found = "never migrated" if at is None else f"at {at}"
    return f"database schema {found}, head is {want}: run `webhooks db upgrade`"


def missing_schema(exc: BaseException) -> bool:
    """Whether a database error is a table or column that is not there (SQLite's "no such table",
    PostgreSQL's undefined table or column): a schema never migrated or behind, not an outage."""
    text_of = str(getattr(exc, "orig", exc)).lower()
    undefined = "does not exist" in text_of and ("relation" in text_of or "column" in text_of)
    return "no such table" in text_of or "no such column" in text_of or undefined


def wait_for_head(url: str, log: logging.Logger, *, interval: float = 2.0, every: float = 30.0) -> None:
    """Block until the database answers at the head revision, saying why it waits (when it starts
    waiting, then every ``every`` seconds): web and worker started beside the release step (or
    before the database) wait for it instead of crashing on missing tables."""
    from webhooks.engines import make_engine

    engine = make_engine(url)
    told, last = 0.0, None
    try:
        while (problem := problem_quietly(engine)) is not None:
            now = time.monotonic()
            if problem != last or now - told >= every:
                log.warning("waiting for the database: %s", problem)
                told, last = now, problem
            time.sleep(interval)
    finally:
        engine.dispose()
    if last is not None:
        log.info("database ready at %s", head())


def wait_for_database(url: str, within: float, log: logging.Logger, *, interval: float = 1.0) -> str | None:
    """Wait up to ``within`` seconds for the database to answer (a container started beside it);
    None once it does, else the one-line reason it still does not."""
    from webhooks.engines import make_engine

    engine, deadline, last = make_engine(url), time.monotonic() + within, None
    try:
        while True:
            try:
                with engine.connect():
                    return None
            except Exception as exc:  # refused, not yet accepting, a name not yet resolvable
                reason = f"database not answering ({exc.__class__.__name__})"
            if time.monotonic() >= deadline:
                return f"{reason} after {within:g} s: check DATABASE_URL and that the database runs"
            if reason != last:
                log.warning("waiting for the database: %s", reason)
                last = reason
            time.sleep(interval)
    finally:
        engine.dispose()


def problem_quietly(engine: Engine) -> str | None:
    """``problem``, or a one-line reason when even asking fails (a database half-answering)."""
    try:
        return problem(engine)
    except Exception as exc:  # a database that half-answers while starting: keep waiting
        return f"database not answering ({exc.__class__.__name__})"
