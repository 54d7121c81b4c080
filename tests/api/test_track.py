"""POST /api/track (docs/scoring.md; docs/api.md, "Plans")."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select

from cs_daemon.customers.models import Customer, Event
from cs_daemon.outbox.models import OutboxEvent
from tests.conftest import auth


def _events(rt, tenant_id):
    with rt.session(tenant_id) as s:
        return list(s.scalars(select(Event).order_by(Event.timestamp)))


def test_track_stores_events_and_creates_users(client, tenant, rt):
    resp = client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "u1", "event": "signed_up", "timestamp": "2026-11-01T10:00:00Z", "idempotency_key": "k1"},
        {"user_id": "u1", "event": "Created_Project", "properties": {"n": 1}},
        {"user_id": "u2", "event": "signed_up"},
    ]})
    assert resp.status_code == 200
    assert resp.json == {"accepted": 3, "duplicates": 0, "over_limit": 0}
    events = _events(rt, tenant.id)
    assert {e.event for e in events} == {"signed_up", "Created_Project"}  # kept exactly as sent
    assert all(e.source == "api" and e.test is False for e in events)
    first = [e for e in events if e.idempotency_key == "k1"][0]
    assert first.timestamp.isoformat().startswith("2026-11-01T10:00:00")
    with rt.session(tenant.id) as s:
        assert set(s.scalars(select(Customer.id))) == {"u1", "u2"}


def test_duplicates_are_dropped_and_counted(client, tenant, rt):
    h = auth(tenant.key)
    batch = {"events": [{"user_id": "u1", "event": "a", "idempotency_key": "k1"},
                        {"user_id": "u1", "event": "a", "idempotency_key": "k1"},
                        {"user_id": "u1", "event": "b", "idempotency_key": "k2"}]}
    assert client.post("/api/track", headers=h, json=batch).json == {"accepted": 2, "duplicates": 1, "over_limit": 0}
    assert client.post("/api/track", headers=h, json=batch).json == {"accepted": 0, "duplicates": 3, "over_limit": 0}
    assert len(_events(rt, tenant.id)) == 2


def test_idempotency_is_per_tenant(client, tenant, make_tenant, rt):
    other = make_tenant("Globex")
    ev = {"events": [{"user_id": "u1", "event": "a", "idempotency_key": "same"}]}
    assert client.post("/api/track", headers=auth(tenant.key), json=ev).json["accepted"] == 1
    assert client.post("/api/track", headers=auth(other.key), json=ev).json["accepted"] == 1


def test_a_duplicate_in_two_concurrent_requests_is_stored_once(app, tenant, rt):
    barrier = threading.Barrier(2)
    results = []

    def send():
        client = app.test_client()
        barrier.wait()
        resp = client.post("/api/track", headers=auth(tenant.key), json={"events": [
            {"user_id": "racer", "event": "clicked", "idempotency_key": "race-1"},
            {"user_id": "racer", "event": "clicked", "idempotency_key": "race-2"}]})
        results.append(resp.json)

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["accepted"] for r in results) == [0, 2]
    assert sum(r["duplicates"] for r in results) == 2
    assert len(_events(rt, tenant.id)) == 2
    with rt.session(tenant.id) as s:
        assert s.get(Customer, (tenant.id, "racer")).state["event_count"] == 2


@pytest.mark.parametrize("payload, field", [
    ({"events": []}, "events"),
    ({"events": [{"user_id": "u", "event": "e"}] * 101}, "events"),
    ({"events": [{"user_id": "u", "event": "ok"}, {"user_id": "u", "event": ""}]}, "events[1].event"),
    ({"events": [{"user_id": "", "event": "x"}]}, "events[0].user_id"),
    ({"events": [{"event": "x"}]}, "events[0].user_id"),
    ({"events": [{"user_id": "u", "event": "x", "timestamp": "yesterday"}]}, "events[0].timestamp"),
    ({"events": [{"user_id": "u", "event": "x", "timestamp": "9999-12-31T23:59:59-17:00"}]}, "events[0].timestamp"),
    ({"events": [{"user_id": "u", "event": "x", "properties": [1]}]}, "events[0].properties"),
    ({}, "events"),
])
def test_bad_batches_are_refused_with_nothing_stored(client, tenant, rt, payload, field):
    resp = client.post("/api/track", headers=auth(tenant.key), json=payload)
    assert resp.status_code == 400
    assert resp.json["code"] == "validation_failed"
    assert field in [d["field"] for d in resp.json["details"]]
    assert _events(rt, tenant.id) == []
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(Customer)) == 0


def test_a_tenant_without_a_limit_counts_the_users_it_tracks(client, tenant, rt):
    from cs_daemon.tenants.models import Tenant

    with rt.session() as s:
        s.get(Tenant, tenant.id).tracked_user_limit = None
    h = auth(tenant.key)

    def tracked():
        with rt.session() as s:
            return s.get(Tenant, tenant.id).tracked_users

    first = {"events": [{"user_id": "a", "event": "x", "idempotency_key": "k1"},
                        {"user_id": "b", "event": "x", "idempotency_key": "k2"}]}
    assert client.post("/api/track", headers=h, json=first).json["accepted"] == 2
    assert tracked() == 2
    assert client.post("/api/track", headers=h, json={"events": [
        {"user_id": "a", "event": "y"}, {"user_id": "c", "event": "x"}]}).json["accepted"] == 2
    assert tracked() == 3
    assert client.post("/api/track", headers=h, json={"events": [{"user_id": "a", "event": "z"}]}).status_code == 200
    assert client.post("/api/track", headers=h, json=first).json["duplicates"] == 2
    assert tracked() == 3


@pytest.mark.parametrize("limited", [True, False])
def test_an_event_dropped_as_a_duplicate_creates_no_user(client, tenant, rt, limited):
    """A user is made by its first stored event: a duplicate key naming a new user makes
    none, and takes no seat, whether the tenant has a tracked-user limit or not."""
    from cs_daemon.tenants.models import Tenant

    if not limited:
        with rt.session() as s:
            s.get(Tenant, tenant.id).tracked_user_limit = None
    h = auth(tenant.key)
    assert client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u3", "event": "a", "idempotency_key": "k1"}]}).json["accepted"] == 1
    resp = client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u4", "event": "b", "idempotency_key": "k1"}, {"user_id": "u5", "event": "b"}]})
    assert resp.json == {"accepted": 1, "duplicates": 1, "over_limit": 0}
    assert client.get("/api/customers/u4", headers=h).status_code == 404
    assert client.get("/api/customers/stats", headers=h).json["stats"]["total"] == 2
    with rt.session() as s:
        assert s.get(Tenant, tenant.id).tracked_users == 2


@pytest.mark.parametrize("at", [12345, 1.5, "1793350800", "2026-11-27", True, "27/11/2026 10:00"])
def test_an_event_time_is_iso_8601_date_and_time_text(client, tenant, rt, at):
    h = auth(tenant.key)
    resp = client.post("/api/track", headers=h, json={"events": [{"user_id": "u", "event": "e", "timestamp": at}]})
    assert resp.status_code == 400 and resp.json["details"][0]["field"] == "events[0].timestamp", resp.json
    resp = client.post("/api/external/events", headers=h, json={"events": [
        {"type": "custom.crm.deal", "user_id": "u", "timestamp": at}]})
    assert resp.json["accepted"] == 0 and resp.json["errors"][0]["field"] == "timestamp", resp.json
    assert _events(rt, tenant.id) == []


@pytest.mark.parametrize("number, why", [
    ("NaN", "NaN is not a JSON value"), ("Infinity", "Infinity is not a JSON value"),
    ("-Infinity", "-Infinity is not a JSON value"),
    ("1e400", "1e400 is too large a number"), ("-2.5e999", "-2.5e999 is too large a number"),
])
def test_numbers_no_json_column_takes_are_refused_with_nothing_stored(client, tenant, rt, number, why):
    """Python's json module would read them (the last two as infinity); PostgreSQL's json
    type and receivers would not (it was a 500)."""
    body = '{"events": [{"user_id": "u", "event": "x", "properties": {"ratio": %s}}]}' % number
    resp = client.post("/api/track", headers={**auth(tenant.key), "Content-Type": "application/json"}, data=body)
    assert resp.status_code == 400 and resp.json["code"] == "validation_failed"
    assert resp.json["details"] == [{"field": "body", "message": why}]
    assert _events(rt, tenant.id) == []


def test_large_but_finite_numbers_are_kept(client, tenant, rt):
    body = '{"events": [{"user_id": "u", "event": "x", "properties": {"big": 1.5e300, "n": %s}}]}' % ("9" * 400)
    resp = client.post("/api/track", headers={**auth(tenant.key), "Content-Type": "application/json"}, data=body)
    assert resp.status_code == 200 and resp.json["accepted"] == 1
    [event] = _events(rt, tenant.id)
    assert event.properties == {"big": 1.5e300, "n": int("9" * 400)}


def test_test_key_events_are_marked_test(client, tenant, rt):
    key = tenant.issue("editor", ["ingest"], test=True)
    resp = client.post("/api/track", headers=auth(key), json={"events": [{"user_id": "t1", "event": "x"}]})
    assert resp.status_code == 200
    [event] = _events(rt, tenant.id)
    assert event.test is True
    with rt.session(tenant.id) as s:
        assert s.get(Customer, (tenant.id, "t1")).test is True


def test_identify_and_locale_fill_the_customer(client, tenant):
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {
            "name": "Ada", "email": "ada@example.com", "company": "Analytical", "role": "CTO",
            "team_size": 12, "plan": "pro", "seats": "5"}},
        {"user_id": "u1", "event": "$locale", "properties": {"locale": "de-DE"}},
    ]})
    c = client.get("/api/customers/u1", headers=h).json["customer"]
    assert (c["name"], c["email"], c["company"], c["role"], c["team_size"], c["locale"]) == (
        "Ada", "ada@example.com", "Analytical", "CTO", 12, "de-DE")
    assert c["traits"] == {"plan": "pro", "seats": "5"}


def test_identity_traits_that_are_not_values_of_their_field_stay_traits(client, tenant):
    """An email that is no address, an object or a list for a name, a boolean team size:
    the customer's fields keep what they had (or null), the values are kept as traits;
    a later good value takes the field and leaves the traits."""
    h = auth(tenant.key)
    bad = {"email": "bad", "name": {"x": 1}, "company": ["a"], "role": True, "team_size": True}
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "$identify", "properties": bad}]})
    resp = client.post("/api/customers", headers=h, json={"user_id": "u2", "properties": {**bad, "name": 7}})
    assert resp.status_code == 201 and resp.json["user"]["email"] is None and resp.json["user"]["name"] == "7"
    c = client.get("/api/customers/u1", headers=h).json["customer"]
    assert (c["email"], c["company"], c["role"], c["team_size"]) == (None, None, None, None) and c["name"] == "u1"
    assert c["traits"] == bad
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "$identify", "properties": {
        "email": "ada@example.com", "name": "Ada"}}]})
    c = client.get("/api/customers/u1", headers=h).json["customer"]
    assert (c["email"], c["name"]) == ("ada@example.com", "Ada")
    assert c["traits"] == {"company": ["a"], "role": True, "team_size": True}


def test_ingest_only_key_may_track_but_viewer_may_not(client, tenant):
    ingest = tenant.issue("editor", ["ingest"])
    viewer = tenant.issue("viewer", ["full"])
    body = {"events": [{"user_id": "u", "event": "e"}]}
    assert client.post("/api/track", headers=auth(ingest), json=body).status_code == 200
    assert client.post("/api/track", headers=auth(viewer), json=body).status_code == 403
    assert client.get("/api/customers", headers=auth(ingest)).status_code == 403


def _limit_tracked_users(rt, tenant, limit: int) -> None:
    from cs_daemon.tenants.models import Tenant

    with rt.session() as s:
        s.get(Tenant, tenant.id).tracked_user_limit = limit


def test_events_of_new_users_past_the_tracked_user_limit_are_not_stored(client, tenant, rt):
    from cs_daemon.tenants.models import Tenant

    _limit_tracked_users(rt, tenant, 2)
    h = auth(tenant.key)
    resp = client.post("/api/track", headers=h, json={"events": [
        {"user_id": "a", "event": "x"}, {"user_id": "b", "event": "x"},
        {"user_id": "c", "event": "x"}, {"user_id": "c", "event": "y"}]})
    assert resp.json == {"accepted": 2, "duplicates": 0, "over_limit": 2}
    # known users keep being tracked; new ones stay out
    resp = client.post("/api/track", headers=h, json={"events": [
        {"user_id": "a", "event": "z"}, {"user_id": "d", "event": "x"}]})
    assert resp.json == {"accepted": 1, "duplicates": 0, "over_limit": 1}
    with rt.session(tenant.id) as s:
        assert set(s.scalars(select(Customer.id))) == {"a", "b"}
        assert s.get(Tenant, tenant.id).tracked_users == 2


def test_custom_events_of_new_users_past_the_limit_are_neither_stored_nor_broadcast(client, tenant, rt):
    from cs_daemon.tenants.models import Tenant

    _limit_tracked_users(rt, tenant, 1)
    h = auth(tenant.key)
    resp = client.post("/api/external/events", headers=h, json={"events": [
        {"type": "custom.shop.bought", "user_id": "a"}, {"type": "custom.shop.bought", "user_id": "b"},
        {"type": "custom.shop.bought", "user_id": "a"}, {"type": "nope", "user_id": "a"}]})
    assert resp.json == {"accepted": 2, "rejected": 1, "errors": resp.json["errors"], "over_limit": 1}
    resp = client.post("/api/external/events/emit", headers=h, json={"type": "custom.shop.bought", "user_id": "c"})
    assert resp.json == {"accepted": 0, "over_limit": 1}
    assert client.post("/api/external/events/emit", headers=h,
                       json={"type": "custom.shop.bought", "user_id": "a"}).json == {"accepted": 1}
    with rt.session(tenant.id) as s:
        assert set(s.scalars(select(Customer.id))) == {"a"}
        assert s.get(Tenant, tenant.id).tracked_users == 1
        assert {r.payload["user_id"] for r in s.scalars(select(OutboxEvent))} == {"a"}
        assert s.scalar(select(OutboxEvent.id).where(OutboxEvent.event_type == "custom.shop.bought")) is not None
    assert [e.user_id for e in _events(rt, tenant.id)] == ["a"] * 3


def test_stage_and_risk_changes_go_to_the_outbox(client, tenant, rt, clock):
    h = auth(tenant.key)
    client.patch("/api/settings", headers=h, json={"config": {"milestones": ["created_project"]}})
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "signed_up"}]})
    assert client.get("/api/customers/u1", headers=h).json["customer"]["lifecycle_stage"] == "new"
    clock.advance(days=2)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "created_project"}]})
    assert client.get("/api/customers/u1", headers=h).json["customer"]["lifecycle_stage"] == "activated"
    with rt.session(tenant.id) as s:
        rows = list(s.scalars(select(OutboxEvent).order_by(OutboxEvent.event_type)))
    kinds = [r.event_type for r in rows]
    assert "user.stage_changed" in kinds and "user.lifecycle_changed" in kinds
    stage = [r for r in rows if r.event_type == "user.stage_changed"][0].payload
    assert stage == {"event": "user.stage_changed", "user_id": "u1", "previous_stage": "new",
                     "new_stage": "activated", "changed_at": clock.now().isoformat()}
    lifecycle = [r for r in rows if r.event_type == "user.lifecycle_changed"][0].payload
    assert set(lifecycle) == {"event", "user_id", "previous_stage", "new_stage", "changed_at"}


def test_event_timestamps_in_the_past_are_kept(client, tenant, rt, clock):
    past = (clock.now() - timedelta(days=3)).isoformat()
    client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "u1", "event": "x", "timestamp": past}]})
    [event] = _events(rt, tenant.id)
    assert event.timestamp == clock.now() - timedelta(days=3)
    assert event.received_at == clock.now()


@pytest.mark.parametrize("backend", ["postgres"])   # a PostgreSQL plan
def test_rescored_users_are_written_through_the_primary_key(rt, tenant, backend):
    """The UPDATE joins json_to_recordset, which PostgreSQL estimates at 100 rows: joined
    on the id alone it hashed a scan of all the tenant's customers for every batch."""
    from cs_daemon.customers import bulk

    with rt.session(tenant.id) as s:
        bulk.create(s, tenant.id, [f"user-{i:05d}" for i in range(3000)], test=False, now=rt.now())
    with rt.session(tenant.id) as s:
        cur = bulk._cursor(s)
        cur.execute("ANALYZE customers")
        rows = [bulk.CustomerRow(id=f"user-{i:05d}", updated_at=rt.now()) for i in (7, 1500, 2999)]
        cur.execute("EXPLAIN " + bulk.PG_WRITE, bulk.write_params(tenant.id, rows, test=False))
        plan = "\n".join(line for (line,) in cur.fetchall())
        s.rollback()
    assert "customers_pkey" in plan and "Seq Scan on customers" not in plan, plan


