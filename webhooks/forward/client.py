"""STUB (replaced by the helper's module)."""

from __future__ import annotations

import http.client
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from .guard import Refused, Resolver, system_resolver, vet

RESPONSE_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes
    seconds: float


class SendError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Sender:
    def __init__(self, url: str, *, timeout: float, allow_private: bool, resolver: Resolver = system_resolver) -> None:
        self.url, self.timeout, self.allow_private, self.resolver = url, timeout, allow_private, resolver

    def post(self, body: bytes, headers: Mapping[str, str]) -> Response:
        u = urlsplit(self.url)
        try:
            addr = vet(u.hostname or "", u.port or 80, allow_private=self.allow_private, resolver=self.resolver)[0]
        except Refused as exc:
            raise SendError("refused", str(exc)) from exc
        start = time.monotonic()
        c = http.client.HTTPConnection(addr, u.port or 80, timeout=self.timeout)
        try:
            c.request("POST", u.path or "/", body=body, headers=dict(headers))
            r = c.getresponse()
            data = r.read(RESPONSE_LIMIT)
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data, time.monotonic() - start)
        except TimeoutError as exc:
            raise SendError("timeout", "timed out") from exc
        except OSError as exc:
            raise SendError("connect", str(exc)) from exc
        finally:
            c.close()

    def close(self) -> None:
        pass
