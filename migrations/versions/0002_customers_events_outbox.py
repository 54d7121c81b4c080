"""customers, events, outbox

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 20:09:09.532461
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('customers',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=255), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('email', sa.String(length=320), nullable=True),
    sa.Column('company', sa.String(length=255), nullable=True),
    sa.Column('role', sa.String(length=255), nullable=True),
    sa.Column('team_size', sa.Integer(), nullable=True),
    sa.Column('locale', sa.String(length=35), nullable=True),
    sa.Column('traits', sa.JSON(), nullable=False),
    sa.Column('lifecycle_stage', sa.String(length=20), nullable=False),
    sa.Column('health', sa.Float(), nullable=False),
    sa.Column('activation_score', sa.Float(), nullable=False),
    sa.Column('engagement_score', sa.Float(), nullable=False),
    sa.Column('expansion_score', sa.Float(), nullable=False),
    sa.Column('risk_level', sa.String(length=10), nullable=False),
    sa.Column('last_activity_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('scored_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('test', sa.Boolean(), nullable=False),
    sa.Column('state', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('tenant_id', 'id')
    )
    with op.batch_alter_table('customers', schema=None) as batch_op:
        batch_op.create_index('ix_customers_activity', ['tenant_id', 'last_activity_at'], unique=False)
        batch_op.create_index('ix_customers_risk', ['tenant_id', 'risk_level'], unique=False)
        batch_op.create_index('ix_customers_scored', ['scored_at'], unique=False)
        batch_op.create_index('ix_customers_stage', ['tenant_id', 'lifecycle_stage'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('event', sa.String(length=255), nullable=False),
    sa.Column('properties', sa.JSON(), nullable=False),
    sa.Column('timestamp', sa.DateTime(timezone=True), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('test', sa.Boolean(), nullable=False),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_user', ['tenant_id', 'user_id', 'event', 'timestamp'], unique=False)
        batch_op.create_index('uq_events_idempotency', ['tenant_id', 'idempotency_key'], unique=True, sqlite_where=sa.text('idempotency_key IS NOT NULL'), postgresql_where=sa.text('idempotency_key IS NOT NULL'))

    op.create_table('outbox_events',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('event_type', sa.String(length=100), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('test', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('fanned_out_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('outbox_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_outbox_events_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index('ix_outbox_pending', ['fanned_out_at', 'created_at'], unique=False)

    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tracked_users', sa.Integer(), nullable=False, server_default='0'))




def downgrade() -> None:

    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_column('tracked_users')

    with op.batch_alter_table('outbox_events', schema=None) as batch_op:
        batch_op.drop_index('ix_outbox_pending')
        batch_op.drop_index(batch_op.f('ix_outbox_events_tenant_id'))

    op.drop_table('outbox_events')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('uq_events_idempotency', sqlite_where=sa.text('idempotency_key IS NOT NULL'), postgresql_where=sa.text('idempotency_key IS NOT NULL'))
        batch_op.drop_index('ix_events_user')

    op.drop_table('events')
    with op.batch_alter_table('customers', schema=None) as batch_op:
        batch_op.drop_index('ix_customers_stage')
        batch_op.drop_index('ix_customers_scored')
        batch_op.drop_index('ix_customers_risk')
        batch_op.drop_index('ix_customers_activity')

    op.drop_table('customers')

