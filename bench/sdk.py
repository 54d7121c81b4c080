"""Python SDK throughput: events/s of one cs_sdk.Client against a plain loop of batched POSTs
(events stamped before the timer), the sides taking turns round by round."""

from __future__ import annotations

import random
import sys
import uuid
from datetime import datetime, timezone

import psycopg
import requests

import harness as h
import ingest

sys.path.insert(0, str(h.ROOT / "sdk" / "python"))
from cs_sdk import Client  # noqa: E402

GOAL = 0.9
ROUNDS = 10
USERS_A_ROUND = 100
BATCH = 10

OPTIONS = """
--events 20_000   >=1000 events a side
--strict          exit 1 when the goal is missed
"""


def make_round(rng: random.Random, prefix: str, n: int) -> list[tuple[str, str, dict]]:
    """n events over USERS_A_ROUND users, each user's first one its $identify."""
    users = [f"{prefix}-{u}" for u in range(USERS_A_ROUND)]
    out = [(user, "$identify", ingest.props(rng, "$identify", u)) for u, user in enumerate(users)]
    while len(out) < n:
        u, name = rng.randrange(USERS_A_ROUND), rng.choices(h.names(ingest.EVENT_MIX), h.weights(ingest.EVENT_MIX))[0]
        out.append((users[u], name, ingest.props(rng, name, u)))
    return out[:n]


def run_sdk(client: Client, events: list[tuple[str, str, dict]]) -> None:
    for user, name, props in events:
        if name == "$identify":
            client.identify(user, props)
        elif name == "$locale":
            client.set_locale(user, props["locale"])
        else:
            client.track(user, name, props)
    if not client.flush(timeout=120):
        raise h.BenchError("the SDK did not deliver its events within 120 s")


def stamped(events: list[tuple[str, str, dict]]) -> list[list[dict]]:
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    rows = [{"user_id": u, "event": e, "properties": p, "timestamp": now,
             "idempotency_key": str(uuid.uuid4())} for u, e, p in events]
    return [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]


def run_loop(session: requests.Session, url: str, batches: list[list[dict]]) -> None:
    for batch in batches:
        r = session.post(url, json={"events": batch}, timeout=30)
        if r.status_code != 200 or r.json()["accepted"] != len(batch):
            raise h.BenchError(f"plain loop: HTTP {r.status_code} {r.text[:200]}")


def run(bench: h.Bench, args) -> int:
    db = bench.database()
    tenant = bench.tenant(db, ingest.PLAN, keys=2, role="editor", permissions=["ingest"], unlimited=True)
    srv = bench.gunicorn(db, CS_LOG_LEVEL="WARNING")
    key, url = tenant.keys[1], srv.url("/api/track")  # an editor key with the ingest permission, for both sides
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    errors: list[str] = []
    per_round = args.events // ROUNDS
    client = Client(key, srv.url(), max_queue_size=max(per_round, 1000), on_error=lambda lost: errors.append(str(lost)))
    bench.cleanups.append(lambda: client.shutdown(timeout=1))
    rng = random.Random(20261122)
    # warm-up: both paths once, on users of their own
    run_sdk(client, make_round(rng, "warm-sdk", 200))
    run_loop(session, url, stamped(make_round(rng, "warm-loop", 200)))
    seconds = {"sdk": 0.0, "loop": 0.0}
    for r, side in h.interleave(ROUNDS, list(seconds)):
        events = make_round(rng, f"{side}-{r}", per_round)   # made and stamped before the timer
        work = events if side == "sdk" else stamped(events)
        seconds[side] += h.timed(lambda: run_sdk(client, work) if side == "sdk" else run_loop(session, url, work))[0]
    client.shutdown(timeout=10)
    s = client.stats()
    if errors:
        raise h.BenchError(f"the SDK reported: {errors[:3]}")
    expected = 2 * (200 + ROUNDS * per_round)
    with psycopg.connect(h.conninfo(db), connect_timeout=5) as conn:
        stored = conn.execute("SELECT count(*) FROM events WHERE tenant_id = %s", (tenant.id,)).fetchone()[0]
    sdk, loop = (ROUNDS * per_round / seconds[k] for k in ("sdk", "loop"))
    ok = stored == expected and s.duplicates == 0
    print(f"sdk.py: {ROUNDS * per_round:,} events a side in {ROUNDS} rounds, gunicorn 2 sync workers; SDK client "
          f"{sdk:,.0f} ev/s ({s.batches:,} requests), plain loop {loop:,.0f} ev/s ({ROUNDS * per_round // BATCH:,} "
          f"requests); ratio {sdk / loop:.2f} (goal >= {GOAL}: {'met' if sdk / loop >= GOAL else 'NOT met'})")
    print(f"  check: {stored:,} events stored, {expected:,} sent ({'ok' if ok else 'FAILED'})")
    return 2 if not ok else 1 if args.strict and sdk / loop < GOAL else 0


if __name__ == "__main__":
    sys.exit(h.main("sdk", __doc__, OPTIONS, run))
