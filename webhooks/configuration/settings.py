"""Configuration: the only reader of the environment and of the TOML endpoints file.

``load(environ)`` turns a mapping shaped like the environment (``os.environ`` by default; tests
pass a dict) into ``Settings``. Endpoints come from the TOML file named by ``WEBHOOKS_CONFIG``
(unset: ``webhooks.toml`` if present; set but empty: no file; a mapping without the key takes the
process's, as ``env:`` names do), from an ``ENDPOINTS`` entry of a test mapping, and from the
shorthand variables. A shorthand never fills a key of a table the file defines: an endpoint both
in the file and named by a set shorthand is refused, unless the file reads that variable itself
(``"env:STRIPE_WEBHOOK_SECRET"``). Everything is validated here, at start-up: a bad endpoint fails
closed with a message naming it.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from webhooks import providers, tracing
from webhooks.configuration import encryption
from webhooks.configuration.destinations import Destination, destination, forwards, known_keys
from webhooks.configuration.keys import VARIABLE as ENCRYPTION_KEYS
from webhooks.configuration.keys import Keyring
from webhooks.errors import ConfigError
from webhooks.guard import Resolver
from webhooks.providers import shorthands
from webhooks.providers.base import Endpoint
from webhooks.urls import checked_database_url, database_url, redis_url

ENDPOINT_FIELDS = (
    "provider",
    "secrets",
    "tolerance_seconds",
    "basic_auth",
    "rate_limit",
    "sender_rate_limit",
    "forward",
)
# The defaults of an endpoint whose kind signs nothing (``Provider.signs_nothing``: anyone may post
# to it, and each delivery costs a call of the operator's API quota): requests a second for the
# endpoint, and for one sender address. Explicit values replace them.
UNSIGNED_RATE_LIMIT = 20.0
UNSIGNED_SENDER_RATE_LIMIT = 10.0


@dataclass(frozen=True)
class Settings:
    database_url: str = "sqlite:///webhooks.db"
    redis_url: str | None = None
    admin_password: str | None = None
    endpoints: Mapping[str, Endpoint] = field(default_factory=dict)
    destinations: Mapping[str, Destination] = field(default_factory=dict)
    forwards: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # endpoint → destination names
    variables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # endpoint → the shorthands that made it
    handler_modules: tuple[str, ...] = ()
    queue_name: str = "default"  # what a plain `rq worker` listens to
    max_body_bytes: int = 1024 * 1024
    read_timeout: float = 10.0
    max_attempts: int = 5
    retry_base_seconds: float = 10.0
    retry_max_seconds: float = 3600.0
    job_timeout: int = 300
    stop_timeout: float = 25.0  # seconds a stopping process lets running work finish (under Heroku's 30)
    sweep_interval: float = 15.0
    sweep_age: float = 60.0
    embedded_worker: bool = True
    quarantine_rows: int = 1000
    quarantine_days: float = 7.0
    quarantine_bytes: int = 64 * 1024 * 1024  # bodies, URLs and headers kept, shared by endpoints
    trusted_proxies: int = 0  # proxies in front that append the client to X-Forwarded-For
    outbound_timeout: float = 10.0  # seconds any call out (provider APIs, `webhooks send`) may wait
    keyring: Keyring | None = field(default=None, repr=False, compare=False)  # seals stored secrets
    tracing: bool = False  # OpenTelemetry (``tracing``; ``webhooks.tracing``)

    @property
    def embedded_queue(self) -> bool:
        return not self.redis_url


def _resolve(value: Any, where: str, environ: Mapping[str, str]) -> Any:
    if isinstance(value, str) and value.startswith("env:"):
        name = value[4:]
        found = environ.get(name, os.environ.get(name))
        if not found:
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return found
    return value


def build_endpoint(name: str, raw: Mapping[str, Any], environ: Mapping[str, str]) -> Endpoint:
    where = f"endpoint {name!r}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a table")
    kind = raw.get("provider", name)
    try:
        provider = providers.get(str(kind))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    _refuse_unknown(where, raw, {*ENDPOINT_FIELDS, "secret", *provider.option_names})
    secrets = raw.get("secrets", raw.get("secret", []))
    if isinstance(secrets, str):
        secrets = [secrets]
    if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
        raise ConfigError(f"{where}: secrets must be a list of strings")
    resolved = tuple(_resolve(s, where, environ).strip() for s in secrets)
    if not all(resolved):
        raise ConfigError(f"{where}: an empty secret is no secret configured (fail closed)")
    tolerance = raw.get("tolerance_seconds", 300)
    if not isinstance(tolerance, int) or isinstance(tolerance, bool) or tolerance <= 0:
        raise ConfigError(f"{where}: tolerance_seconds must be a positive integer")
    basic_auth = _resolve(raw.get("basic_auth"), where, environ)
    rate_limit, sender_rate_limit = (_rate(raw.get(key), where, key) for key in ("rate_limit", "sender_rate_limit"))
    options = {k: _resolve(v, where, environ) for k, v in raw.items() if k not in (*ENDPOINT_FIELDS, "secret")}
    endpoint = Endpoint(name, str(kind), resolved, tolerance, basic_auth or None, options)
    provider.validate(endpoint)  # its messages name the endpoint
    if provider.signs_nothing(endpoint):  # anyone may post to it: a flood must cost the sender
        rate_limit = rate_limit or UNSIGNED_RATE_LIMIT
        sender_rate_limit = sender_rate_limit or UNSIGNED_SENDER_RATE_LIMIT
    return replace(endpoint, rate_limit=rate_limit, sender_rate_limit=sender_rate_limit)


def _rate(value: Any, where: str, key: str) -> float | None:
    """A configured requests-a-second budget (None: not configured), or ``ConfigError``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
        raise ConfigError(f"{where}: {key} must be a positive number of requests a second")
    return value


