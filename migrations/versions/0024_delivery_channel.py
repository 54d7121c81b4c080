"""deliveries name the channel that sends them

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-03 12:00:00.000000

- deliveries.channel: webhook | crm | email | in_app | sink, the channel whose `send`
  makes each attempt (docs/architecture.md, "The channel interface"); until now the URL's
  scheme chose the transport. Existing rows are filled from what they were:
  `sink:` sink, `mailto:` email, `inapp:` in_app, the CRM deliveries of interventions
  crm, the deliveries an intervention that could not be delivered was failed with
  (`none:`, never sent) none, everything else (a signed POST) webhook. The CRM's
  `intervention.rolled_back` events are crm too: they are signed with its secret.
"""
from alembic import op
import sqlalchemy as sa


revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('channel', sa.String(length=30), nullable=False, server_default='webhook'))
    op.execute("UPDATE deliveries SET channel = CASE "
               "WHEN url LIKE 'sink:%' THEN 'sink' "
               "WHEN url LIKE 'mailto:%' THEN 'email' "
               "WHEN url LIKE 'inapp:%' THEN 'in_app' "
               "WHEN url LIKE 'none:%' THEN 'none' "
               "WHEN secret_enc = 'ref:crm' THEN 'crm' "
               "ELSE 'webhook' END")
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.alter_column('channel', server_default=None)


def downgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_column('channel')
