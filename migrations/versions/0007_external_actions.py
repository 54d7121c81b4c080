"""external actions

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22 20:52:51.829184
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('external_actions',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('action_type', sa.String(length=100), nullable=False),
    sa.Column('action_type_id', sa.String(length=36), nullable=True),
    sa.Column('provider', sa.String(length=100), nullable=True),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('status', sa.String(length=12), nullable=False),
    sa.Column('parameters', sa.JSON(), nullable=False),
    sa.Column('reasoning', sa.Text(), nullable=True),
    sa.Column('confidence', sa.Float(), nullable=True),
    sa.Column('lifecycle_stage', sa.String(length=20), nullable=True),
    sa.Column('outcome_status', sa.String(length=12), nullable=True),
    sa.Column('outcome_result', sa.JSON(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('test', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('external_actions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_external_actions_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index('ix_external_actions_type', ['tenant_id', 'action_type', 'status'], unique=False)
        batch_op.create_index('ix_external_actions_user', ['tenant_id', 'user_id', 'created_at'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('external_actions', schema=None) as batch_op:
        batch_op.drop_index('ix_external_actions_user')
        batch_op.drop_index('ix_external_actions_type')
        batch_op.drop_index(batch_op.f('ix_external_actions_tenant_id'))

    op.drop_table('external_actions')

