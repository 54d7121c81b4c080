"""Where the time of GET /api/settings goes, in process (no gunicorn, no HTTP socket).

    .venv/bin/python bench/profile_settings.py [--top 30] [--requests 2000]

Same setup as bench/api_overhead.py (fresh PostgreSQL database, "scale" tenant, Redis under
a unique prefix). Prints
  1. the cost of one request through Flask's test client - ours, the bare app of
     bench/bare_app.py and an empty Flask route - as CPU time (robust when the machine
     is busy) and wall time, each the best of several repetitions;
  2. the database and Redis round trips of one request of ours;
  3. the cost of each piece of the request, measured on its own the same way;
  4. a cProfile of ours: cumulative and own time in ms a request (cProfile roughly
     doubles the times; read them as shares).
"""

from __future__ import annotations

import os
import sys
import time

import harness as h
from cs_daemon.uow import uow_of

OPTIONS = """
--requests 2000   requests under cProfile
--top 30          functions listed by the profile
"""


def line(label: str, fn) -> float:
    """CPU ms of fn() (printed with the wall ms): the best of 7 runs of 300 calls."""
    return h.cost(label, lambda _: fn(), range(7 * 300), 7, warmup=20)


def run(bench: h.Bench, args) -> int:
    import psycopg
    from flask import Flask
    from sqlalchemy import event, select
    from sqlalchemy.orm import Session

    from cs_daemon import ratelimit
    from cs_daemon.auth import keys as keymat
    from cs_daemon.auth import service as auth
    from cs_daemon.auth.admission import admit
    from cs_daemon.auth.models import ApiKey
    from cs_daemon.db import get_engine
    from cs_daemon.team.models import Member
    from cs_daemon.tenants import service as tenants
    from cs_daemon.tenants.models import Tenant
    from cs_daemon.tenants.schemas import ApiKeyPublic, SettingsPublic, TenantPublic
    from webapp import create_app

    db = bench.database()
    tenant = bench.tenant(db)
    rt = tenant.rt
    engine = get_engine(rt.settings)
    client = create_app(runtime=rt).test_client()
    raw, tid = tenant.key, tenant.id
    hdr = {"Authorization": f"Bearer {raw}"}
    os.environ["BENCH_PG_CONNINFO"] = h.conninfo(db)
    import bare_app

    bare_client = bare_app.app.test_client()
    empty = Flask("empty")
    empty.add_url_rule("/e", "e", lambda: ("{}", 200, {"Content-Type": "application/json"}))
    empty_client = empty.test_client()

    def get(c, path, headers):
        def call():
            resp = c.get(path, headers=headers)
            if resp.status_code != 200:
                raise h.BenchError(f"{path}: HTTP {resp.status_code} {resp.get_data(as_text=True)[:200]}")
        return call

    print("1. one request through Flask's test client (best of 7 x 300)")
    print(f"  {'cpu ms':>7} {'wall ms':>7}")
    ours = line("GET /api/settings", get(client, "/api/settings", hdr))
    bare = line("GET /bare (Flask + one raw psycopg query)", get(bare_client, "/bare", {}))
    line("empty Flask route", get(empty_client, "/e", {}))
    print(f"  in-process CPU ratio ours / bare: {ours / bare:.1f}")

    # 2. round trips of one request
    trips: list[str] = []
    t_start: list[float] = []
    ev = [
        (engine, "begin", lambda conn: trips.append("PG     BEGIN (SQLAlchemy's; sent only outside autocommit)")),
        (engine, "commit", lambda conn: trips.append("PG     COMMIT")),
        (engine, "before_cursor_execute", lambda *a: t_start.append(time.perf_counter())),
        (engine, "after_cursor_execute", lambda conn, cur, stmt, *a: trips.append(
            f"PG     {(time.perf_counter() - t_start.pop()) * 1000:6.3f} ms  {' '.join(stmt.split())[:110]}")),
        (engine.pool, "checkout", lambda *a: trips.append(
            "PG     ';' pool_pre_ping on checkout" if engine.pool._pre_ping else "PG     (no pre-ping)")),
    ]
    for target, name, fn in ev:
        event.listen(target, name, fn)
    orig_later = rt.cache.later

    def later(ops):
        t0 = time.perf_counter()
        answers = orig_later(ops)

        def read():
            try:
                return answers()
            finally:
                names = " + ".join(op[0] for op in ops)
                trips.append(f"Redis  {(time.perf_counter() - t0) * 1000:6.3f} ms  pipeline {names} "
                             "(rate-limit count, key memo tokens)")
        return read

    rt.cache.later = later  # type: ignore[method-assign]
    for _ in range(3):     # the third request is the steady state: its key remembered
        trips.clear()
        client.get("/api/settings", headers=hdr)
    rt.cache.later = orig_later  # type: ignore[method-assign]
    for target, name, fn in ev:
        event.remove(target, name, fn)
    pg = sum(1 for t in trips if t.startswith("PG") and " ms " in t)
    print(f"\n2. round trips of one GET /api/settings: {pg} to PostgreSQL, "
          f"{sum(1 for t in trips if t.startswith('Redis'))} to Redis (the bare route: 1)")
    for t in trips:
        print(f"  {t}")

    # 3. the pieces
    from cs_daemon.db import _tenant_owned_models

    print(f"\n3. the pieces, each measured alone (best of 7 x 300); the tenant scope adds one "
          f"with_loader_criteria per tenant-owned model ({len(_tenant_owned_models())} now) to each statement")
    print(f"  {'cpu ms':>7} {'wall ms':>7}")

    def checkout():
        with Session(engine) as s:
            s.connection()
            s.commit()

    line("Session + pool checkout (with pre-ping) + close", checkout)
    pre = engine.pool._pre_ping
    engine.pool._pre_ping = False
    line("  same without pool_pre_ping", checkout)
    engine.pool._pre_ping = pre
    s = Session(engine, expire_on_commit=False)
    uow_of(s).tenant_id = None
    auth_stmt = (select(ApiKey, Tenant.plan_tier, Tenant.partner, Member.role, Member.removed_at)
                 .join(Tenant, Tenant.id == ApiKey.tenant_id)
                 .outerjoin(Member, Member.id == ApiKey.member_id)
                 .where(ApiKey.digest == keymat.digest(raw)))

    def expunged(fn):
        def call():
            fn()
            s.expunge_all()
        return call

    line("authenticate's SELECT (ORM; runs before the tenant scope is set)",
         expunged(lambda: s.execute(auth_stmt).first()))
    conn = s.connection()
    at, tt, mt = ApiKey.__table__, Tenant.__table__, Member.__table__
    core_auth = (select(at, tt.c.plan_tier, tt.c.partner, mt.c.role, mt.c.removed_at)
                 .select_from(at.join(tt, tt.c.id == at.c.tenant_id).outerjoin(mt, mt.c.id == at.c.member_id))
                 .where(at.c.digest == keymat.digest(raw)))
    line("  the same SELECT through Core (rows, no entities)", lambda: conn.execute(core_auth).first())
    uow_of(s).tenant_id = tid
    line("tenants.get -> session.get(Tenant), tenant scope on (as in the request)",
         expunged(lambda: s.get(Tenant, tid)))
    uow_of(s).tenant_id = None
    line("  the same without the tenant scope", expunged(lambda: s.get(Tenant, tid)))
    uow_of(s).tenant_id = tid
    line("auth.list_keys, tenant scope on (as in the request)", expunged(lambda: auth.list_keys(s)))
    uow_of(s).tenant_id = None
    line("  the same without the tenant scope", expunged(lambda: auth.list_keys(s)))
    keys_stmt = (select(at).where(at.c.revoked_at.is_(None), at.c.tenant_id == tid)
                 .order_by(at.c.created_at, at.c.id))
    line("  the same SELECT through Core, explicit tenant filter", lambda: conn.execute(keys_stmt).all())
    s.rollback()
    s.close()
    line("rate-limit count alone (Redis pipeline INCR + EXPIRE NX)",
         lambda: rt.cache.later([("incr", *ratelimit.counter("bench-probe", rt.now()))])())

    def admitted():
        with rt.session(atomic=False) as s3:
            admit(s3, raw, cache=rt.cache, memo=rt.key_memo, now=rt.now())

    line("admit, key remembered (session + count and tokens in one Redis trip + tenant attached)",
         admitted)
    with rt.session(tid) as s2:
        tenant = tenants.get(s2, tid, now=rt.now())
        keys = auth.list_keys(s2)
        line("SettingsPublic built and dumped to JSON", lambda: SettingsPublic(
            tenant=TenantPublic.model_validate(tenant), brand_context=None,
            api_keys=[ApiKeyPublic.of(k) for k in keys]).model_dump_json())
    pc = psycopg.connect(h.conninfo(db), autocommit=True)
    line("raw psycopg SELECT id, name FROM tenants LIMIT 1 (the bare route's query)",
         lambda: pc.execute("SELECT id, name FROM tenants LIMIT 1").fetchone())
    line("raw psycopg ';' (one PostgreSQL round trip)", lambda: pc.execute(";"))
    pc.close()

    # 4. cProfile
    h.profile("GET /api/settings", lambda _: client.get("/api/settings", headers=hdr), range(args.requests), args.top)
    return 0


if __name__ == "__main__":
    sys.exit(h.main("settings", __doc__, OPTIONS, run))
