"""in-app messages

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22 21:08:40.331907
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('in_app_messages',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('intervention_id', sa.String(length=36), nullable=False),
    sa.Column('body', sa.JSON(), nullable=False),
    sa.Column('withdrawn_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('seq'),
    sa.UniqueConstraint('id')
    )
    with op.batch_alter_table('in_app_messages', schema=None) as batch_op:
        batch_op.create_index('ix_in_app_messages_intervention', ['tenant_id', 'intervention_id'], unique=True)
        batch_op.create_index(batch_op.f('ix_in_app_messages_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index('ix_in_app_messages_user', ['tenant_id', 'user_id', 'seq'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('in_app_messages', schema=None) as batch_op:
        batch_op.drop_index('ix_in_app_messages_user')
        batch_op.drop_index(batch_op.f('ix_in_app_messages_tenant_id'))
        batch_op.drop_index('ix_in_app_messages_intervention')

    op.drop_table('in_app_messages')
