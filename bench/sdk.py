"""Python SDK throughput: events/s that one cs_sdk.Client pushes to the service, against
the same kind of events sent by a plain loop of batched POSTs.

    .venv/bin/python bench/sdk.py                   # 20,000 events a side in 10 rounds
    .venv/bin/python bench/sdk.py --events 5000     # a quick run

The service is started as bench/ingest.py starts it (its Environment: gunicorn
webapp.wsgi:app with 2 sync workers on 127.0.0.1, production mode, a fresh PostgreSQL
database and a unique Redis prefix), with one tenant on the "scale" plan and one ingest
key that both sides use. Each side gets its own users and events of the same shape
(bench/ingest.py's event mix and properties; each user's first event is $identify):

  SDK:   one Client (sdk/python, default max_batch_size 10 and flush_interval 1 s; the
         queue bound raised to the events of a round so that nothing is dropped) on which
         the timed section calls identify / set_locale / track for every event, then
         flush(): stamping, serialising and the background sender are all inside the time;
  loop:  the events already stamped (timestamp, idempotency key) before the timer starts;
         the timed section is `session.post(url, json={"events": ten})` per 10 events
         with one requests.Session.

The rounds alternate which side goes first, so that noise from other work on the machine
hits both. It prints each round, both throughputs and the ratio SDK / loop (goal >= 0.9;
also the median of the rounds' own ratios, less moved by a burst of load elsewhere),
and checks that the service stored every event of both sides exactly once. Everything it
made (gunicorn, the database, the Redis keys) is removed at the end, also on an error or
SIGTERM. Exit status: 0 when the measurement ran, 1 with --strict and a missed goal, 2
when setup, a request or a check failed."""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import requests

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(BENCH), str(ROOT), str(ROOT / "sdk" / "python")):
    if p not in sys.path:
        sys.path.insert(0, p)

import ingest  # noqa: E402  (bench/ingest.py: the service's environment and event mix)
from cs_sdk import Client  # noqa: E402

GOAL = 0.9
USERS_A_ROUND = 100
BATCH = 10


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
        raise ingest.BenchError("the SDK did not deliver its events within 120 s")
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
            raise ingest.BenchError(f"plain loop: HTTP {r.status_code} {r.text[:200]}")
    return time.perf_counter() - start


def stored_events(env: ingest.Environment, tenant_id: str) -> int:
    with psycopg.connect(env.conninfo("service"), connect_timeout=5) as conn:
        return conn.execute("SELECT count(*) FROM events WHERE tenant_id = %s", (tenant_id,)).fetchone()[0]


def measure(args, env: ingest.Environment) -> tuple[Side, Side, dict]:
    env.create_database("service")
    keys = env.create_tenants("service", keys_needed=2)
    env.start_server()
    env.wait_ready()
    base = f"http://{ingest.HOST}:{env.server.port}"
    key = keys.keys[1]  # an editor key with the ingest permission, for both sides
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    errors: list[str] = []
    client = Client(key, base, max_queue_size=max(args.events // args.rounds, 1000),
                    on_error=lambda dropped: errors.append(str(dropped)))
    try:
        return _rounds(args, env, keys, base, session, client, errors)
    finally:
        client.shutdown(timeout=1)


def _rounds(args, env, keys, base, session, client, errors) -> tuple[Side, Side, dict]:
    rng = random.Random(args.seed)
    per_round = args.events // args.rounds
    # warm-up: both paths once, on users of their own
    run_sdk(client, make_round(rng, "warm-sdk", 200))
    run_loop(session, base + "/api/track", stamped(make_round(rng, "warm-loop", 200)))

    sdk, loop = Side("SDK client"), Side("plain loop")
    for r in range(args.rounds):
        sdk_events = make_round(rng, f"sdk-{r}", per_round)
        loop_batches = stamped(make_round(rng, f"loop-{r}", per_round))
        order = [("sdk", sdk_events), ("loop", loop_batches)]
        for which, work in (order if r % 2 == 0 else order[::-1]):
            side = sdk if which == "sdk" else loop
            seconds = run_sdk(client, work) if which == "sdk" else run_loop(session, base + "/api/track", work)
            side.events += per_round
            side.seconds += seconds
            side.rounds.append(per_round / seconds)
        print(f"  round {r + 1:>2}: SDK {sdk.rounds[-1]:>7,.0f} ev/s   loop {loop.rounds[-1]:>7,.0f} ev/s",
              flush=True)
    client.shutdown(timeout=10)
    stats = client.stats()
    if errors:
        raise ingest.BenchError(f"the SDK reported: {errors[:3]}")
    expected = 2 * (200 + args.rounds * per_round)
    checks = {"stored": stored_events(env, keys.tenant_id), "expected": expected, "sdk_stats": stats}
    return sdk, loop, checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000, help="events a side (default 20,000)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds, the sides taking turns (default 10)")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--strict", action="store_true", help="exit 1 when the goal is missed")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.events // args.rounds < USERS_A_ROUND:
        ap.error(f"need --rounds >= 1 and at least {USERS_A_ROUND} events a round")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    env = ingest.Environment()
    status = 0
    try:
        print(f"sdk.py: {args.events:,} events a side in {args.rounds} rounds; gunicorn "
              f"{ingest.WORKERS} sync workers on {ingest.HOST}, PostgreSQL + Redis")
        sdk, loop, checks = measure(args, env)
        ratio = sdk.eps / loop.eps
        s = checks["sdk_stats"]
        print(f"  SDK client: {sdk.eps:>8,.0f} ev/s  ({sdk.events:,} events in {sdk.seconds:.2f} s; "
              f"{s.batches:,} requests, {s.retries} retries, "
              f"{s.dropped + s.rejected + s.abandoned} dropped)")
        print(f"  plain loop: {loop.eps:>8,.0f} ev/s  ({loop.events:,} events in {loop.seconds:.2f} s; "
              f"{loop.events // BATCH:,} requests)")
        paired = statistics.median(a / b for a, b in zip(sdk.rounds, loop.rounds))
        print(f"  ratio SDK / loop: {ratio:.2f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'NOT met'}); "
              f"median of the rounds' ratios {paired:.2f}")
        ok = checks["stored"] == checks["expected"] and s.duplicates == 0
        print(f"  check: {checks['stored']:,} events stored, {checks['expected']:,} sent "
              f"({'ok' if ok else 'FAILED'})")
        if not ok:
            status = 2
        elif args.strict and ratio < GOAL:
            status = 1
    except ingest.BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        status = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for problem in env.teardown():
            print(f"teardown: {problem}", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return status


if __name__ == "__main__":
    sys.exit(main())
