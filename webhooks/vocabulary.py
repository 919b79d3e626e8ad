"""The service's fixed vocabularies: an event's ``status``, the reason code of a refused delivery,
and a forwarded delivery's ``status`` and attempt ``outcome``.

Both are ``StrEnum``: each member *is* its string (``Status.QUEUED == "queued"``), so the JSON,
the database and the metrics labels see exactly the words they always saw.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """``events.status``: received → queued → processing → processed | ignored | failed."""

    RECEIVED = "received"
    QUEUED = "queued"
    PROCESSING = "processing"
    PROCESSED = "processed"
    FAILED = "failed"
    IGNORED = "ignored"


class DeliveryStatus(StrEnum):
    """``deliveries.status``: pending → delivered | failed (attempts spent) | superseded (an ordered
    destination had a newer version of the object already)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class Outcome(StrEnum):
    """``delivery_attempts.outcome``, and the forwarding metrics' ``outcome`` label."""

    DELIVERED = "delivered"
    ERROR = "error"  # an attempt spent: an answer other than 2xx, a timeout, no connection
    THROTTLED = "throttled"  # 429/503 with Retry-After: the destination waits, no attempt spent
    GONE = "gone"  # 410: the destination is paused until an operator resumes it
    PROBE_FAILED = "probe_failed"  # the circuit is open: no attempt spent
    SUPERSEDED = "superseded"  # not sent: the ordered destination has a newer version
    INTERRUPTED = "interrupted"  # its worker stopped past WEBHOOKS_STOP_TIMEOUT mid-send: due at once, not spent


# What a worker may claim: waiting, or processing under a claim its worker abandoned (the newer
# claim supersedes it), or failed (a replay).
CLAIMABLE = (Status.RECEIVED, Status.QUEUED, Status.PROCESSING, Status.FAILED)
# An attempt's status (``attempts.status``, ``attempt_log``) when its worker was stopping and
# ``WEBHOOKS_STOP_TIMEOUT`` passed before it ended: its effects rolled back, the event queued again,
# and the attempt not counted against ``WEBHOOKS_MAX_ATTEMPTS``.
INTERRUPTED = "interrupted"
# How an attempt's error begins when the worker could not run the job at all (webhooks.worker.job_errors).
JOB_ERROR = "worker could not run this job: "


class Reason(StrEnum):
    """Why a delivery was refused (or re-verify found nothing): the ``error`` sent back, the
    ``reason`` counted in ``rejection_counts`` and on the ``rejections`` metric."""

    MISSING_SIGNATURE = "missing_signature"
    MALFORMED_SIGNATURE = "malformed_signature"
    SIGNATURE_MISMATCH = "signature_mismatch"
    TIMESTAMP_OUT_OF_TOLERANCE = "timestamp_out_of_tolerance"
    URL_MISMATCH = "url_mismatch"
    BAD_BASIC_AUTH = "bad_basic_auth"
    MALFORMED_PAYLOAD = "malformed_payload"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    REQUEST_TIMEOUT = "request_timeout"
    UNKNOWN_ENDPOINT = "unknown_endpoint"
    # An endpoint whose every signing secret is outside its window (the last one lapsed, or its
    # ``not_before`` is still ahead): it refuses every delivery until a live secret is added.
    NO_LIVE_SECRET = "no_live_secret"
    RATE_LIMITED = "rate_limited"
    REPLAYED_SIGNATURE = "replayed_signature"
    NOT_FOUND = "not_found"
    TOO_MANY_SIGNATURES = "too_many_signatures"
    TOO_MANY_PARAMETERS = "too_many_parameters"
    # The worker's: a nudge of a kind that signs nothing named an object the provider does not
    # have (its event ends ``ignored`` with this as ``last_error``; never sent back to the sender).
    UNKNOWN_OBJECT = "unknown_object"
    # The console's: a client that typed too many wrong admin passwords (or tokens) waits (429);
    # no or a wrong password, an unknown or revoked token (401); a read-only token's change (403).
    LOGIN_THROTTLED = "login_throttled"
    UNAUTHORIZED = "unauthorized"
    READ_ONLY = "read_only"
