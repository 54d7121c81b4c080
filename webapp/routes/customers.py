"""Event ingestion and customers."""

from __future__ import annotations

from pydantic import Field

from cs_daemon.customers import ingest, service
from cs_daemon.customers.schemas import (
    CustomerCreate, CustomerCreated, CustomerDetail, CustomerDetailResponse, CustomerEvent, DecisionSummary,
    CustomerList, CustomerListItem, CustomerListQuery, CustomerPublic, CustomerStatsResponse, NextAction, PlainTrack,
    TrackRequest, TrackResult, quick_track, quick_track_json,
)
from cs_daemon.decisions import trace
from cs_daemon.interventions import by_user
from cs_daemon.interventions.schemas import InterventionPublic
from cs_daemon.schemas import Wire
from cs_daemon.tenants import service as tenants

from ..api import Api, Call
from ..browser import beacon_credentials, refuse_wide_key_in_url

api = Api("Customers")


class TrackQuery(Wire):
    api_key: str | None = Field(None, description="For navigator.sendBeacon, which cannot set Authorization: "
                                                  "an ingest-only key (any other key is 403). The body may be text/plain.")


@api.route("POST", "/api/track", access="ingest", body=TrackRequest, query=TrackQuery, response=TrackResult,
           credentials=beacon_credentials, quick=quick_track, quick_json=quick_track_json,
           summary="Ingest 1 to 100 product events; duplicates by idempotency_key are dropped")
def post_track(call: Call):
    refuse_wide_key_in_url(call.caller)
    if type(call.body) is PlainTrack:    # each event a dict of the fields it gave
        events = [ingest.Incoming(**e) for e in call.body.events]
    else:
        events = [ingest.Incoming(user_id=e.user_id, event=e.event, properties=e.properties,
                                  timestamp=e.timestamp, idempotency_key=e.idempotency_key)
                  for e in call.body.events]
    result = ingest.ingest(call.session, call.tenant_id, events, source="api",
                           test=call.caller.test, now=call.now)
    return TrackResult(accepted=result.accepted, duplicates=result.duplicates, over_limit=result.over_limit)


@api.route("GET", "/api/customers/stats", access="read", response=CustomerStatsResponse,
           summary="Counts of users: total, active in 30 days, at risk, churned")
def get_customer_stats(call: Call):
    return {"stats": service.stats(call.session, now=call.now)}


@api.route("POST", "/api/customers", access="write", body=CustomerCreate, response=CustomerCreated,
           status=201, errors=(403,), responses={200: CustomerCreated},
           summary="Create a customer (201), or return the existing one (200)")
def post_customer(call: Call):
    data: CustomerCreate = call.body
    customer, created = service.create(
        call.session, call.tenant_id, user_id=data.user_id, email=data.email, name=data.name,
        properties=data.properties, test=call.caller.test, now=call.now)
    return CustomerCreated(user=CustomerPublic.of(customer)), 201 if created else 200


@api.route("GET", "/api/customers", access="read", query=CustomerListQuery, response=CustomerList,
           summary="Customers, newest first; `limit` (default 100, max 1000) and `cursor`")
def get_customers(call: Call):
    page = service.list_page(call.session, limit=call.query.limit, cursor=call.query.cursor)
    upcoming = by_user.next_actions(call.session, call.tenant_id, [c.id for c in page.customers])
    return CustomerList(customers=[CustomerListItem.of(c, next_action=_next(upcoming.get(c.id)))
                                   for c in page.customers],
                        next_cursor=page.next_cursor)


def _next(action: by_user.NextAction | None) -> NextAction | None:
    return None if action is None else NextAction(channel=action.channel, status=action.status,
                                                  playbook=action.playbook, intervention_id=action.intervention_id)


@api.route("GET", "/api/customers/{user_id}", access="read", response=CustomerDetailResponse,
           errors=(404,), summary="One customer with milestone progress, segments, recent events and interventions")
def get_customer(call: Call, user_id: str):
    customer = service.get(call.session, user_id)
    config = tenants.get(call.session, call.tenant_id, now=call.now).config
    detail = CustomerDetail.of(
        customer,
        milestone_progress=service.milestone_progress(customer, config),
        segment_memberships=service.segment_memberships(customer, now=call.now),
    )
    events = [CustomerEvent.model_validate(e) for e in service.recent_events(call.session, user_id)]
    interventions = [InterventionPublic.model_validate(iv)
                     for iv in by_user.of_user(call.session, call.tenant_id, user_id)]
    decisions = [DecisionSummary(**d) for d in trace.recent_for_user(call.session, user_id)]
    return CustomerDetailResponse(customer=detail, events=events, interventions=interventions, decisions=decisions)
