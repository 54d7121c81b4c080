"""the decision log and the learner's counts

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02 12:00:00.000000

- decision_log: each choice the engine and recommend made, with the features, the options'
  estimates, the choice and its propensity, joined to its outcome;
- decision_counts: successes and trials per (scope, option, key), updated once per
  outcome (docs/decisions.md).
"""
from alembic import op
import sqlalchemy as sa


revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'decision_log',
        sa.Column('tenant_id', sa.String(length=36), sa.ForeignKey('tenants.id'), nullable=False),
        sa.Column('id', sa.String(length=36), primary_key=True),
        sa.Column('kind', sa.String(length=12), nullable=False),
        sa.Column('scope', sa.String(length=60), nullable=False),
        sa.Column('user_id', sa.String(length=255), nullable=False),
        sa.Column('domain', sa.String(length=100), nullable=True),
        sa.Column('features', sa.JSON(), nullable=False),
        sa.Column('options', sa.JSON(), nullable=False),
        sa.Column('choice', sa.String(length=100), nullable=False),
        sa.Column('propensity', sa.Float(), nullable=False),
        sa.Column('decided_by', sa.String(length=8), nullable=False),
        sa.Column('intervention_id', sa.String(length=36), nullable=True),
        sa.Column('external_action_id', sa.String(length=36), nullable=True),
        sa.Column('test', sa.Boolean(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('success', sa.Boolean(), nullable=True),
        sa.Column('outcome_at', sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index('ix_decision_log_tenant_id', 'decision_log', ['tenant_id'])
    op.create_index('ix_decision_log_created', 'decision_log', ['tenant_id', 'kind', 'created_at'])
    op.create_index('ix_decision_log_intervention', 'decision_log', ['tenant_id', 'intervention_id'])
    op.create_index('ix_decision_log_action', 'decision_log', ['tenant_id', 'external_action_id'])
    op.create_index('ix_decision_log_open', 'decision_log', ['tenant_id', 'user_id', 'choice', 'created_at'])
    op.create_table(
        'decision_counts',
        sa.Column('tenant_id', sa.String(length=36), sa.ForeignKey('tenants.id'), primary_key=True),
        sa.Column('scope', sa.String(length=60), primary_key=True),
        sa.Column('option', sa.String(length=100), primary_key=True),
        sa.Column('key', sa.String(length=1400), primary_key=True),
        sa.Column('successes', sa.Integer(), nullable=False),
        sa.Column('trials', sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('decision_counts')
    op.drop_table('decision_log')
