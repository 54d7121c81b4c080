"""tenants: when the milestones last changed, until the score sweep has re-read them

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 12:00:00.000000

A user's milestones are recorded as their events arrive, and only those configured at
that moment. A tenant that configures milestones after its users did them would count
none of them; so a change of `config.milestones` is stamped here, in the same
transaction, and the score sweep then reads each user's milestones from their stored
events and re-scores them (docs/scoring.md, "Changing the milestones").
"""
from alembic import op
import sqlalchemy as sa


revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('tenants', sa.Column('milestones_changed_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # a plain ALTER TABLE (SQLite has one since 3.35): a batch would copy `tenants` into a
    # new table, and dropping the old one fails while other tables' foreign keys name it
    op.drop_column('tenants', 'milestones_changed_at')
