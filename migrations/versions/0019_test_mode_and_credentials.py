"""test mode as a boundary, keys owned by who minted them, platform credentials out of URLs

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 12:00:00.000000

- decision_requests.test: the events were tracked with a test key, so what is decided is
  test data;
- invitations.test: made with a test key, its member gets a test key;
- api_keys.created_by: the member (or "key:<id>") that minted the key through the API;
- a platform action type's delivery_webhook was stored filled with the tenant's
  credentials: it becomes the template again (its dispatches fill it when they are sent),
  and the dispatches already made point at the template too, so neither the type, nor a
  listing, nor a delivery log shows a credential. (The downgrade leaves the templates:
  the credentials are not written back into URLs.)
"""
import json

from alembic import op
import sqlalchemy as sa


revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None

# the built-in templates' URLs as they were when this migration was written
BUILT_IN = {
    ("loyalty", "award_points"): "{base_url}/hooks/award-points",
    ("loyalty", "grant_reward"): "{base_url}/hooks/grant-reward",
    ("support_desk", "open_ticket"): "{base_url}/api/tickets",
    ("team_chat", "post_message"): "{webhook_url}",
}


def upgrade() -> None:
    with op.batch_alter_table('decision_requests', schema=None) as batch_op:
        batch_op.add_column(sa.Column('test', sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table('invitations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('test', sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('created_by', sa.String(length=80), nullable=True))
    _platform_urls_to_templates(op.get_bind())


def _platform_urls_to_templates(conn) -> None:
    integrations = {row.id: row.action_types for row in conn.execute(sa.text(
        "SELECT id, action_types FROM partner_integrations"))}
    types = conn.execute(sa.text(
        "SELECT id, tenant_id, name, platform_id FROM action_types WHERE platform_id IS NOT NULL")).all()
    for t in types:
        template = BUILT_IN.get((t.platform_id, t.name)) or _integration_template(integrations, t)
        if template is None or "{" not in template:
            continue
        conn.execute(sa.text("UPDATE action_types SET delivery_webhook = :url WHERE id = :id"),
                     {"url": template, "id": t.id})
        conn.execute(sa.text(
            "UPDATE deliveries SET url = :ref WHERE tenant_id = :tenant AND kind = 'dispatch' "
            "AND url NOT LIKE 'sink:%' AND subject_id IN "
            "(SELECT id FROM external_actions WHERE tenant_id = :tenant AND action_type_id = :type)"),
            {"ref": f"platform:{t.platform_id}:{template}", "tenant": t.tenant_id, "type": t.id})


def _integration_template(integrations: dict, action_type) -> str | None:
    specs = integrations.get(action_type.platform_id)
    if isinstance(specs, str):
        specs = json.loads(specs)
    for spec in specs or []:
        if spec.get("name") == action_type.name:
            return spec.get("delivery_webhook")
    return None


def downgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_column('created_by')
    with op.batch_alter_table('invitations', schema=None) as batch_op:
        batch_op.drop_column('test')
    with op.batch_alter_table('decision_requests', schema=None) as batch_op:
        batch_op.drop_column('test')