@pytest.mark.parametrize("backend", ["postgres"])
def test_the_write_finds_its_rows_by_the_key_without_statistics(rt, tenant, backend):
    """Before the table's first ANALYZE (a new tenant's first burst, bench/ingest.py's
    passes), the planner has no statistics; the write takes each row through the
    primary key's conflict check instead of a plan that scanned the tenant's customers."""
    import re

    from cs_daemon.customers import bulk

    with rt.session(tenant.id) as s:
        bulk.create(s, tenant.id, [f"user-{i:05d}" for i in range(3000)], test=False, now=rt.now())
    with rt.session(tenant.id) as s:
        cur = bulk._cursor(s)
        rows = [bulk.CustomerRow(id=f"user-{i:05d}", updated_at=rt.now()) for i in (7, 1500, 2999)]
        cur.execute("EXPLAIN " + bulk.PG_WRITE, bulk.write_params(tenant.id, rows, test=False))
        plan = "\n".join(line for (line,) in cur.fetchall())
        s.rollback()
    assert "Conflict Arbiter Indexes: customers_pkey" in plan, plan
    assert not re.search(r"Scan\b.* on customers\b", plan), plan


def _customer_scans(plan: dict) -> list[dict]:
    found = [plan] if plan.get("Relation Name") == "customers" and "Scan" in plan["Node Type"] else []
    return found + [scan for child in plan.get("Plans", []) for scan in _customer_scans(child)]


