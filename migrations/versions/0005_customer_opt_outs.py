"""customer opt-outs

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 20:47:03.602413
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:

    with op.batch_alter_table('customers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('opted_out', sa.JSON(), nullable=False, server_default='[]'))




def downgrade() -> None:

    with op.batch_alter_table('customers', schema=None) as batch_op:
        batch_op.drop_column('opted_out')


