"""decision traces

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-03 12:00:00.000000

- decision_traces: one row per engine decision (also those that end in no action) and
  per recommendation: features, each playbook's verdict, the options and propensity, the
  agent's steps, the drafts, the choice and who made it (docs/decisions.md, "The
  decision trace"); removed after config.trace_retention_days;
- interventions.decision_id and decision_log.decision_id: the trace of the decision that
  made them.
"""
from alembic import op
import sqlalchemy as sa


revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'decision_traces',
        sa.Column('tenant_id', sa.String(length=36), sa.ForeignKey('tenants.id'), nullable=False),
        sa.Column('id', sa.String(length=36), primary_key=True),
        sa.Column('user_id', sa.String(length=255), nullable=False),
        sa.Column('kind', sa.String(length=10), nullable=False),
        sa.Column('decided_by', sa.String(length=8), nullable=False),
        sa.Column('action', sa.String(length=100), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('playbook_id', sa.String(length=36), nullable=True),
        sa.Column('channel', sa.String(length=20), nullable=True),
        sa.Column('features', sa.JSON(), nullable=False),
        sa.Column('rules', sa.JSON(), nullable=False),
        sa.Column('options', sa.JSON(), nullable=False),
        sa.Column('propensity', sa.Float(), nullable=True),
        sa.Column('agent', sa.JSON(), nullable=False),
        sa.Column('fallback_reason', sa.String(length=200), nullable=True),
        sa.Column('drafts', sa.JSON(), nullable=False),
        sa.Column('choice', sa.JSON(), nullable=False),
        sa.Column('tokens', sa.Integer(), server_default=sa.text('0'), nullable=False),
        sa.Column('intervention_id', sa.String(length=36), nullable=True),
        sa.Column('external_action_id', sa.String(length=36), nullable=True),
        sa.Column('test', sa.Boolean(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index('ix_decision_traces_tenant_id', 'decision_traces', ['tenant_id'])
    op.create_index('ix_decision_traces_intervention', 'decision_traces', ['tenant_id', 'intervention_id'])
    op.create_index('ix_decision_traces_user', 'decision_traces', ['tenant_id', 'user_id', 'created_at'])
    op.create_index('ix_decision_traces_created', 'decision_traces', ['tenant_id', 'created_at'])
    with op.batch_alter_table('interventions') as batch:
        batch.add_column(sa.Column('decision_id', sa.String(length=36), nullable=True))
    with op.batch_alter_table('decision_log') as batch:
        batch.add_column(sa.Column('decision_id', sa.String(length=36), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('decision_log') as batch:
        batch.drop_column('decision_id')
    with op.batch_alter_table('interventions') as batch:
        batch.drop_column('decision_id')
    op.drop_table('decision_traces')
