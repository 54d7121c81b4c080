"""outbox_events is the event log: no pending index, no fan-out mark

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-04 12:00:00.000000

Webhook fan-out writes one delivery per subscribed endpoint in the transaction that
records the event (outbox/service.py), so no event ever waits to be fanned out: the
`ix_outbox_pending` index (fanned_out_at, created_at) served a query that does not exist,
and `fanned_out_at` was always `created_at`. Both go; the rows stay, as the log of the
events the service recorded (docs/architecture.md, "The event log").
"""
from alembic import op
import sqlalchemy as sa


revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('outbox_events', schema=None) as batch_op:
        batch_op.drop_index('ix_outbox_pending')
        batch_op.drop_column('fanned_out_at')


def downgrade() -> None:
    with op.batch_alter_table('outbox_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fanned_out_at', sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE outbox_events SET fanned_out_at = created_at")
    with op.batch_alter_table('outbox_events', schema=None) as batch_op:
        batch_op.create_index('ix_outbox_pending', ['fanned_out_at', 'created_at'], unique=False)
