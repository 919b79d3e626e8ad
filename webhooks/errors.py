"""The exception tree of the service and the console.

    WebhooksError
    ├── ConfigError             bad configuration; raised at start-up (fail closed)
    ├── VerificationError       a request that must not be stored; carries a reason code and status
    │   └── PayloadError        signed correctly but not parseable (``malformed_payload``)
    ├── UnavailableError        the database cannot take the event now (503, provider retries)
    ├── NoRuntimeError          a job ran where no worker put a runtime in scope (fails the job)
    ├── PurgeRefusedError       (``purge.py``) the window would let a late retry in as new
    ├── FilterError             (``admin/queries.py``) a console filter value it cannot use (400)
    ├── ReplayError             (``admin/replay.py``) a replay that cannot be done (its status)
    ├── TokenError              (``tokens.py``) a token name that cannot be created or revoked
    └── ConfigItemError         (``store/config_items.py``) a runtime configuration change refused
                                (its ``word`` and ``status``: the admin API's answer)

HTTP answers are given in two places: the receiver (``receive.py``) for ``VerificationError`` and
``UnavailableError``, the console (``admin/errors.py`` and its blueprints) for the rest but
``NoRuntimeError`` (a worker's, never shown over HTTP) and ``TokenError`` (the CLI's). Outside
this tree, on purpose: the providers' API clients (``providers.api.ApiError``,
``FetchError``/``MismatchError``) fail a job and are never shown over HTTP.
"""

from __future__ import annotations

from webhooks.vocabulary import Reason


class WebhooksError(Exception):
    """Base of the errors above (see the module docstring for those outside it)."""


class ConfigError(WebhooksError):
    """The configuration is unusable; the message names the endpoint and the problem."""


class VerificationError(WebhooksError):
    """A delivery failed verification; ``reason`` (``vocabulary.Reason``) is the machine-readable code sent back."""

    status = 400

    def __init__(self, reason: Reason | str, detail: str = "", *, status: int | None = None) -> None:
        self.reason = Reason(reason)  # a code outside ``Reason`` is a bug: ValueError
        super().__init__(f"{self.reason}: {detail}" if detail else str(self.reason))
        self.detail = detail
        if status is not None:
            self.status = status


class PayloadError(VerificationError):
    """The signature held but the body cannot be understood."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(Reason.MALFORMED_PAYLOAD, detail)


class UnavailableError(WebhooksError):
    """A backing service is down; the provider should retry later. ``detail``: what an operator must
    do, when known (an unmigrated database: run ``webhooks db upgrade``), shown in the 503's body."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class NoRuntimeError(WebhooksError):
    """A job ran outside any worker's runtime scope (e.g. under RQ's own worker class)."""
