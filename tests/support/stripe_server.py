"""A Stripe-compatible HTTP server on loopback, for driving the real `stripe` library.

It answers what billing calls — POST /v1/customers, /v1/checkout/sessions and
/v1/billing_portal/sessions — in Stripe's JSON shapes and error shape, checks the bearer
key, honours `Idempotency-Key` on customers the way Stripe does (same key, same
customer), and records every request with its form-encoded body as a flat dict
(`{"line_items[0][price]": "price_…"}`). `fail_next` scripts one Stripe error answer.

`sign` and `event` make webhook deliveries exactly as Stripe does: the header
`t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" keyed with the endpoint secret>`.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    form: dict[str, str]


@dataclass
class StripeServer:
    api_key: str = "sk_test_billing"
    requests: list[Request] = field(default_factory=list)
    customers: dict[str, dict] = field(default_factory=dict)
    fail_next: dict[str, tuple[int, str]] = field(default_factory=dict)   # path → (status, message)

    def __post_init__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                status, body = server._handle(self, dict(parse_qsl(raw, keep_blank_values=True)))
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._by_idempotency: dict[str, dict] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}"

    def posts(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- the API ---------------------------------------------------------------------

    def _handle(self, handler, form: dict[str, str]) -> tuple[int, dict]:
        with self._lock:
            headers = {k.lower(): v for k, v in handler.headers.items()}
            self.requests.append(Request(handler.command, handler.path, headers, form))
            if headers.get("authorization") != f"Bearer {self.api_key}":
                return 401, _error("authentication_error", "Invalid API Key provided")
            if handler.path in self.fail_next:
                status, message = self.fail_next.pop(handler.path)
                return status, _error("invalid_request_error", message)
            route = {("POST", "/v1/customers"): self._customer,
                     ("POST", "/v1/checkout/sessions"): self._checkout_session,
                     ("POST", "/v1/billing_portal/sessions"): self._portal_session}.get((handler.command, handler.path))
            if route is None:
                return 404, _error("invalid_request_error", f"Unrecognized request URL ({handler.command}: {handler.path})")
            return route(form, headers)

    def _customer(self, form: dict, headers: dict) -> tuple[int, dict]:
        key = headers.get("idempotency-key")
        if key in self._by_idempotency:
            return 200, self._by_idempotency[key]
        customer = {"id": f"cus_test{next(self._ids)}", "object": "customer", "created": int(time.time()),
                    "email": form.get("email"), "name": form.get("name"), "livemode": False,
                    "metadata": _sub(form, "metadata")}
        self.customers[customer["id"]] = customer
        if key:
            self._by_idempotency[key] = customer
        return 200, customer

    def _checkout_session(self, form: dict, headers: dict) -> tuple[int, dict]:
        if form.get("customer") not in self.customers:
            return 400, _error("invalid_request_error", f"No such customer: '{form.get('customer')}'", "resource_missing")
        sid = f"cs_test_{next(self._ids)}"
        return 200, {"id": sid, "object": "checkout.session", "mode": form.get("mode"), "status": "open",
                     "customer": form["customer"], "client_reference_id": form.get("client_reference_id"),
                     "metadata": _sub(form, "metadata"), "success_url": form.get("success_url"),
                     "cancel_url": form.get("cancel_url"), "livemode": False,
                     "url": f"https://checkout.stripe.com/c/pay/{sid}"}

    def _portal_session(self, form: dict, headers: dict) -> tuple[int, dict]:
        if form.get("customer") not in self.customers:
            return 400, _error("invalid_request_error", f"No such customer: '{form.get('customer')}'", "resource_missing")
        sid = f"bps_test_{next(self._ids)}"
        return 200, {"id": sid, "object": "billing_portal.session", "customer": form["customer"],
                     "return_url": form.get("return_url"), "livemode": False,
                     "url": f"https://billing.stripe.com/p/session/{sid}"}


def _sub(form: dict, name: str) -> dict:
    """`metadata[plan]=growth` … as {"plan": "growth"}."""
    prefix = f"{name}["
    return {k[len(prefix):-1]: v for k, v in form.items() if k.startswith(prefix) and k.count("[") == 1}


def _error(kind: str, message: str, code: str | None = None) -> dict:
    return {"error": {"type": kind, "message": message, **({"code": code} if code else {})}}


# --- webhooks ------------------------------------------------------------------------

def event(kind: str, obj: dict, event_id: str | None = None) -> str:
    """A Stripe event as Stripe sends it (the raw body of a delivery)."""
    return json.dumps({
        "id": event_id or f"evt_test_{time.time_ns()}", "object": "event", "api_version": "2025-09-30.clover",
        "created": int(time.time()), "livemode": False, "pending_webhooks": 1, "type": kind,
        "request": {"id": None, "idempotency_key": None}, "data": {"object": obj},
    })


def sign(payload: str, secret: str, timestamp: int | None = None) -> str:
    """The `Stripe-Signature` header of a delivery of `payload`."""
    t = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{t}.{payload}".encode(), hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"