@pytest.mark.parametrize("backend", ["postgres"])   # a PostgreSQL plan
@pytest.mark.parametrize("statistics", ["none", "stale", "fresh"])
def test_a_batch_reads_its_users_one_by_one_through_the_key(rt, tenant, make_tenant, backend, statistics):
    """Each scan of customers, in the batch's statement, in the lock of users created
    meanwhile and in the check of which users exist (a tenant with a tracked-user limit),
    is a probe finding one row a user:
    - none: before the table's first ANALYZE the planner took the tenant's customers as
      a handful and joined all of them to the batch's users (3,000 rows a batch). It may
      still probe through another index led by tenant_id (a cost tie the planner breaks
      its own way; autovacuum's first ANALYZE of a table comes after 50 rows and a tenth);
    - stale: taken before the tenant had users (a new tenant on a large table, until the
      next ANALYZE), statistics gave the tenant no rows, so any index led by tenant_id
      looked as good as the key: ix_customers_created was taken, and read every entry of
      the tenant for each user. Now through the primary key, as with
    - fresh statistics, taken after."""
    import json

    from cs_daemon.customers import bulk

    _unlimited(rt, tenant.id)
    other = make_tenant("Other")
    with rt.session(other.id) as s:
        bulk.create(s, other.id, [f"other-{i:05d}" for i in range(2000)], test=False, now=rt.now())
    if statistics == "stale":
        _analyze(rt, "customers")
    with rt.session(tenant.id) as s:
        bulk.create(s, tenant.id, [f"user-{i:05d}" for i in range(3000)], test=False, now=rt.now())
    if statistics == "fresh":
        _analyze(rt, "customers")
    rows = [{"id": f"event-{i}", "user_id": f"user-{i:05d}", "event": "clicked", "properties": {}, "ts": rt.now(),
             "key": f"k{i}"} for i in (7, 1500, 2999)]
    ids = {"tenant": tenant.id, "ids": [r["user_id"] for r in rows]}
    with rt.session(tenant.id) as s:
        cur = bulk._cursor(s)
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + bulk.PG_STORE, {
            "tenant": tenant.id, "now": rt.now(), "source": "api", "test": False, "create": True,
            "rows": bulk._json(rows)})
        plans = [cur.fetchone()[0]]
        for sql in (bulk.PG_LOCK, bulk.PG_KNOWN):
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, ids)
            plans.append(cur.fetchone()[0])
        s.rollback()
    for plan in plans:
        plan = plan if isinstance(plan, list) else json.loads(plan)
        scans = _customer_scans(plan[0]["Plan"])
        assert scans and all(scan["Actual Rows"] <= 1 for scan in scans), json.dumps(plan, indent=1)
        assert statistics == "none" or all(scan.get("Index Name") == "customers_pkey" for scan in scans), \
            json.dumps(plan)


