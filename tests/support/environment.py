"""The suite's own environment: what a developer's shell or working directory may carry is never
what a test's app or process sees (issue #29: a ``webhooks.toml`` in the clone's root and a
``STRIPE_WEBHOOK_SECRET`` in the shell changed 15 tests' outcome).

``isolate`` runs once when the suite starts (tests/conftest.py); ``clean_env`` in
tests/support/processes.py starts every child process from the result. A test that wants one of
these variables sets it (``monkeypatch.setenv``, or the child's ``env``).
"""

from __future__ import annotations

from collections.abc import MutableMapping

from webhooks.providers import shorthands

# The service's own variables and the process managers' (gunicorn reads PORT, WEB_* and
# GUNICORN_CMD_ARGS); the suite's knobs (WEBHOOKS_TEST_*, TEST_DATABASE_URL, …) are kept.
NAMES = ("DATABASE_URL", "REDIS_URL", "PORT", "GUNICORN_CMD_ARGS")
PREFIXES = ("WEBHOOKS_", "WEB_", "OTEL_")  # OTEL_*: tracing stays off unless a test turns it on
KEPT_PREFIXES = ("WEBHOOKS_TEST_",)


def from_the_shell(name: str) -> bool:
    """Whether ``name`` configures the service (and so must not come from the developer's shell)."""
    if name.startswith(KEPT_PREFIXES):
        return False
    return name in NAMES or name.startswith(PREFIXES) or name in shorthands()


def isolate(environ: MutableMapping[str, str]) -> list[str]:
    """Drop the service's variables from ``environ`` and name no config file: ``WEBHOOKS_CONFIG``
    set but empty, so no process reads a ``webhooks.toml`` from its working directory. Returns the
    names dropped."""
    dropped = sorted(name for name in environ if from_the_shell(name))
    for name in dropped:
        del environ[name]
    environ["WEBHOOKS_CONFIG"] = ""
    return dropped


def keep_bytecode(environ: MutableMapping[str, str]) -> None:
    """Let this process and every one it starts cache compiled modules (``__pycache__``, gitignored).

    With ``PYTHONDONTWRITEBYTECODE`` set (container images set it; this machine's shell does) nothing
    is ever cached: each of the suite's hundreds of processes (three test processes, every ``webhooks``
    command, gunicorn and its workers) compiled the package from source again, and pytest rewrote
    every test module again in each test process. Measured on this 2-core machine under the suite's
    load: importing the app's packages took 23 s with no cache against 10 s with one."""
    import sys

    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
