"""partner integrations and their shares; customers of a partner by index

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23 10:00:00.000000
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # tenants.partner and tenants.partner_tenant_id date from 0001; listing a partner's
    # customers needs the index
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tenants_partner_tenant_id'), ['partner_tenant_id'], unique=False)

    op.create_table('partner_integrations',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('partner_tenant_id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('domain', sa.String(length=100), nullable=False),
    sa.Column('credential_fields', sa.JSON(), nullable=False),
    sa.Column('action_types', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['partner_tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('partner_integrations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_partner_integrations_partner_tenant_id'), ['partner_tenant_id'],
                              unique=False)
        batch_op.create_index('uq_partner_integrations_name', ['partner_tenant_id', 'name'], unique=True)

    op.create_table('partner_integration_shares',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('integration_id', sa.String(length=36), nullable=False),
    sa.Column('shared_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['integration_id'], ['partner_integrations.id'], ),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('partner_integration_shares', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_partner_integration_shares_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index('uq_partner_integration_shares', ['tenant_id', 'integration_id'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('partner_integration_shares', schema=None) as batch_op:
        batch_op.drop_index('uq_partner_integration_shares')
        batch_op.drop_index(batch_op.f('ix_partner_integration_shares_tenant_id'))
    op.drop_table('partner_integration_shares')

    with op.batch_alter_table('partner_integrations', schema=None) as batch_op:
        batch_op.drop_index('uq_partner_integrations_name')
        batch_op.drop_index(batch_op.f('ix_partner_integrations_partner_tenant_id'))
    op.drop_table('partner_integrations')

    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tenants_partner_tenant_id'))
