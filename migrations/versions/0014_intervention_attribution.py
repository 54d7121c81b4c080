"""interventions: the attribution window of a delivered intervention and its first response

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 16:00:00.000000
"""
from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None

OPEN = "attribution_until IS NOT NULL AND outcome IS NULL"


def upgrade() -> None:
    with op.batch_alter_table('interventions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('attribution_until', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('responded_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index('ix_interventions_open', ['tenant_id', 'user_id'], unique=False,
                              sqlite_where=sa.text(OPEN), postgresql_where=sa.text(OPEN))


def downgrade() -> None:
    with op.batch_alter_table('interventions', schema=None) as batch_op:
        batch_op.drop_index('ix_interventions_open', sqlite_where=sa.text(OPEN), postgresql_where=sa.text(OPEN))
        batch_op.drop_column('responded_at')
        batch_op.drop_column('attribution_until')
