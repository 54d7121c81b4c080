"""playbooks and interventions

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 20:44:57.098372
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('interventions',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('playbook_id', sa.String(length=36), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('channel', sa.String(length=20), nullable=False),
    sa.Column('message_body', sa.Text(), nullable=True),
    sa.Column('reasoning', sa.Text(), nullable=True),
    sa.Column('confidence', sa.Float(), nullable=True),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('quality_checks', sa.JSON(), nullable=True),
    sa.Column('flagged', sa.Boolean(), nullable=False),
    sa.Column('flag_reason', sa.Text(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('severity', sa.String(length=10), nullable=True),
    sa.Column('suggested_action', sa.Text(), nullable=True),
    sa.Column('action_taken', sa.Text(), nullable=True),
    sa.Column('handled_by', sa.String(length=80), nullable=True),
    sa.Column('outcome', sa.String(length=10), nullable=True),
    sa.Column('outcome_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('test', sa.Boolean(), nullable=False),
    sa.Column('planned_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('approved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('interventions', schema=None) as batch_op:
        batch_op.create_index('ix_interventions_planned', ['tenant_id', 'planned_at'], unique=False)
        batch_op.create_index('ix_interventions_playbook', ['tenant_id', 'playbook_id', 'status'], unique=False)
        batch_op.create_index(batch_op.f('ix_interventions_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index('ix_interventions_user', ['tenant_id', 'user_id', 'planned_at'], unique=False)

    op.create_table('playbooks',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('lifecycle_area', sa.String(length=50), nullable=True),
    sa.Column('entry_conditions', sa.JSON(), nullable=False),
    sa.Column('exit_conditions', sa.JSON(), nullable=False),
    sa.Column('constraints', sa.JSON(), nullable=False),
    sa.Column('strategy_hints', sa.JSON(), nullable=False),
    sa.Column('test', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('status_changed_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('playbooks', schema=None) as batch_op:
        batch_op.create_index('ix_playbooks_status', ['tenant_id', 'status'], unique=False)
        batch_op.create_index(batch_op.f('ix_playbooks_tenant_id'), ['tenant_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('playbooks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_playbooks_tenant_id'))
        batch_op.drop_index('ix_playbooks_status')

    op.drop_table('playbooks')
    with op.batch_alter_table('interventions', schema=None) as batch_op:
        batch_op.drop_index('ix_interventions_user')
        batch_op.drop_index(batch_op.f('ix_interventions_tenant_id'))
        batch_op.drop_index('ix_interventions_playbook')
        batch_op.drop_index('ix_interventions_planned')

    op.drop_table('interventions')