def _analyze(rt, table: str) -> None:
    from sqlalchemy import text

    with rt.session() as s:
        s.execute(text(f"ANALYZE {table}"))


@pytest.mark.parametrize("backend", ["postgres"])   # row locks
def test_the_tenant_row_is_locked_only_by_the_batchs_write(rt, tenant, backend):
    """The first statement creates the batch's new users but leaves the tenant's count
    to the write: racing batches of the tenant do not queue on its row meanwhile."""
    from sqlalchemy import text

    from cs_daemon.customers import bulk
    from cs_daemon.tenants.models import Tenant

    _unlimited(rt, tenant.id)
    with rt.session() as s:
        before = s.get(Tenant, tenant.id).tracked_users
    lock = text("SELECT 1 FROM tenants WHERE id = :t FOR NO KEY UPDATE NOWAIT")
    with rt.session(tenant.id) as s:
        stored = bulk.store(s, tenant.id, [{"user_id": "fresh", "event": "x", "properties": {}, "timestamp": rt.now(),
                                            "idempotency_key": "fresh-1"}],
                            source="api", test=False, now=rt.now(), create=True)
        assert stored.created == 1 and [c.new for c in stored.customers] == [True]
        with rt.session() as other:   # not waiting for the batch: the row is free
            assert other.execute(lock, {"t": tenant.id}).scalar() == 1
            other.rollback()
        stored.customers[0].updated_at = rt.now()   # as a re-score sets it (ingest.update_customers)
        bulk.write(s, tenant.id, stored.customers, test=False)
    with rt.session() as s:
        assert s.get(Tenant, tenant.id).tracked_users == before + 1


