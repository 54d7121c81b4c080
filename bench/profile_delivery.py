"""Where the time of one webhook delivery attempt goes, in process against PostgreSQL.

    .venv/bin/python bench/profile_delivery.py [--attempts 400] [--top 25]

Same setup as bench/webhooks.py (fresh database, "growth" tenant, one endpoint on the
loopback receiver of bench/webhook_receiver.py, Redis under a unique prefix). One thread,
attempts one after the other, each on a delivery of its own. Prints
  1. the cost of an attempt - CPU ms (robust when the machine is busy) and wall ms, the
     best of 4 chunks - for cs_daemon.delivery.service.attempt as it is and for variants
     written here (production code is not touched), each a candidate change:
       - the engine without pool_pre_ping (one round trip less per session);
       - plus the claim UPDATE with synchronize_session=False (the session is empty: the
         ORM evaluates the WHERE clause against nothing, at a cost);
       - "lean": claim and record as one Core statement each in autocommit (1 round trip
         each: UPDATE ... RETURNING; WITH INSERT attempt ... UPDATE delivery WHERE the
         lease is still ours), the same send in between;
     and the floors: the send alone (decrypt, sign, http.post) and a requests.Session
     sign + POST;
  2. a cProfile of service.attempt: cumulative and own ms per attempt (cProfile inflates
     the times; read them as shares).
"""

from __future__ import annotations

import hashlib
import hmac
import sys
import uuid

import requests
from sqlalchemy import create_engine, func, or_, select, text, update

import harness as h
import webhooks as wb

CLAIM = """
UPDATE deliveries SET locked_until = :lease
WHERE id = :id AND status IN ('pending', 'retrying') AND next_attempt_at <= :now
  AND (locked_until IS NULL OR locked_until <= :now){held}
RETURNING id, tenant_id, kind, url, body, headers, secret_enc, subject_id, attempts"""
HELD = "\n  AND tenant_id NOT IN (SELECT id FROM tenants WHERE kill_switch_active)"

RECORD_OK = text("""
WITH attempt AS (
  INSERT INTO delivery_attempts (id, tenant_id, delivery_id, number, at, status_code, latency_ms, error,
                                 response_excerpt)
  SELECT :aid, tenant_id, id, :number, :at, :code, :latency, NULL, :excerpt FROM deliveries
  WHERE id = :id AND locked_until = :lease)
UPDATE deliveries SET attempts = :number, locked_until = NULL, updated_at = :now, status = 'delivered',
       delivered_at = :now, next_attempt_at = NULL
WHERE id = :id AND locked_until = :lease""")

OPTIONS = """
--attempts 400   attempts per variant
--top 25         functions listed by the profile
"""


def make_deliveries(env, n: int) -> list[str]:
    from cs_daemon.delivery.models import Delivery
    from cs_daemon.outbox import service as outbox

    with env.rt.session(env.tenant_id) as s:
        ids = outbox.record_many(s, env.tenant_id, [(wb.EVENT, wb.payload(i)) for i in range(n)], now=env.rt.now())
    with env.rt.session(env.tenant_id) as s:
        return list(s.scalars(select(Delivery.id).where(Delivery.subject_id.in_(ids))))


