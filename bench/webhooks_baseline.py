"""The baseline of bench/webhooks.py: sign and POST prepared webhook bodies as fast as a
plain script can, with N threads sharing one requests.Session.

    python bench/webhooks_baseline.py SPEC.json

SPEC.json: {"url", "secret", "threads", "warmup", "items": [{"id", "event_id", "body"}]}.
Each item is signed like a delivery (X-Service-Signature: HMAC-SHA256 hex of the body;
Standard Webhooks webhook-id / webhook-timestamp / webhook-signature: base64 HMAC-SHA256
of "id.timestamp.body") and POSTed; an answer other than 2xx is an error. `warmup`
requests (the first items again, new ids) go first, untimed. Prints one JSON line:
{"n", "seconds", "rate", "errors"}.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import threading
import time
import uuid
from datetime import datetime, timezone

import requests


def sign(secret: bytes, body: bytes, delivery_id: str, event_id: str | None) -> dict[str, str]:
    now = datetime.now(timezone.utc)
    ts = int(now.timestamp())
    signed = f"{delivery_id}.{ts}.".encode() + body
    out = {
        "Content-Type": "application/json",
        "User-Agent": "Service-Webhook/1.0",
        "X-Service-Signature": hmac.new(secret, body, hashlib.sha256).hexdigest(),
        "X-Service-Timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "webhook-id": delivery_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode(),
    }
    if event_id:
        out["X-Service-Event-Id"] = event_id
    return out


def run(session: requests.Session, url: str, secret: bytes, items: list[tuple[str, str | None, bytes]],
        threads: int) -> tuple[float, int]:
    lock = threading.Lock()
    it = iter(items)
    errors = [0]

    def work() -> None:
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                return
            delivery_id, event_id, body = item
            try:
                resp = session.post(url, data=body, headers=sign(secret, body, delivery_id, event_id), timeout=10)
                ok = 200 <= resp.status_code < 300
                resp.content  # noqa: B018 - read the answer, as the service does
            except requests.RequestException:
                ok = False
            if not ok:
                with lock:
                    errors[0] += 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start, errors[0]


def main() -> int:
    spec = json.loads(open(sys.argv[1]).read())
    secret = spec["secret"].encode()
    items = [(i["id"], i["event_id"], i["body"].encode()) for i in spec["items"]]
    warm = [(str(uuid.uuid4()), e, b) for _, e, b in items[: spec.get("warmup", 0)]]
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=max(10, spec["threads"]))
    session.mount("http://", adapter)
    if warm:
        run(session, spec["url"], secret, warm, spec["threads"])
    seconds, errors = run(session, spec["url"], secret, items, spec["threads"])
    session.close()
    print(json.dumps({"n": len(items), "seconds": seconds, "rate": len(items) / seconds, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