def build_destination(
    name: str, raw: Mapping[str, Any], environ: Mapping[str, Any], resolver: Resolver | None = None
) -> Destination:
    """One destination, validated; ``resolver`` looks its host up (default: the system's; the
    database's items pass ``guard.no_lookup``)."""
    _refuse_unknown(f"destination {name!r}", raw, known_keys(name, raw))
    return destination(name, raw, lambda value, where: _resolve(value, where, environ), resolver)


def _refuse_unknown(where: str, raw: Mapping[str, Any], known: set[str]) -> None:
    """A key nobody reads is a typo that would silently fall back to a default: stop start-up."""
    for key in sorted(set(raw) - known):
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
        raise ConfigError(f"{where}: unknown key {key!r} ({hint})")


def config_file(environ: Mapping[str, Any]) -> Path | None:
    """The TOML file to read: ``WEBHOOKS_CONFIG``'s path; unset, ``./webhooks.toml`` if there is one;
    set but empty, none (what the test suite sets, so a developer's own file never changes it)."""
    path = environ.get("WEBHOOKS_CONFIG")
    if path is None and environ is not os.environ:
        path = os.environ.get("WEBHOOKS_CONFIG")
    if path is None:
        return Path("webhooks.toml") if Path("webhooks.toml").is_file() else None
    return Path(path) if path else None