def _unlimited(rt, tenant_id):
    from cs_daemon.tenants.models import Tenant

    with rt.session() as s:
        s.get(Tenant, tenant_id).tracked_user_limit = None


@pytest.mark.parametrize("backend", ["postgres"])   # the statements of bulk.py
def test_a_batch_is_two_statements_and_its_replay_one(client, tenant, rt, clock, backend, monkeypatch):
    """docs/architecture.md, "From a tracked event to a delivered email": events, new
    users and the locked rows in one statement; the users' update, snapshots and outbox
    in another; a replay stops after the first."""
    import psycopg

    _unlimited(rt, tenant.id)
    h = auth(tenant.key)
    client.patch("/api/settings", headers=h, json={"config": {"milestones": ["created_project"]}})
    for _ in range(2):   # the key is remembered (auth/memo.py) once its tenant's tokens are made
        assert client.post("/api/track", headers=h, json={"events": [{"user_id": "old", "event": "x"}]}).status_code == 200
    executed: list[str] = []
    execute = psycopg.Cursor.execute

    def counting(cur, query, *args, **kwargs):   # ingest's: not the key's (auth/memo.py stamps its use)
        if "api_keys" not in str(query):
            executed.append(" ".join(str(query).split())[:60])
        return execute(cur, query, *args, **kwargs)

    clock.advance(days=2)
    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    batch = {"events": [{"user_id": u, "event": name, "idempotency_key": f"k-{u}"}
                        for u, name in (("old", "created_project"), ("new-1", "signed_up"), ("new-2", "signed_up"))]}
    assert client.post("/api/track", headers=h, json=batch).json["accepted"] == 3
    assert len(executed) == 2, executed
    executed.clear()
    assert client.post("/api/track", headers=h, json=batch).json["duplicates"] == 3
    assert len(executed) == 1, executed
    monkeypatch.undo()
    with rt.session(tenant.id) as s:
        users = {c.id: c for c in s.scalars(select(Customer))}
        changes = [(r.event_type, r.payload["user_id"]) for r in s.scalars(select(OutboxEvent))]
    assert {u: c.state["event_count"] for u, c in users.items()} == {"old": 3, "new-1": 1, "new-2": 1}
    assert all(c.scored_at is not None for c in users.values())
    assert users["old"].lifecycle_stage == "activated" and ("user.stage_changed", "old") in changes


