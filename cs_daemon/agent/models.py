from __future__ import annotations

from datetime import date

from sqlalchemy import BigInteger, Column, Date
from sqlmodel import Field

from ..db import TenantOwned


class AgentTokenUse(TenantOwned, table=True):
    """The tokens the agent's model calls used, per tenant and day (UTC): what the daily
    token budget is counted against (docs/ai.md, "The agent")."""

    __tablename__ = "agent_token_use"

    tenant_id: str = Field(foreign_key="tenants.id", primary_key=True, max_length=36)
    day: date = Field(sa_column=Column(Date, primary_key=True))
    tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