def _tables(environ: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The ``[endpoints.*]`` and ``[destinations.*]`` tables of the config file, then of a test
    mapping's ``ENDPOINTS`` and ``DESTINATIONS`` entries."""
    endpoints: dict[str, dict[str, Any]] = {}
    destinations: dict[str, dict[str, Any]] = {}
    file = config_file(environ)
    if file is not None:
        try:
            data = tomllib.loads(file.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {file}: {exc}") from exc
        _refuse_unknown(f"config file {file}", data, {"endpoints", "destinations"})
        endpoints.update({k: _table(f"endpoint {k!r}", v) for k, v in data.get("endpoints", {}).items()})
        destinations.update({k: _table(f"destination {k!r}", v) for k, v in data.get("destinations", {}).items()})
    for name, tables in (("ENDPOINTS", endpoints), ("DESTINATIONS", destinations)):
        inline = environ.get(name)
        if isinstance(inline, Mapping):
            tables.update({k: dict(v) for k, v in inline.items()})
    return endpoints, destinations


def _table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table")
    return dict(value)


def _raw_endpoints(environ: Mapping[str, Any], raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    defined = set(raw)  # the file's tables (and a test mapping's ENDPOINTS)
    for variable, (name, kind, field_name) in shorthands().items():
        value = environ.get(variable)
        if value and name in defined:
            if _reads(raw, variable):  # the file uses the variable (docs/providers/mollie.md: another table)
                continue
            file = config_file(environ)
            read = f'["env:{variable}"]' if field_name == "secrets" else f'"env:{variable}"'
            raise ConfigError(
                f"endpoint {name!r} is defined both in {file or 'ENDPOINTS'} and by {variable}: remove one,"
                f" or read the variable in the file ({field_name} = {read})"
            )
        if value:
            entry = raw.setdefault(name, {"provider": kind})
            if field_name == "secrets":
                entry.setdefault("secrets", [s.strip() for s in value.split(",") if s.strip()])
            else:
                entry.setdefault(field_name, value)
    return raw


def _reads(table: Any, variable: str) -> bool:
    """Whether any value of these tables (or a list's item) is ``"env:<variable>"``."""
    if isinstance(table, Mapping):
        return any(_reads(v, variable) for v in table.values())
    if isinstance(table, list):
        return any(_reads(v, variable) for v in table)
    return bool(table == f"env:{variable}")


def _number(environ: Mapping[str, str], name: str, default: float) -> float:
    value = environ.get(name)
    if value in (None, ""):
        return default
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number, not {value!r}") from None
    if number < 0:
        raise ConfigError(f"{name} must not be negative")
    return number


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    value = (environ.get(name) or "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, not {value!r}")


def load(environ: Mapping[str, Any] | None = None) -> Settings:
    """Read and validate the whole configuration."""
    env: Mapping[str, Any] = os.environ if environ is None else environ
    raw_endpoints, raw_destinations = _tables(env)
    made = {v: n for v, (n, _, _) in shorthands().items() if env.get(v) and n not in raw_endpoints}
    raw_endpoints = _raw_endpoints(env, raw_endpoints)
    endpoints = {name: build_endpoint(name, raw, env) for name, raw in raw_endpoints.items()}
    destinations = {name: build_destination(name, raw, env) for name, raw in raw_destinations.items()}
    forward = {
        name: forwards(name, raw["forward"], destinations) for name, raw in raw_endpoints.items() if raw.get("forward")
    }
    handlers = tuple(m.strip() for m in (env.get("WEBHOOKS_HANDLERS") or "").split(",") if m.strip())
    attempts = int(_number(env, "WEBHOOKS_MAX_ATTEMPTS", 5))
    outbound = _number(env, "WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS", 10)
    if not outbound:  # 0 would make every call out fail at once, not wait forever
        raise ConfigError("WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS must be more than 0")
    endpoints = {name: replace(endpoint, outbound_timeout=outbound) for name, endpoint in endpoints.items()}
    if attempts < 1:
        raise ConfigError("WEBHOOKS_MAX_ATTEMPTS must be at least 1")
    database = checked_database_url(env.get("DATABASE_URL") or "sqlite:///webhooks.db")
    return Settings(
        database_url=database,
        redis_url=redis_url(env.get("REDIS_URL") or None),
        admin_password=env.get("WEBHOOKS_ADMIN_PASSWORD") or None,
        endpoints=endpoints,
        variables={n: tuple(sorted(v for v, of in made.items() if of == n)) for n in set(made.values())},
        destinations=destinations,
        forwards=forward,
        handler_modules=handlers,
        queue_name=env.get("WEBHOOKS_QUEUE") or "default",
        max_body_bytes=int(_number(env, "WEBHOOKS_MAX_BODY_BYTES", 1024 * 1024)),
        read_timeout=_number(env, "WEBHOOKS_READ_TIMEOUT_SECONDS", 10),
        max_attempts=attempts,
        retry_base_seconds=_number(env, "WEBHOOKS_RETRY_BASE_SECONDS", 10),
        retry_max_seconds=_number(env, "WEBHOOKS_RETRY_MAX_SECONDS", 3600),
        job_timeout=int(_number(env, "WEBHOOKS_JOB_TIMEOUT", 300)),
        stop_timeout=_number(env, "WEBHOOKS_STOP_TIMEOUT", 25),
        sweep_interval=_number(env, "WEBHOOKS_SWEEP_INTERVAL", 15),
        sweep_age=_number(env, "WEBHOOKS_SWEEP_AGE", 60),
        embedded_worker=_flag(env, "WEBHOOKS_EMBEDDED_WORKER", True),
        quarantine_rows=int(_number(env, "WEBHOOKS_QUARANTINE_ROWS", 1000)),
        quarantine_days=_number(env, "WEBHOOKS_QUARANTINE_DAYS", 7),
        quarantine_bytes=int(_number(env, "WEBHOOKS_QUARANTINE_BYTES", 64 * 1024 * 1024)),
        trusted_proxies=int(_number(env, "WEBHOOKS_TRUSTED_PROXIES", 0)),
        outbound_timeout=outbound,
        keyring=encryption.keyring(env.get(ENCRYPTION_KEYS), database),
        tracing=tracing.switched_on(env),
    )


SECRET_PREFIX = "WEBHOOKS_SECRET_"  # `webhooks config export`'s placeholders: WEBHOOKS_SECRET_<ITEM>_<N>


# Every ``WEBHOOKS_*`` variable something reads (the test suite's too): any other is a typo.
# fmt: off
VARIABLES = (
    "WEBHOOKS_ADMIN_PASSWORD", "WEBHOOKS_CONFIG", "WEBHOOKS_EMBEDDED_WORKER", "WEBHOOKS_ENCRYPTION_KEYS",
    "WEBHOOKS_HANDLERS", "WEBHOOKS_JOB_TIMEOUT", "WEBHOOKS_LISTENERS_MAX", "WEBHOOKS_LOG_FORMAT", "WEBHOOKS_LOG_LEVEL",
    "WEBHOOKS_MAX_ATTEMPTS", "WEBHOOKS_MAX_BODY_BYTES", "WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS",
    "WEBHOOKS_QUARANTINE_BYTES", "WEBHOOKS_QUARANTINE_DAYS", "WEBHOOKS_QUARANTINE_ROWS", "WEBHOOKS_QUEUE",
    "WEBHOOKS_READ_TIMEOUT_SECONDS", "WEBHOOKS_RETRY_BASE_SECONDS", "WEBHOOKS_RETRY_MAX_SECONDS",
    "WEBHOOKS_SWEEP_AGE", "WEBHOOKS_STOP_TIMEOUT", "WEBHOOKS_SWEEP_INTERVAL", "WEBHOOKS_TRUSTED_PROXIES",
    "WEBHOOKS_TEST_CHROMIUM", "WEBHOOKS_WORKER_PORT",
)
# fmt: on


def unknown_variables(environ: Mapping[str, Any] | None = None) -> list[str]:
    """One warning per ``WEBHOOKS_*`` variable nobody reads, naming the closest known one (a typo)."""
    env: Mapping[str, Any] = os.environ if environ is None else environ
    warnings = []
    names = (n for n in env if n.startswith("WEBHOOKS_") and n not in VARIABLES and not n.startswith(SECRET_PREFIX))
    for name in sorted(names):
        # Compared without the prefix every name shares, which would make any name look close.
        close = difflib.get_close_matches(name[9:], [v[9:] for v in VARIABLES], n=1, cutoff=0.6)
        hint = f"did you mean WEBHOOKS_{close[0]}?" if close else "no such setting"
        warnings.append(f"unknown environment variable {name} is ignored ({hint})")
    return warnings


def deployment(environ: Mapping[str, Any] | None = None) -> str:
    """A short name for this deployment, the same in each of its processes: a hash of its
    ``DATABASE_URL`` and working directory (two services of one user on one host differ)."""
    import hashlib

    env: Mapping[str, Any] = os.environ if environ is None else environ
    url = database_url(env.get("DATABASE_URL") or "sqlite:///webhooks.db")
    return hashlib.sha256(f"{url}\0{os.getcwd()}".encode()).hexdigest()[:12]


LOG_FORMATS = ("json", "text")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_options(environ: Mapping[str, Any] | None = None) -> tuple[str, str | None]:
    """``WEBHOOKS_LOG_LEVEL`` (default INFO) and ``WEBHOOKS_LOG_FORMAT`` (json | text; None: text on
    a terminal, JSON otherwise)."""
    env: Mapping[str, Any] = os.environ if environ is None else environ
    level = (env.get("WEBHOOKS_LOG_LEVEL") or "INFO").strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"WEBHOOKS_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    fmt = (env.get("WEBHOOKS_LOG_FORMAT") or "").strip().lower() or None
    if fmt is not None and fmt not in LOG_FORMATS:
        raise ConfigError(f"WEBHOOKS_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    return level, fmt


def variable(name: str, default: str | None = None) -> str | None:
    """One environment variable, for what is read outside ``load`` (a process's own settings)."""
    return os.environ.get(name) or default


def worker_port() -> int | None:
    """``WEBHOOKS_WORKER_PORT``: where ``webhooks worker`` answers ``/healthz`` and ``/metrics`` (None: no listener)."""
    value = (variable("WEBHOOKS_WORKER_PORT") or "").strip()
    if not value:
        return None
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ConfigError(f"WEBHOOKS_WORKER_PORT must be a port number (1-65535), not {value!r}")
    return int(value)


def port() -> str:
    """``PORT`` (Heroku, honcho), default 8000: ``webhooks serve``, ``send`` and gunicorn's ``bind``."""
    return variable("PORT") or "8000"


def process_manager() -> str:
    """The name a process manager gave this process (``HONCHO_PROCESS_NAME``, foreman's ``PS``) or ''."""
    return variable("HONCHO_PROCESS_NAME") or variable("PS") or ""


def metrics_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR``: where this host's processes write their samples (None: one process)."""
    return variable("PROMETHEUS_MULTIPROC_DIR")


@dataclass(frozen=True)
class WebProcess:
    """gunicorn's settings from the environment (``webhooks.gunicorn_conf``)."""

    port: str
    workers: int
    threads: int
    head_timeout: float
    body_timeout: float
    stop_timeout: float  # WEBHOOKS_STOP_TIMEOUT: gunicorn's graceful_timeout


def web_process() -> WebProcess:
    return WebProcess(
        port=port(),
        workers=int(variable("WEB_CONCURRENCY") or "2"),
        threads=int(variable("WEB_THREADS") or "256"),
        head_timeout=float(variable("WEB_HEAD_TIMEOUT_SECONDS") or "10"),  # from a thread taking it up
        body_timeout=float(variable("WEB_BODY_TIMEOUT_SECONDS") or "20"),  # from the end of its head
        stop_timeout=float(variable("WEBHOOKS_STOP_TIMEOUT") or "25"),
    )
