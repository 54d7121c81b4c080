"""Every table, imported in one place so metadata (and migrations) see them all."""

from sqlmodel import SQLModel

from .agent.models import AgentTokenUse  # noqa: F401
from .auth.models import ApiKey
from .billing.models import StripeEvent  # noqa: F401
from .channels.in_app_models import InAppMessage  # noqa: F401
from .console.models import ConsoleSession, SignInLink  # noqa: F401
from .customers.models import Customer, Event
from .customers.snapshots import ScoreSnapshot  # noqa: F401
from .decisions.models import DecisionRequest, DecisionTrace  # noqa: F401
from .delivery.models import Delivery, DeliveryAttempt
from .external.models import ActionType, ExternalAction, PlatformConnection
from .interventions.models import Intervention
from .learning.models import DecisionCount, DecisionLog  # noqa: F401
from .outbox.models import OutboxEvent
from .partners.models import IntegrationShare, PartnerIntegration  # noqa: F401
from .playbooks.models import Playbook
from .team.models import Invitation, Member
from .tenants.models import Tenant
from .webhooks.models import WebhookEndpoint

metadata = SQLModel.metadata

__all__ = ["ActionType", "ApiKey", "Customer", "DecisionRequest", "Delivery", "DeliveryAttempt", "Event", "ExternalAction", "Intervention", "Invitation", "Member",
           "OutboxEvent", "PlatformConnection", "Playbook", "Tenant", "WebhookEndpoint", "metadata"]
