"""Tenant isolation is a property of the session, not of each query (docs/api.md, "Safety")."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, func, select, update

from cs_daemon.auth.models import ApiKey
from cs_daemon.team.models import Member


def test_a_tenant_session_sees_only_its_rows(rt, make_tenant):
    a, b = make_tenant("A"), make_tenant("B")
    with rt.session(a.id) as s:
        assert s.scalar(select(func.count()).select_from(ApiKey)) == 1
        assert {k.id for k in s.scalars(select(ApiKey))} == {a.key_id}
        assert s.get(ApiKey, b.key_id) is None
        joined = s.execute(select(ApiKey.id, Member.email).join(Member, Member.id == ApiKey.member_id)).all()
        assert [row.email for row in joined] == ["owner@a.example"]
    with rt.session() as s:  # an unscoped session (operators, sweeps) sees all
        assert s.scalar(select(func.count()).select_from(ApiKey)) == 2


def test_bulk_update_and_delete_stay_in_the_tenant(rt, make_tenant):
    a, b = make_tenant("A"), make_tenant("B")
    with rt.session(a.id) as s:
        s.execute(update(ApiKey).values(label="renamed"))
    with rt.session(b.id) as s:
        assert s.get(ApiKey, b.key_id).label == "owner"
    with rt.session(a.id) as s:
        s.execute(delete(ApiKey).where(ApiKey.id == b.key_id))
    with rt.session(b.id) as s:
        assert s.get(ApiKey, b.key_id) is not None


def test_new_rows_are_stamped_and_foreign_rows_refused(rt, make_tenant):
    a, b = make_tenant("A"), make_tenant("B")
    with rt.session(a.id) as s:
        m = Member(email="x@a.example", role="viewer", created_at=rt.now())
        s.add(m)
        s.flush()
        assert m.tenant_id == a.id
    with pytest.raises(RuntimeError, match="another tenant"):
        with rt.session(a.id) as s:
            s.add(Member(tenant_id=b.id, email="x@b.example", role="viewer", created_at=rt.now()))
    with rt.session(b.id) as s:
        assert [m.email for m in s.scalars(select(Member))] == ["owner@b.example"]


def test_aggregate_only_selects_are_scoped_too(rt, make_tenant):
    """SQLAlchemy does not treat select(func.count().filter(...)) as an ORM query, so loader
    criteria alone would miss it."""
    from cs_daemon.interventions.models import Intervention

    a, b = make_tenant("A"), make_tenant("B")
    with rt.session(b.id) as s:
        s.add(Intervention(user_id="u", status="delivered", channel="email", planned_at=rt.now(), updated_at=rt.now()))
    with rt.session(a.id) as s:
        total, delivered = s.execute(select(func.count(), func.count().filter(Intervention.status == "delivered"))
                                     .where(Intervention.test.is_(False))).one()
        assert (total, delivered) == (0, 0)
        assert s.execute(select(func.count(func.distinct(Intervention.user_id)))).scalar() == 0
    with rt.session(b.id) as s:
        assert s.execute(select(func.count(), func.count().filter(Intervention.status == "delivered"))
                         .where(Intervention.test.is_(False))).one() == (1, 1)


def test_core_selects_are_scoped_by_their_from_where_and_join_tables(rt, make_tenant):
    """Plain-table selects get a tenant filter for every tenant-owned table SQL puts in
    their FROM: named in the columns, only in WHERE, or joined."""
    keys, members = ApiKey.__table__, Member.__table__
    a, b = make_tenant("A"), make_tenant("B")
    with rt.session(a.id) as s:
        assert len(list(s.execute(select(keys)))) == 1
        assert s.scalar(select(func.count()).where(keys.c.test.is_(False))) == 1
        joined = select(keys.c.id, members.c.email).join_from(keys, members, keys.c.member_id == members.c.id)
        assert [row.email for row in s.execute(joined)] == ["owner@a.example"]
    with rt.session(b.id) as s:
        assert s.scalar(select(func.count()).where(keys.c.test.is_(False))) == 1
