"""``kind = "sqs"``: each delivery is one ``SendMessage`` to the destination's queue (boto3).

The message body is the event's bytes as text, unchanged: an SQS body is Unicode text, so bytes that
are not UTF-8, or hold a character SQS does not take (a control character other than tab, line feed
and carriage return), are never altered to fit: the attempt fails saying so (``refused: the event's
bytes …``) and the delivery ends ``failed`` after its schedule (a provider's JSON is UTF-8 text).
Its message attributes (``String``) are exactly the ten ``ATTRIBUTES``: the HTTP forward's headers in
lower case (``content-type``, ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``,
``webhooks-endpoint``, ``webhooks-event-id``, ``webhooks-event-type``, ``webhooks-object``,
``webhooks-object-version``; not ``idempotency-key``, which equals ``webhook-id``) and ``traceparent``
when the forward is traced; SQS allows ten. An event without an object has no ``webhooks-object``.

On a FIFO queue (``.fifo``) ``MessageGroupId`` is the object (the event id when there is none: SQS
keeps order within a group) and ``MessageDeduplicationId`` the ``webhook-id``: a re-send within SQS's
five-minute deduplication window is accepted and dropped by SQS (no second message).

Delivered means ``SendMessage`` answered with a ``MessageId`` (kept as the attempt's answer). The
endpoint down, a refusal (no such queue, access denied, throttled) or no answer within
``timeout_seconds`` (boto3's connect and read timeouts) is a failed attempt: the delivery stays
``pending``, retried on the destination's schedule. botocore does not retry (one attempt): a
``SendMessage`` retried after its answer was lost would put the message twice on a Standard queue;
the schedule retries, with the same ``webhook-id``.

The host boto3 calls (``endpoint_url``, else AWS's endpoint for the region) is vetted by
``guard.vet`` before each send; boto3 (urllib3) then resolves and connects to it by name itself, so
unlike the other bus kinds the connection is not pinned to the address the guard checked.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import botocore.exceptions

from webhooks.configuration.buses import Sqs
from webhooks.configuration.destinations import Destination
from webhooks.forward.leases import Lease, Result
from webhooks.guard import Refused, Resolver, resolve_within, vet

ATTRIBUTES = (
    "content-type",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "webhooks-endpoint",
    "webhooks-event-id",
    "webhooks-event-type",
    "webhooks-object",
    "webhooks-object-version",
    "traceparent",
)
GROUP_ID = re.compile(r"[!-~]{1,128}")  # what SQS takes as a group or deduplication id
NOT_SQS_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")  # SQS's body characters


def _id(value: str) -> str:
    """``value`` as an SQS group or deduplication id: itself when SQS takes it, else its SHA-256."""
    return value if GROUP_ID.fullmatch(value) else hashlib.sha256(value.encode()).hexdigest()


def text(body: bytes) -> str | None:
    """``body`` as an SQS message body, or None when it is not one (not UTF-8, or a character SQS refuses)."""
    try:
        decoded = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if NOT_SQS_TEXT.search(decoded) else decoded


class SqsPublisher:
    """``SendMessage`` to one queue through one boto3 client (thread-safe; at most ``max_in_flight``
    connections), made at the first send."""

    def __init__(self, destination: Destination, resolver: Resolver) -> None:
        assert isinstance(destination.bus, Sqs)
        self.options = destination.bus
        self.target = destination.target
        self.timeout = destination.timeout_seconds
        self.max_in_flight = destination.max_in_flight
        self.allow_private = destination.allow_private
        self.resolver = resolve_within(resolver, destination.timeout_seconds)
        self.client: Any = None
        self.lock = threading.Lock()

    def _client(self) -> Any:
        # boto3 and botocore.config take a quarter of a second to import, and every process that
        # imports the forwarder (the web ones too, for ``nudge``) imports each kind: only a sender pays.
        import boto3
        import botocore.config

        with self.lock:
            if self.client is None:
                session = boto3.session.Session(
                    aws_access_key_id=self.options.access_key_id,
                    aws_secret_access_key=self.options.secret_access_key,
                    region_name=self.options.region,
                )
                config = botocore.config.Config(
                    connect_timeout=self.timeout,
                    read_timeout=self.timeout,
                    retries={"total_max_attempts": 1},  # one attempt, whatever the retry mode
                    max_pool_connections=self.max_in_flight,
                )
                self.client = session.client("sqs", endpoint_url=self.options.endpoint_url, config=config)
            return self.client

    def message(self, lease: Lease, headers: Mapping[str, str]) -> dict[str, Any]:
        """``SendMessage``'s parameters but the body."""
        fields = {k.lower(): v for k, v in headers.items()}
        attributes = {
            name: {"DataType": "String", "StringValue": fields[name]} for name in ATTRIBUTES if fields.get(name)
        }
        sent: dict[str, Any] = {"QueueUrl": self.options.queue_url, "MessageAttributes": attributes}
        if self.options.fifo:
            sent["MessageGroupId"] = _id(fields.get("webhooks-object") or lease.event_id)
            sent["MessageDeduplicationId"] = _id(fields["webhook-id"])
        return sent

    def publish(self, lease: Lease, headers: Mapping[str, str], started_at: datetime) -> Result:
        clock = time.monotonic()

        def failed(error: str) -> Result:
            return Result(lease, started_at, time.monotonic() - clock, None, f"{error}: {self.target}")

        body = text(lease.body)
        if body is None:
            return failed("refused: the event's bytes are not UTF-8 text an SQS message body can hold")
        try:
            client = self._client()
            parts = urllib.parse.urlsplit(client.meta.endpoint_url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            vet(parts.hostname or "", port, allow_private=self.allow_private, resolver=self.resolver)
            answer = client.send_message(MessageBody=body, **self.message(lease, headers))
        except Refused as exc:
            return failed(f"refused: {exc}")
        except botocore.exceptions.ClientError as exc:  # SQS answered with an error
            error = exc.response.get("Error", {})
            return failed(f"refused: {error.get('Code', '?')} {error.get('Message', '')}".rstrip())
        except (botocore.exceptions.ConnectTimeoutError, botocore.exceptions.ReadTimeoutError):
            return failed(f"timeout: no answer within {self.timeout:g} s")
        except botocore.exceptions.NoCredentialsError:
            return failed("refused: no AWS credentials (access_key_id / secret_access_key, or boto3's chain)")
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            return failed(f"connect: {exc.__class__.__name__} {exc}".rstrip())
        seconds = time.monotonic() - clock
        return Result(lease, started_at, seconds, None, None, None, str(answer["MessageId"]), acknowledged=True)

    def close(self) -> None:
        with self.lock:
            client, self.client = self.client, None
        if client is not None:
            client.close()
