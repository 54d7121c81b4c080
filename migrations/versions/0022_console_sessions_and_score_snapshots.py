"""the console: emailed sign-in links, browser sessions, daily score snapshots

Revision ID: 0022
Revises: 0019
Create Date: 2026-12-01 12:00:00.000000

- console_sign_in_links: one-time links mailed to team members (the token's digest only);
- console_sessions: signed-in browsers, of a member or of an API key, with their CSRF
  token and the live/test/both view;
- score_snapshots: each user's scores per day, for the console's chart over time;
- ix_customers_created: customer lists page newest first without sorting the tenant.
"""
from alembic import op
import sqlalchemy as sa



revision = '0022'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'console_sign_in_links',
        sa.Column('tenant_id', sa.String(length=36), sa.ForeignKey('tenants.id'), nullable=False),
        sa.Column('id', sa.String(length=36), primary_key=True),
        sa.Column('member_id', sa.String(length=36), sa.ForeignKey('members.id'), nullable=False),
        sa.Column('token_digest', sa.String(length=64), nullable=False, unique=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('used_at', sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index('ix_console_sign_in_links_tenant_id', 'console_sign_in_links', ['tenant_id'])
    op.create_index('ix_console_links_member', 'console_sign_in_links', ['tenant_id', 'member_id', 'expires_at'])
    op.create_table(
        'console_sessions',
        sa.Column('tenant_id', sa.String(length=36), sa.ForeignKey('tenants.id'), nullable=False),
        sa.Column('id', sa.String(length=36), primary_key=True),
        sa.Column('token_digest', sa.String(length=64), nullable=False, unique=True),
        sa.Column('member_id', sa.String(length=36), sa.ForeignKey('members.id'), nullable=True),
        sa.Column('key_id', sa.String(length=36), sa.ForeignKey('api_keys.id'), nullable=True),
        sa.Column('csrf_token', sa.String(length=64), nullable=False),
        sa.Column('data_view', sa.String(length=4), nullable=False, server_default='both'),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index('ix_console_sessions_tenant_id', 'console_sessions', ['tenant_id'])
    op.create_table(
        'score_snapshots',
        sa.Column('tenant_id', sa.String(length=36), sa.ForeignKey('tenants.id'), primary_key=True),
        sa.Column('user_id', sa.String(length=255), primary_key=True),
        sa.Column('day', sa.Date(), primary_key=True),
        sa.Column('health', sa.Float(), nullable=False),
        sa.Column('activation_score', sa.Float(), nullable=False),
        sa.Column('engagement_score', sa.Float(), nullable=False),
        sa.Column('expansion_score', sa.Float(), nullable=False),
        sa.Column('lifecycle_stage', sa.String(length=20), nullable=False),
        sa.Column('risk_level', sa.String(length=10), nullable=False),
    )
    op.create_index('ix_score_snapshots_tenant_id', 'score_snapshots', ['tenant_id'])
    op.create_index('ix_score_snapshots_day', 'score_snapshots', ['tenant_id', 'day'])
    op.create_index('ix_customers_created', 'customers', ['tenant_id', 'created_at', 'id'])


def downgrade() -> None:
    op.drop_index('ix_customers_created', table_name='customers')
    op.drop_table('score_snapshots')
    op.drop_table('console_sessions')
    op.drop_table('console_sign_in_links')
