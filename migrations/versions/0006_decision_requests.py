"""decision requests

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 20:50:28.310996
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('decision_requests',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('events', sa.JSON(), nullable=False),
    sa.Column('state_changed', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('claimed_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('done_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('decision_requests', schema=None) as batch_op:
        batch_op.create_index('ix_decision_requests_open', ['done_at', 'created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_decision_requests_tenant_id'), ['tenant_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('decision_requests', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_decision_requests_tenant_id'))
        batch_op.drop_index('ix_decision_requests_open')

    op.drop_table('decision_requests')