@pytest.mark.parametrize("backend", ["postgres"])   # the statements of bulk.py
def test_a_batch_writes_score_snapshots_only_for_users_last_scored_on_an_earlier_day(client, tenant, rt, clock,
                                                                                    backend, monkeypatch):
    """docs/console.md, "Health over time": users scored today already are the customer
    row; the batch's write statement stores a snapshot only for a day that is over."""
    import psycopg

    from cs_daemon.customers.snapshots import ScoreSnapshot

    _unlimited(rt, tenant.id)
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": u, "event": "x"} for u in ("a", "b")]})
    executed: list[str] = []
    execute = psycopg.Cursor.execute

    def capturing(cur, query, *args, **kwargs):
        if "api_keys" not in str(query):
            executed.append(str(query))
        return execute(cur, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", capturing)
    client.post("/api/track", headers=h, json={"events": [{"user_id": u, "event": "y"} for u in ("a", "b")]})
    assert len(executed) == 2 and not any("score_snapshots" in q for q in executed), executed
    executed.clear()
    clock.advance(days=1)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "a", "event": "y"}]})
    assert len(executed) == 2 and "score_snapshots" in executed[1], executed
    monkeypatch.undo()
    with rt.session(tenant.id) as s:
        assert [(r.user_id, r.day) for r in s.scalars(select(ScoreSnapshot))] == [
            ("a", (rt.now() - timedelta(days=1)).date())]


