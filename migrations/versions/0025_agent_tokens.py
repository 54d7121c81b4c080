"""the agent's token use per tenant and day

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-03 12:00:00.000000

- agent_token_use: tokens the agent's model calls used, per tenant and UTC day; the
  daily token budget (config.ai_daily_token_budget) is counted against it.
"""
from alembic import op
import sqlalchemy as sa


revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'agent_token_use',
        sa.Column('tenant_id', sa.String(length=36), sa.ForeignKey('tenants.id'), primary_key=True),
        sa.Column('day', sa.Date(), primary_key=True),
        sa.Column('tokens', sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('agent_token_use')
