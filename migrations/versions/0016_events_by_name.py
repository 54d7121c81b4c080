"""events by name and time: the index event clauses of conditions read

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 18:00:00.000000

Preview counts and sweeps ask "which users have (or lack) events named X in the last D
days": with (tenant_id, event, timestamp, user_id) that is a range of one index, read
without the table, instead of every event of every user.
"""
from alembic import op


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_name_time', ['tenant_id', 'event', 'timestamp', 'user_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_name_time')
