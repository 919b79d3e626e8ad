"""The exception tree, and the one place that maps it to HTTP answers.

    WebhooksError
    ├── ConfigError             bad configuration; raised at start-up (fail closed)
    ├── VerificationError       a request that must not be stored; carries a reason code
    │   └── PayloadError        signed correctly but not parseable (``malformed_payload``)
    └── UnavailableError        the database cannot take the event now (503, provider retries)
"""

from __future__ import annotations


class WebhooksError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(WebhooksError):
    """The configuration is unusable; the message names the endpoint and the problem."""


class VerificationError(WebhooksError):
    """A delivery failed verification; ``reason`` is the machine-readable code sent back."""

    status = 400

    def __init__(self, reason: str, detail: str = "", *, status: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        if status is not None:
            self.status = status


class PayloadError(VerificationError):
    """The signature held but the body cannot be understood."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("malformed_payload", detail)


class UnavailableError(WebhooksError):
    """A backing service is down; the provider should retry later."""
