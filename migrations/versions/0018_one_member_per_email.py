"""one live member per email and tenant

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 10:00:00.000000

Two concurrent accepts of one invitation could make two members (and two keys) for one
email; the service now accepts an invitation once, and the database holds the rule too:
a unique index on (tenant_id, lower(email)) over members not removed. The service never
made such duplicates knowingly, so none should exist; if some do, this migration stops
with the list of them (it does not choose which member to keep: their keys and roles
may differ) and `cs db upgrade` fails until they are removed
(`DELETE /api/team/members/{id}`).
"""
from alembic import op
import sqlalchemy as sa


revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None

LIVE = "removed_at IS NULL"


def upgrade() -> None:
    duplicates = op.get_bind().execute(sa.text(
        f"SELECT tenant_id, lower(email) AS email, count(*) AS n FROM members WHERE {LIVE} "
        "GROUP BY tenant_id, lower(email) HAVING count(*) > 1 ORDER BY tenant_id, lower(email)")).all()
    if duplicates:
        listed = "; ".join(f"tenant {row.tenant_id}: {row.email} ({row.n} members)" for row in duplicates[:20])
        raise RuntimeError("members share an email within a tenant; remove all but one of each "
                           f"(DELETE /api/team/members/{{id}}) and upgrade again: {listed}")
    op.create_index('ux_members_email', 'members', ['tenant_id', sa.text('lower(email)')], unique=True,
                    sqlite_where=sa.text(LIVE), postgresql_where=sa.text(LIVE))


def downgrade() -> None:
    op.drop_index('ux_members_email', table_name='members')
