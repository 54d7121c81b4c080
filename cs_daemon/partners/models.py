from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Text
from sqlmodel import Field, SQLModel

from ..db import TenantOwned, id_field, json_field, time_field


class PartnerIntegration(SQLModel, table=True):
    """An integration a partner publishes to its customer tenants.

    Not TenantOwned on purpose: it belongs to the partner but is read by the customers it
    is shared with. The partner's queries filter on `partner_tenant_id` explicitly; a
    customer reaches a row only through its own (tenant-owned) IntegrationShare.
    """

    __tablename__ = "partner_integrations"
    __table_args__ = (Index("uq_partner_integrations_name", "partner_tenant_id", "name", unique=True),)

    id: str = id_field()
    partner_tenant_id: str = Field(foreign_key="tenants.id", index=True, max_length=36)
    name: str = Field(max_length=200)
    description: str = Field(sa_column=Column(Text, nullable=False))
    domain: str = Field(max_length=100)
    credential_fields: list = json_field(default=[], nullable=False)
    action_types: list = json_field(default=[], nullable=False)     # action type create fields
    created_at: datetime = time_field(nullable=False)


class IntegrationShare(TenantOwned, table=True):
    """A customer tenant's access to a partner integration; owned by the customer, so its
    platform listing finds the integration within its own tenant scope."""

    __tablename__ = "partner_integration_shares"
    __table_args__ = (Index("uq_partner_integration_shares", "tenant_id", "integration_id", unique=True),)

    id: str = id_field()
    integration_id: str = Field(foreign_key="partner_integrations.id", max_length=36)
    shared_at: datetime = time_field(nullable=False)