def run(bench: h.Bench, args) -> int:
    from cs_daemon import db
    from cs_daemon.delivery import service
    from cs_daemon.delivery.models import Delivery

    env = wb.setup(bench)
    rt, n = env.rt, args.attempts
    for i in make_deliveries(env, 50):
        service.attempt(rt, i)
    measure = h.cost

    print("\n  cpu ms  wall ms  one attempt (best of 4 chunks, one thread)")
    results = {}
    results["as is"] = measure("service.attempt as it is (pool_pre_ping, ORM claim + record)",
                               lambda i: service.attempt(rt, i), make_deliveries(env, n))

    # the engine without pre-ping: the same code, one round trip less per session
    url = rt.settings.db_url
    with db._lock:
        original = db._engines[url]
        db._engines[url] = create_engine(url, pool_size=5, max_overflow=10, pool_timeout=5,
                                         connect_args={"connect_timeout": 3})
    results["no ping"] = measure("  without pool_pre_ping", lambda i: service.attempt(rt, i),
                                 make_deliveries(env, n))

    # the claim's conditions as service.claim has them (the kill switch where it exists)
    held = [Delivery.tenant_id.notin_(service._held())] if hasattr(service, "_held") else []
    claim_sql = text(CLAIM.format(held=HELD if held else ""))

    def claim_nosync(session, delivery_id, now):
        row = session.execute(
            update(Delivery)
            .where(Delivery.id == delivery_id, Delivery.status.in_(service.OPEN), Delivery.next_attempt_at <= now,
                   or_(Delivery.locked_until.is_(None), Delivery.locked_until <= now), *held)
            .values(locked_until=now + service.LEASE)
            .returning(Delivery.id, Delivery.tenant_id, Delivery.kind, Delivery.url, Delivery.body,
                       Delivery.headers, Delivery.secret_enc, Delivery.subject_id, Delivery.attempts)
            .execution_options(synchronize_session=False)
        ).first()
        if row is None:
            return None
        return service.Claimed(*row[:8], row.attempts + 1, now + service.LEASE)

    def attempt_nosync(i):
        started = rt.now()
        with rt.session() as session:
            claimed = claim_nosync(session, i, started)
        outcome = service.send(rt, claimed, started)
        with rt.session() as session:
            service.record(session, claimed, outcome, at=started, now=rt.now())

    results["nosync"] = measure("  + claim with synchronize_session=False", attempt_nosync,
                                make_deliveries(env, n))

    lean_engine = db._engines[url].execution_options(isolation_level="AUTOCOMMIT")

    def attempt_lean(i):
        started = rt.now()
        lease = started + service.LEASE
        with lean_engine.connect() as conn:
            row = conn.execute(claim_sql, {"id": i, "now": started, "lease": lease}).first()
            if row is None:
                return
            claimed = service.Claimed(*row[:8], row.attempts + 1, lease)
            outcome = service.send(rt, claimed, started)
            assert outcome.ok, outcome
            conn.execute(RECORD_OK, {"id": i, "lease": lease, "aid": str(uuid.uuid4()),
                                     "number": claimed.number, "at": started, "code": outcome.status_code,
                                     "latency": outcome.latency_ms, "excerpt": outcome.excerpt, "now": rt.now()})

    lean_ids = make_deliveries(env, n)
    results["lean"] = measure("  lean: 2 Core statements in autocommit (fenced record, 2xx path)",
                              attempt_lean, lean_ids)
    with rt.session() as s:
        done = s.scalar(select(func.count()).select_from(Delivery).where(Delivery.id.in_(lean_ids),
                                                                             Delivery.status == "delivered"))
    assert done == len(lean_ids) // 4 * 4, done

    with db._lock:
        db._engines[url].dispose()
        db._engines[url] = original

    with rt.session() as s:
        claimed = service.Claimed(*s.execute(select(
            Delivery.id, Delivery.tenant_id, Delivery.kind, Delivery.url, Delivery.body, Delivery.headers,
            Delivery.secret_enc, Delivery.subject_id)).first(), 1, rt.now() + service.LEASE)
    results["send"] = measure("send alone (decrypt, sign, http.post: new connection + watchdog timer)",
                              lambda i: service.send(rt, claimed, rt.now()), list(range(n)))
    session = requests.Session()
    secret = env.endpoint_secret.encode()
    body = claimed.body.encode()

    def plain(_):
        sig = hmac.new(secret, body, hashlib.sha256).hexdigest()
        session.post(claimed.url, data=body, headers={"X-Service-Signature": sig,
                                                      "Content-Type": "application/json"}, timeout=10)

    results["requests"] = measure("requests.Session sign + POST (the baseline's request)", plain, list(range(n)))

    print("\n  CPU saved a delivery against 'as is': " + ", ".join(
        f"{k} {results['as is'] - v:+.2f} ms" for k, v in results.items() if k != "as is"))

    h.profile("service.attempt", lambda i: service.attempt(rt, i), make_deliveries(env, n), args.top)
    return 0


if __name__ == "__main__":
    sys.exit(h.main("delivery", __doc__, OPTIONS, run))