@pytest.mark.parametrize("backend", ["postgres"])   # row locks
def test_a_user_created_by_a_racing_batch_meanwhile_is_locked_and_scored(app, tenant, rt, backend):
    """The batch's statement waits for the racing insert of its user, then sees the row
    neither as one it created nor in its snapshot: it locks and scores it all the same."""
    from sqlalchemy import text

    from cs_daemon.customers import bulk

    _unlimited(rt, tenant.id)
    results = []

    def send():
        results.append(app.test_client().post("/api/track", headers=auth(tenant.key), json={"events": [
            {"user_id": "racer", "event": "clicked", "idempotency_key": "r-1"}]}).json)

    thread = threading.Thread(target=send)
    with rt.session(tenant.id) as racing:
        bulk.create(racing, tenant.id, ["racer"], test=False, now=rt.now())
        thread.start()
        for _ in range(1000):   # until the batch waits for the racing insert's lock
            with rt.session() as s:
                if s.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                 "AND datname = current_database()")):
                    break
            thread.join(0.01)
        else:
            pytest.fail("the batch never waited for the racing insert")
    thread.join()
    assert results[0]["accepted"] == 1
    with rt.session(tenant.id) as s:
        racer = s.get(Customer, (tenant.id, "racer"))
        assert racer.state["event_count"] == 1 and racer.scored_at is not None


