"""The partner API (docs/partners.md): a partner tenant provisions and oversees its customer
tenants and publishes integrations to them. Another tenant's id is 404."""

from __future__ import annotations

from cs_daemon.partners import integrations, service
from cs_daemon.partners.schemas import (
    CustomerCreate, CustomerList, CustomerProvisioned, CustomerPublic, CustomerResponse, IntegrationCreate,
    IntegrationList, IntegrationPublic, IntegrationResponse, OverallStatsResponse, ProvisionedTenant, ShareBody,
    Shared, StatsResponse,
)
from cs_daemon.tenants import service as tenants

from ..api import Api, Call

api = Api("Partner")


@api.route("POST", "/api/partner/customers", access="partner_write", configures=True, body=CustomerCreate,
           response=CustomerProvisioned, status=201,
           summary="Provision a customer tenant with its first admin and admin key (shown once)")
def provision_customer(call: Call):
    data: CustomerCreate = call.body
    made = service.provision(call.session, call.tenant_id, name=data.name, owner_email=str(data.owner_email),
                             plan_tier=data.plan_tier, now=call.now)
    return CustomerProvisioned(tenant=ProvisionedTenant.of(made.tenant, tenants.shown_config(made.tenant)),
                               api_key=made.key.secret)


@api.route("GET", "/api/partner/customers", access="partner", response=CustomerList,
           summary="The customer tenants this partner provisioned, oldest first")
def list_partner_customers(call: Call):
    rows = service.list_customers(call.session, call.tenant_id)
    return CustomerList(customers=[CustomerPublic.of(t) for t in rows])


@api.route("GET", "/api/partner/customers/{tenant_id}", access="partner", response=CustomerResponse,
           errors=(404,), summary="One customer tenant of this partner")
def get_partner_customer(call: Call, tenant_id: str):
    return CustomerResponse(customer=CustomerPublic.of(service.owned_customer(call.session, call.tenant_id,
                                                                              tenant_id)))


@api.route("GET", "/api/partner/customers/{tenant_id}/stats", access="partner", response=StatsResponse,
           errors=(404,), summary="A customer's figures over the last 30 days (test data excluded)")
def get_partner_customer_stats(call: Call, tenant_id: str):
    figures = service.customer_figures(call.session, call.tenant_id, tenant_id, now=call.now)
    return StatsResponse(stats=figures.public())


@api.route("GET", "/api/partner/stats", access="partner", response=OverallStatsResponse,
           summary="The same figures summed over every customer, and how many customers")
def get_partner_stats(call: Call):
    count, figures = service.overall_figures(call.session, call.tenant_id, now=call.now)
    return OverallStatsResponse(stats={**figures.public(), "customers": count})


def _public(integration, shared_with: list[str]) -> IntegrationPublic:
    return IntegrationPublic(id=integration.id, name=integration.name, description=integration.description,
                             domain=integration.domain, credential_fields=integration.credential_fields,
                             action_types=integration.action_types, shared_with=shared_with,
                             created_at=integration.created_at)


@api.route("POST", "/api/partner/integrations", access="partner_write", configures=True,
           body=IntegrationCreate, response=IntegrationResponse, status=201, errors=(409,),
           summary="Register an integration its customers can connect like a built-in platform")
def register_integration(call: Call):
    made = integrations.register(call.session, call.tenant_id, call.body.model_dump(), now=call.now,
                                 allow_private=call.rt.settings.private_webhook_urls_allowed)
    return IntegrationResponse(integration=_public(made, []))


@api.route("GET", "/api/partner/integrations", access="partner", response=IntegrationList,
           summary="This partner's integrations and the customers each is shared with")
def list_partner_integrations(call: Call):
    shared = integrations.shared_with(call.session, call.tenant_id)
    rows = integrations.list_for_partner(call.session, call.tenant_id)
    return IntegrationList(integrations=[_public(i, shared.get(i.id, [])) for i in rows])


@api.route("POST", "/api/partner/integrations/{integration_id}/share", access="partner_write", body=ShareBody,
           response=Shared, errors=(404,),
           summary="Share an integration with some (tenant_ids) or all (all: true) customers")
def share_integration(call: Call, integration_id: str):
    count = integrations.share(call.session, call.tenant_id, integration_id,
                               tenant_ids=None if call.body.all else call.body.tenant_ids, now=call.now)
    return Shared(shared=count)
