"""The test client of ``webhooks.testing``: deliveries signed as each endpoint's kind would sign
them, posted through the receiver, and the queued work run in the test's thread through the
application's own handlers (``WEBHOOKS_HANDLERS``), with each event's outcome."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhooks.testing import catalogue

if TYPE_CHECKING:
    from flask import Flask
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session
    from werkzeug.test import TestResponse

    from webhooks.runtime import Runtime
    from webhooks.testing.apis import ProviderAPIs

BASE_URL = "http://localhost"  # the Flask test client's


@dataclass(frozen=True)
class Outcome:
    """One stored event after ``run()``: its status (``processed``, ``ignored``, ``failed``, or
    ``received`` if it waits on an earlier version), the handlers that ran, the error a handler
    raised (``error``, ``traceback``), and what the event page shows of it."""

    endpoint: str
    event_id: str
    type: str
    status: str
    handlers: tuple[str, ...]
    error: str | None
    traceback: str | None
    object_type: str | None
    object_id: str | None
    object_version: int | None


class WebhookClient:
    """``send`` signs and posts; ``run`` processes what is queued and returns the outcomes."""

    def __init__(self, app: Flask, apis: ProviderAPIs | None = None) -> None:
        from webhooks.worker import handlers

        handlers.load(app.extensions["webhooks"].settings.handler_modules)  # as a worker does at start
        self.app = app
        self.http = app.test_client()
        self._apis = apis
        self._reported: set[tuple[str, str]] = set()
        self._session: Session | None = None

    @property
    def runtime(self) -> Runtime:
        rt: Runtime = self.app.extensions["webhooks"]
        return rt

    @property
    def engine(self) -> Engine:
        """The throwaway database's engine (the handlers' ``event.session`` writes here)."""
        return self.runtime.engine

    @property
    def session(self) -> Session:
        """A session on the throwaway database, to read what the handlers wrote (closed at the
        test's end; each ``run()`` ends its transaction so it sees the newest commits)."""
        from sqlalchemy.orm import Session

        if self._session is None:
            self._session = Session(self.engine)
        return self._session

    def payload(self, name: str, kind: str | None = None) -> bytes:
        """A packaged payload's bytes by name (``catalogue.payload``)."""
        return catalogue.payload(name, kind)

    def sign(self, endpoint: str, body: bytes, *, url: str | None = None) -> tuple[str, bytes, dict[str, str]]:
        """What ``endpoint``'s provider would send for ``body``: (URL, body, headers)."""
        from webhooks import providers

        config = self.runtime.settings.endpoints.get(endpoint)
        if config is None:
            known = ", ".join(sorted(self.runtime.settings.endpoints))
            raise LookupError(f"no endpoint {endpoint!r} (configured: {known})")
        provider = providers.get(config.kind)
        target = provider.post_url(url or f"{BASE_URL}/webhooks/{endpoint}", body)
        body, headers = provider.sign(config, body, now=time.time(), url=target)
        return target, body, headers

    def send(
        self, endpoint: str, payload: str | bytes | dict[str, Any] | list[Any], *, headers: dict[str, str] | None = None
    ) -> TestResponse:
        """Sign ``payload`` as ``endpoint``'s kind would and post it to the receiver; the answer.
        ``payload``: a packaged payload's name (``"payment_intent.succeeded__basic"`` for the
        endpoint's kind, or ``"stripe/…json"``), the body's bytes, or JSON to encode."""
        kind = self._kind(endpoint)
        if isinstance(payload, str):
            body = catalogue.payload(payload, kind)
        elif isinstance(payload, bytes):
            body = payload
        else:
            body = json.dumps(payload).encode()
        if kind in catalogue.LOGGED and self._apis is not None:  # the provider's log has what it sent
            self._apis.logged.append(json.loads(body)[catalogue.LOGGED[kind]])
        target, body, signed = self.sign(endpoint, body)
        signed.update(headers or {})
        path = target.removeprefix(BASE_URL)
        return self.http.post(path, data=body, headers=signed)

    def run(self) -> list[Outcome]:
        """Run every queued job to completion in this thread, through the handlers, and return the
        outcome of each event stored since the last ``run()`` (in the order received)."""
        from webhooks.worker.burst import run_queued

        rt = self.runtime
        rt.bind()
        run_queued(rt)
        if self._session is not None:
            self._session.rollback()  # a fresh transaction: the handlers' commits are visible
        outcomes = [o for o in self.outcomes() if (o.endpoint, o.event_id) not in self._reported]
        self._reported.update((o.endpoint, o.event_id) for o in outcomes)
        return outcomes

    def outcomes(self) -> list[Outcome]:
        """Every stored event's outcome, in the order received."""
        import sqlalchemy as sa

        from webhooks.tables.events import Attempt, Event

        last = (
            sa.select(Attempt.handlers)
            .where(Attempt.endpoint == Event.endpoint, Attempt.event_id == Event.event_id)
            .order_by(Attempt.number.desc())
            .limit(1)
            .scalar_subquery()
        )
        query = sa.select(Event, last).order_by(Event.received_at, Event.endpoint, Event.event_id)
        from sqlalchemy.orm import Session

        with Session(self.engine) as session:
            return [
                Outcome(
                    endpoint=e.endpoint,
                    event_id=e.event_id,
                    type=e.event_type,
                    status=e.status,
                    handlers=tuple(handlers or ()),
                    error=e.last_error,
                    traceback=e.last_traceback,
                    object_type=e.object_type,
                    object_id=e.object_id,
                    object_version=e.object_version,
                )
                for e, handlers in session.execute(query)
            ]

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
        watcher = getattr(self.runtime, "watcher", None)
        if watcher is not None:
            watcher.stop.set()
        self.runtime.engine.dispose()

    def _kind(self, endpoint: str) -> str:
        config = self.runtime.settings.endpoints.get(endpoint)
        return config.kind if config is not None else endpoint
