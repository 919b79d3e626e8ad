"""The one HTTP client of the service's own calls out (PayPal's API and certificates, ``webhooks
send``): urllib with a timeout, an optional size cap and optionally no redirects. Every answer comes
back as an ``Answer``, whatever its status; no answer at all raises ``Unreachable``. Each caller maps
both to its own errors (a job's ``FetchError``, a verification's 503, a command's one line).

Standard library only: provider modules use it and must import without a web framework.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass


class Unreachable(OSError):
    """No HTTP answer: the name, the connection, TLS or the timeout failed (the message says which)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # the 3xx itself is the answer


_FOLLOWING = urllib.request.build_opener()
_NOT_FOLLOWING = urllib.request.build_opener(_NoRedirect)


def call(
    url: str,
    *,
    method: str = "GET",
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    limit: int | None = None,
    redirects: bool = True,
) -> Answer:
    """One request. ``limit``: read at most that many bytes + 1 of the body (the caller sees that it
    was longer). ``redirects=False``: a redirect is answered as its own 3xx status."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    size = -1 if limit is None else limit + 1
    opener = _FOLLOWING if redirects else _NOT_FOLLOWING
    try:
        try:
            with opener.open(request, timeout=timeout) as response:
                return Answer(response.status, response.read(size))
        except urllib.error.HTTPError as exc:  # a 4xx/5xx (or a refused redirect) is still an answer
            with exc:
                return Answer(exc.code, exc.read(size))
    except (urllib.error.URLError, OSError) as exc:  # TimeoutError and ConnectionError are OSErrors
        raise Unreachable(f"{url}: {exc.__class__.__name__} ({getattr(exc, 'reason', exc)})") from exc
