"""playbooks.revision: moved on every update, so compiled playbooks are kept per revision

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 17:00:00.000000
"""
from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('playbooks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('revision', sa.Integer(), nullable=False, server_default=sa.text('1')))


def downgrade() -> None:
    with op.batch_alter_table('playbooks', schema=None) as batch_op:
        batch_op.drop_column('revision')
