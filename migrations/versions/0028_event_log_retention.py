"""the event log is listed and pruned by time: an index on (tenant_id, created_at)

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05 12:00:00.000000

`cs events log` lists a tenant's recorded events newest first, and the event-log sweep
removes each tenant's events older than its `config.event_log_retention_days`, in
batches (docs/architecture.md, "The event log"). Both read `outbox_events` by tenant and
time; without this index either would scan the tenant's whole log. It also serves every
lookup by tenant, so the single-column `ix_outbox_events_tenant_id` goes: ingest writes
these rows on its hot path, and keeps one index to maintain on them, not two.
"""
from alembic import op


revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_outbox_events_created', 'outbox_events', ['tenant_id', 'created_at'], unique=False)
    op.drop_index('ix_outbox_events_tenant_id', table_name='outbox_events')


def downgrade() -> None:
    op.create_index('ix_outbox_events_tenant_id', 'outbox_events', ['tenant_id'], unique=False)
    op.drop_index('ix_outbox_events_created', table_name='outbox_events')
