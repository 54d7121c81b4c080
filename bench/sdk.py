"""Python SDK throughput: events/s of one cs_sdk.Client against a plain loop of batched POSTs
(events stamped before the timer), rounds alternating which side goes first."""

from __future__ import annotations

import random
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

import psycopg
import requests

import harness as h
import ingest

sys.path.insert(0, str(h.ROOT / "sdk" / "python"))
from cs_sdk import Client  # noqa: E402

GOAL = 0.9
USERS_A_ROUND = 100
BATCH = 10

OPTIONS = """
--events 20_000   events a side
--rounds 10       rounds, the sides taking turns
--seed 20261122   seed of the events
--strict          exit 1 when the goal is missed
"""


@dataclass
class Side:
    name: str
    events: int = 0
    seconds: float = 0.0
    rounds: list[float] = field(default_factory=list)  # events/s of each round

    @property
    def eps(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def make_round(rng: random.Random, prefix: str, n: int) -> list[tuple[str, str, dict]]:
    """n events over USERS_A_ROUND users, each user's first one its $identify."""
    names = [name for name, _ in ingest.EVENT_MIX]
    weights = [w for _, w in ingest.EVENT_MIX]
    users = [f"{prefix}-{u}" for u in range(USERS_A_ROUND)]
    out = [(user, "$identify", ingest._props(rng, "$identify", u)) for u, user in enumerate(users)]
    while len(out) < n:
        u = rng.randrange(USERS_A_ROUND)
        name = rng.choices(names, weights)[0]
        out.append((users[u], name, ingest._props(rng, name, u)))
    return out[:n]


def run_sdk(client: Client, events: list[tuple[str, str, dict]]) -> float:
    start = time.perf_counter()
    for user, name, props in events:
        if name == "$identify":
            client.identify(user, props)
        elif name == "$locale":
            client.set_locale(user, props["locale"])
        else:
            client.track(user, name, props)
    if not client.flush(timeout=120):
        raise h.BenchError("the SDK did not deliver its events within 120 s")
    return time.perf_counter() - start


def stamped(events: list[tuple[str, str, dict]]) -> list[list[dict]]:
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    rows = [{"user_id": u, "event": e, "properties": p, "timestamp": now,
             "idempotency_key": str(uuid.uuid4())} for u, e, p in events]
    return [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]


def run_loop(session: requests.Session, url: str, batches: list[list[dict]]) -> float:
    start = time.perf_counter()
    for batch in batches:
        r = session.post(url, json={"events": batch}, timeout=30)
        if r.status_code != 200 or r.json()["accepted"] != len(batch):
            raise h.BenchError(f"plain loop: HTTP {r.status_code} {r.text[:200]}")
    return time.perf_counter() - start


def run(bench: h.Bench, args) -> int:
    print(f"sdk.py: {args.events:,} events a side in {args.rounds} rounds; gunicorn 2 sync workers on "
          f"{h.HOST}, PostgreSQL + Redis")
    db = bench.database()
    tenant = bench.tenant(db, ingest.PLAN, keys=2, role="editor", permissions=["ingest"], unlimited=True)
    srv = bench.gunicorn(db, CS_LOG_LEVEL="WARNING")
    key, url = tenant.keys[1], srv.url("/api/track")  # an editor key with the ingest permission, for both sides
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    errors: list[str] = []
    client = Client(key, srv.url(), max_queue_size=max(args.events // args.rounds, 1000),
                    on_error=lambda dropped: errors.append(str(dropped)))
    bench.cleanups.append(lambda: client.shutdown(timeout=1))
    rng = random.Random(args.seed)
    per_round = args.events // args.rounds
    # warm-up: both paths once, on users of their own
    run_sdk(client, make_round(rng, "warm-sdk", 200))
    run_loop(session, url, stamped(make_round(rng, "warm-loop", 200)))
    sides = {"sdk": Side("SDK client"), "loop": Side("plain loop")}
    work, last = {}, None
    for r, which in h.interleave(args.rounds, list(sides)):
        if r != last:  # a round's events are made before either side runs
            work = {"sdk": make_round(rng, f"sdk-{r}", per_round),
                    "loop": stamped(make_round(rng, f"loop-{r}", per_round))}
            last = r
        seconds = run_sdk(client, work["sdk"]) if which == "sdk" else run_loop(session, url, work["loop"])
        side = sides[which]
        side.events, side.seconds = side.events + per_round, side.seconds + seconds
        side.rounds.append(per_round / seconds)
        if len(sides["sdk"].rounds) == len(sides["loop"].rounds):
            print(f"  round {r + 1:>2}: SDK {sides['sdk'].rounds[-1]:>7,.0f} ev/s   "
                  f"loop {sides['loop'].rounds[-1]:>7,.0f} ev/s", flush=True)
    client.shutdown(timeout=10)
    s = client.stats()
    if errors:
        raise h.BenchError(f"the SDK reported: {errors[:3]}")
    expected = 2 * (200 + args.rounds * per_round)
    with psycopg.connect(h.conninfo(db), connect_timeout=5) as conn:
        stored = conn.execute("SELECT count(*) FROM events WHERE tenant_id = %s", (tenant.id,)).fetchone()[0]
    sdk, loop = sides["sdk"], sides["loop"]
    ratio = sdk.eps / loop.eps
    print(f"  SDK client: {sdk.eps:>8,.0f} ev/s  ({sdk.events:,} events in {sdk.seconds:.2f} s; "
          f"{s.batches:,} requests, {s.retries} retries, {s.dropped + s.rejected + s.abandoned} dropped)")
    print(f"  plain loop: {loop.eps:>8,.0f} ev/s  ({loop.events:,} events in {loop.seconds:.2f} s; "
          f"{loop.events // BATCH:,} requests)")
    paired = statistics.median(a / b for a, b in zip(sdk.rounds, loop.rounds))
    print(f"  ratio SDK / loop: {ratio:.2f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'NOT met'}); "
          f"median of the rounds' ratios {paired:.2f}")
    ok = stored == expected and s.duplicates == 0
    print(f"  check: {stored:,} events stored, {expected:,} sent ({'ok' if ok else 'FAILED'})")
    return 2 if not ok else 1 if args.strict and ratio < GOAL else 0


def check(args) -> str | None:
    if args.rounds < 1 or args.events // args.rounds < USERS_A_ROUND:
        return f"need --rounds >= 1 and at least {USERS_A_ROUND} events a round"


if __name__ == "__main__":
    sys.exit(h.main("sdk", __doc__, OPTIONS, run, check))
