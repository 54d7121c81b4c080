"""Webhook endpoints, their test send, and the delivery log with replay."""

from __future__ import annotations

from cs_daemon.delivery import service as delivery
from cs_daemon.flows import replay, test_send
from cs_daemon.webhooks import service
from cs_daemon.webhooks.schemas import (
    Deleted, DeliveryList, DeliveryPublic, DeliveryQuery, DeliveryResponse, EndpointCreate,
    EndpointCreated, EndpointList, EndpointPublic, EndpointResponse, EndpointUpdate,
    EndpointWithSecret, TestResponse,
)

from ..api import Api, Call

api = Api("Webhooks")


def _allow_private(call: Call) -> bool:
    return call.rt.settings.private_webhook_urls_allowed


@api.route("GET", "/api/webhooks/endpoints", access="read", response=EndpointList,
           summary="Active webhook endpoints (secrets are never listed)")
def get_endpoints(call: Call):
    return EndpointList(endpoints=[EndpointPublic.model_validate(e) for e in service.list_active(call.session)])


@api.route("POST", "/api/webhooks/endpoints", access="write", configures=True, body=EndpointCreate,
           response=EndpointCreated, status=201, errors=(403,), summary="Register an endpoint; its secret is returned once")
def post_endpoint(call: Call):
    data: EndpointCreate = call.body
    endpoint, secret = service.register(
        call.session, call.tenant_id, url=str(data.url), description=data.description, events=data.events,
        now=call.now, secret_key=call.rt.settings.secret_key, allow_private=_allow_private(call))
    public = EndpointPublic.model_validate(endpoint).model_dump()
    return EndpointCreated(endpoint=EndpointWithSecret(**public, secret=secret))


@api.route("PUT", "/api/webhooks/endpoints/{endpoint_id}", access="write", body=EndpointUpdate,
           response=EndpointResponse, errors=(404,), summary="Change an endpoint's url, description or events")
def put_endpoint(call: Call, endpoint_id: str):
    fields = call.body.model_dump(exclude_unset=True)
    if fields.get("url") is not None:
        fields["url"] = str(call.body.url)
    endpoint = service.update(call.session, endpoint_id, fields, now=call.now,
                              allow_private=_allow_private(call))
    return EndpointResponse(endpoint=EndpointPublic.model_validate(endpoint))


@api.route("DELETE", "/api/webhooks/endpoints/{endpoint_id}", access="write", response=Deleted,
           errors=(404,), summary="Deactivate an endpoint (soft delete)")
def delete_endpoint(call: Call, endpoint_id: str):
    service.deactivate(call.session, endpoint_id, now=call.now)
    return Deleted(deleted=True)


@api.route("POST", "/api/webhooks/endpoints/{endpoint_id}/test", access="write", response=TestResponse,
           errors=(404,), summary="Send a signed webhook.test event now and report the answer")
def post_endpoint_test(call: Call, endpoint_id: str):
    return TestResponse(test=test_send.send_test(call.rt, call.session, endpoint_id))


@api.route("GET", "/api/webhooks/endpoints/{endpoint_id}/deliveries", access="read", query=DeliveryQuery,
           response=DeliveryList, errors=(404,), summary="The delivery log of an endpoint, newest first")
def get_deliveries(call: Call, endpoint_id: str):
    rows = service.deliveries(call.session, endpoint_id, status=call.query.status, limit=call.query.limit)
    attempts = delivery.attempts_of(call.session, [d.id for d in rows])
    return DeliveryList(deliveries=[DeliveryPublic.of(d, attempts[d.id]) for d in rows])


@api.route("POST", "/api/webhooks/deliveries/{delivery_id}/replay", access="write", response=DeliveryResponse,
           errors=(404,), summary="Make one new attempt of a delivery now (same id and event id)")
def post_replay(call: Call, delivery_id: str):
    return DeliveryResponse(delivery=replay.replay(call.rt, call.session, delivery_id).delivery)
