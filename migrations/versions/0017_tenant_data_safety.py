"""decision requests give up after bounded tries; the CRM secret is kept encrypted

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 12:00:00.000000

decision_requests.attempts, failed_at, last_error: a request that keeps failing backs off
and ends failed instead of coming back every minute (docs/decisions.md, "Owed decisions").

tenants.crm_webhook_secret_enc: config.crm_webhook_secret is write-only and kept
encrypted with CS_SECRET_KEY like the other stored secrets. Secrets stored in the
config before this revision are encrypted into the new column and removed from the
config here, so none stays readable at rest (the service reads only the column).
"""
from alembic import context, op
import sqlalchemy as sa


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None

_tenants = sa.table('tenants', sa.column('id', sa.String()), sa.column('config', sa.JSON()),
                    sa.column('crm_webhook_secret_enc', sa.Text()))


def _secret_key() -> str:
    settings = context.config.attributes.get("settings")
    if settings is None:
        from cs_daemon.config import load_settings

        settings = load_settings()
    return settings.secret_key


def _move_secrets(to_column: bool) -> None:
    from cs_daemon import crypto

    conn = op.get_bind()
    key = None
    for row in conn.execute(sa.select(_tenants.c.id, _tenants.c.config, _tenants.c.crm_webhook_secret_enc)).all():
        config = dict(row.config or {}) if isinstance(row.config, dict) else None
        if config is None:
            continue
        if to_column and isinstance(config.get("crm_webhook_secret"), str):
            key = key or _secret_key()
            secret = config.pop("crm_webhook_secret")
            conn.execute(sa.update(_tenants).where(_tenants.c.id == row.id)
                         .values(config=config, crm_webhook_secret_enc=crypto.encrypt(key, secret)))
        elif not to_column and row.crm_webhook_secret_enc:
            key = key or _secret_key()
            config["crm_webhook_secret"] = crypto.decrypt(key, row.crm_webhook_secret_enc)
            conn.execute(sa.update(_tenants).where(_tenants.c.id == row.id).values(config=config))


def upgrade() -> None:
    with op.batch_alter_table('decision_requests', schema=None) as batch_op:
        batch_op.add_column(sa.Column('attempts', sa.Integer(), nullable=False, server_default=sa.text('0')))
        batch_op.add_column(sa.Column('failed_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('last_error', sa.String(length=500), nullable=True))
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('crm_webhook_secret_enc', sa.Text(), nullable=True))
    _move_secrets(to_column=True)


def downgrade() -> None:
    _move_secrets(to_column=False)
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_column('crm_webhook_secret_enc')
    with op.batch_alter_table('decision_requests', schema=None) as batch_op:
        batch_op.drop_column('last_error')
        batch_op.drop_column('failed_at')
        batch_op.drop_column('attempts')
