"""Throwaway services for fault injection: the suite's own redis-server and PostgreSQL cluster
(tests/support/servers.py) on spare ports, stopped and started by process id. The machine's shared
services are never touched. Missing binaries skip a test on a laptop and fail it under ``CI=true``."""

from __future__ import annotations

import os

import pytest

from tests.support import servers


def missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} — required under CI=true")
    pytest.skip(what)


class Redis(servers.Redis):
    """A redis-server without persistence: a restart loses everything, like a flush."""

    def __init__(self, port: int | None = None) -> None:
        try:
            super().__init__(port)
        except servers.Unavailable as exc:
            missing(str(exc))


class Postgres(servers.Postgres):
    """A PostgreSQL cluster in a temp directory, run as the ``postgres`` OS user where we are root."""

    def __init__(self) -> None:
        try:
            super().__init__()
        except servers.Unavailable as exc:
            missing(str(exc))
