"""action types

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22 21:06:25.364222
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('action_types',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('provider', sa.String(length=100), nullable=False),
    sa.Column('parameters_schema', sa.JSON(), nullable=False),
    sa.Column('delivery_webhook', sa.Text(), nullable=False),
    sa.Column('domain', sa.String(length=100), nullable=True),
    sa.Column('estimated_cost_usd', sa.String(length=32), nullable=True),
    sa.Column('secret_enc', sa.Text(), nullable=False),
    sa.Column('platform_id', sa.String(length=100), nullable=True),
    sa.Column('active', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('action_types', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_action_types_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index('uq_action_types_name', ['tenant_id', 'name'], unique=True)




def downgrade() -> None:

    with op.batch_alter_table('action_types', schema=None) as batch_op:
        batch_op.drop_index('uq_action_types_name')
        batch_op.drop_index(batch_op.f('ix_action_types_tenant_id'))

    op.drop_table('action_types')

