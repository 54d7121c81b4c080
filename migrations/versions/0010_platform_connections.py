"""platform connections

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-22 21:09:37.365385
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('platform_connections',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('platform_id', sa.String(length=100), nullable=False),
    sa.Column('credentials_enc', sa.Text(), nullable=False),
    sa.Column('connected', sa.Boolean(), nullable=False),
    sa.Column('connected_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('disconnected_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('platform_connections', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_platform_connections_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index('uq_platform_connections', ['tenant_id', 'platform_id'], unique=True)




def downgrade() -> None:

    with op.batch_alter_table('platform_connections', schema=None) as batch_op:
        batch_op.drop_index('uq_platform_connections')
        batch_op.drop_index(batch_op.f('ix_platform_connections_tenant_id'))

    op.drop_table('platform_connections')

