"""The two provider APIs a handler test cannot do without, played on 127.0.0.1 (never the network).

Mailgun signs no event data and Mercado Pago signs no body: their workers act only on the
provider's own copy (Mailgun's event log, Mercado Pago's ``/v1/payments/<id>``), so a test endpoint
of those kinds points ``api_base`` here. The event log holds what the test client sent; every
numeric payment id is an approved payment.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

MAILGUN_API_KEY = "key-webhooks-testing"
MAILGUN_DOMAIN = "mg.example.com"
MERCADOPAGO_TOKEN = "TEST-0000000000000000-000000-webhooks-testing-0"


class ProviderAPIs:
    """One loopback server for both APIs; ``logged`` is Mailgun's event log (``event-data`` items)."""

    def __init__(self) -> None:
        self.logged: list[dict[str, Any]] = []
        apis = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, answer = apis.answer(urlsplit(self.path).path, self.headers.get("Authorization") or "")
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        # The stop flag looked at every 0.05 s: socketserver's 0.5 s made each test's end wait for it.
        threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="webhooks-testing-apis", daemon=True
        ).start()

    def answer(self, path: str, authorization: str) -> tuple[int, Any]:
        import base64

        if path == f"/v3/{MAILGUN_DOMAIN}/events":
            if authorization != "Basic " + base64.b64encode(f"api:{MAILGUN_API_KEY}".encode()).decode():
                return 401, {"message": "Invalid private key"}
            return 200, {"items": list(self.logged), "paging": {}}
        payment = path.removeprefix("/v1/payments/")
        if payment.isdigit() and authorization == f"Bearer {MERCADOPAGO_TOKEN}":
            return 200, {"id": int(payment), "status": "approved", "transaction_amount": 58.8, "currency_id": "BRL"}
        return 404, {"message": "not found", "status": 404}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