@pytest.mark.parametrize("sent", ["2026-06-13T11:16:11.600000-17:23", "2026-06-13T11:16:11.600000+23:59"])
def test_an_offset_postgresql_cannot_read_is_stored_as_its_utc_time(client, tenant, rt, sent):
    resp = client.post("/api/track", headers=auth(tenant.key), json={"events": [
        {"user_id": "u1", "event": "x", "timestamp": sent}]})
    assert resp.status_code == 200, resp.json
    [event] = _events(rt, tenant.id)
    at = event.timestamp if event.timestamp.tzinfo else event.timestamp.replace(tzinfo=timezone.utc)
    assert at == datetime.fromisoformat(sent)


@pytest.mark.parametrize("backend", ["postgres"])   # row locks
def test_batches_racing_for_new_and_existing_users_never_deadlock(app, tenant, rt, backend):
    """Batch B creates u2, then finds u7 and u8 created meanwhile by racing batches (C, D);
    batch A, started once u7 existed, holds u7 and waits for B's u2. B must not then wait
    for u7: every batch takes its users in one id order, created or existing (bulk.py,
    `store`). Before, B locked u7 after creating u2 and PostgreSQL broke the deadlock by
    failing one of them (a 500)."""
    from sqlalchemy import text

    from cs_daemon.customers import bulk

    _unlimited(rt, tenant.id)
    results = {}

    def send(name, users):
        results[name] = app.test_client().post("/api/track", headers=auth(tenant.key), json={"events": [
            {"user_id": u, "event": "clicked", "idempotency_key": f"{name}-{u}"} for u in users]})

    def blocked_by(pid) -> bool:
        with rt.session() as s:
            return bool(s.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"),
                                 {"pid": pid}))

    def wait_until(done, thread):
        for _ in range(1000):
            if done():
                return
            thread.join(0.01)
        pytest.fail("the batches never reached the expected waits")

    send("old", ["u1"])   # an old user, so that A locks one before it creates; and the key's use noted
    c, d = rt.session(tenant.id), rt.session(tenant.id)
    with c as racing_c, d as racing_d:
        bulk.create(racing_c, tenant.id, ["u7"], test=False, now=rt.now())
        bulk.create(racing_d, tenant.id, ["u8"], test=False, now=rt.now())
        pid_c, pid_d = (s.scalar(text("SELECT pg_backend_pid()")) for s in (racing_c, racing_d))
        b = threading.Thread(target=send, args=("b", ["u2", "u7", "u8"]))
        b.start()
        wait_until(lambda: blocked_by(pid_c), b)          # B created u2, waits for C's u7
        racing_c.commit()
        wait_until(lambda: blocked_by(pid_d), b)          # B waits for D's u8
        a = threading.Thread(target=send, args=("a", ["u1", "u2", "u7"]))
        a.start()

        def a_waits():
            with rt.session() as s:
                return s.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                     "AND datname = current_database()")) >= 2
        wait_until(a_waits, a)                            # A waits for B's u2
        racing_d.commit()
    a.join(), b.join()
    assert {name: r.status_code for name, r in results.items()} == {"old": 200, "a": 200, "b": 200}, \
        {name: r.json for name, r in results.items()}
    with rt.session(tenant.id) as s:
        counts = {c.id: c.state["event_count"] for c in s.scalars(select(Customer)) if c.state}
    assert counts == {"u1": 2, "u2": 2, "u7": 2, "u8": 1}


def test_of_two_events_at_one_time_the_one_sent_later_applies_last(client, tenant):
    """The SDKs stamp milliseconds: identify then set_locale in one millisecond kept either
    locale, as events were applied in idempotency-key order."""
    h = auth(tenant.key)
    at = "2026-11-02T09:30:00.000Z"
    for n, keys in enumerate((("b", "a"), ("a", "b"))):
        resp = client.post("/api/track", headers=h, json={"events": [
            {"user_id": f"u{n}", "event": "$identify", "properties": {"locale": "de-DE"}, "timestamp": at,
             "idempotency_key": f"{n}-{keys[0]}"},
            {"user_id": f"u{n}", "event": "$identify", "properties": {"locale": "pt-PT"}, "timestamp": at,
             "idempotency_key": f"{n}-{keys[1]}"}]})
        assert resp.json["accepted"] == 2
        assert client.get(f"/api/customers/u{n}", headers=h).json["customer"]["locale"] == "pt-PT", keys
