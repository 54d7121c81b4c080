"""External actions: action types, dispatches and their outcomes, custom events."""

from __future__ import annotations

from pydantic import ValidationError

from cs_daemon.external import platforms, service
from cs_daemon.external.schemas import (
    Accepted, ActionCreate, ActionList, ActionPublic, ActionQuery, ActionResponse, ActionTypeCreate,
    ActionTypeCreated, ActionTypeCreatedResponse, ActionTypeFields, ActionTypeList, ActionTypePublic,
    ActionTypeQuery, ActionTypeResponse, ConnectBody, CustomEvent, CustomEventBatch, CustomEventResult, Deactivated,
    OutcomeRecorded, OutcomeReport, PlatformConnected, PlatformList, PlatformResponse,
)
from cs_daemon.flows import custom_events
from cs_daemon.schemas import Wire

from ..api import Api, Call, _loc

api = Api("External actions")

# the confidence of an action created by hand: the caller chose it (docs/api.md)
BY_HAND = 1.0


def _fields(model) -> dict:
    fields = model.model_dump(exclude_unset=True)
    if fields.get("delivery_webhook") is not None:
        fields["delivery_webhook"] = str(model.delivery_webhook)
    return fields


def _allow_private(call: Call) -> bool:
    return call.rt.settings.private_webhook_urls_allowed


@api.route("POST", "/api/external/action-types", access="manage", configures=True, body=ActionTypeCreate,
           response=ActionTypeCreatedResponse, status=201, errors=(409,),
           summary="Register an action type; its webhook_secret is returned once")
def post_action_type(call: Call):
    action_type, secret = service.create_type(call.session, call.tenant_id, _fields(call.body), now=call.now,
                                              secret_key=call.rt.settings.secret_key,
                                              allow_private=_allow_private(call))
    return ActionTypeCreatedResponse(action_type=ActionTypeCreated(id=action_type.id, name=action_type.name,
                                                                   webhook_secret=secret))


@api.route("GET", "/api/external/action-types", access="read", query=ActionTypeQuery, response=ActionTypeList,
           summary="Action types (never their secrets), by provider, domain, active")
def get_action_types(call: Call):
    q = call.query
    rows = service.list_types(call.session, provider=q.provider, domain=q.domain, active=q.active)
    return ActionTypeList(action_types=[ActionTypePublic.model_validate(t) for t in rows])


@api.route("PUT", "/api/external/action-types/{type_id}", access="manage", body=ActionTypeFields,
           response=ActionTypeResponse, errors=(404, 409), summary="Change any field of an action type")
def put_action_type(call: Call, type_id: str):
    action_type = service.update_type(call.session, type_id, _fields(call.body), now=call.now,
                                      allow_private=_allow_private(call))
    return ActionTypeResponse(action_type=ActionTypePublic.model_validate(action_type))


@api.route("DELETE", "/api/external/action-types/{type_id}", access="manage", response=Deactivated, errors=(404,),
           summary="Deactivate an action type (soft delete)")
def delete_action_type(call: Call, type_id: str):
    service.deactivate_type(call.session, type_id, now=call.now)
    return Deactivated(deactivated=True)


@api.route("POST", "/api/external/actions", access="manage", body=ActionCreate, response=ActionResponse,
           status=201, errors=(404,), summary="Dispatch an action of a type to its delivery webhook")
def post_action(call: Call):
    data: ActionCreate = call.body
    action = service.dispatch(call.session, call.tenant_id, type_name=data.action_type, user_id=data.user_id,
                              parameters=data.parameters, reasoning=None, confidence=BY_HAND, now=call.now,
                              test=call.caller.test, decision_id=data.decision_id)
    return ActionResponse(action=ActionPublic.model_validate(action))


@api.route("GET", "/api/external/actions", access="read", query=ActionQuery, response=ActionList,
           summary="The dispatch log, newest first (limit 1..100, default 50)")
def get_actions(call: Call):
    q = call.query
    rows = service.list_actions(call.session, status=q.status, provider=q.provider, user_id=q.user_id,
                                since=q.since, limit=q.limit)
    return ActionList(actions=[ActionPublic.model_validate(a) for a in rows])


@api.route("POST", "/api/external/actions/{action_id}/outcome", access="manage", body=OutcomeReport,
           response=OutcomeRecorded, errors=(404, 409), summary="Report what became of an action (once)")
def post_outcome(call: Call, action_id: str):
    action = service.report_outcome(call.session, action_id, status=call.body.status, result=call.body.result,
                                    now=call.now)
    return OutcomeRecorded(recorded=True, action_id=action.id, outcome_status=action.outcome_status)


@api.route("POST", "/api/external/events", access="ingest", body=CustomEventBatch, response=CustomEventResult,
           summary="Push up to 100 custom events; each is validated on its own")
def post_custom_events(call: Call):
    accepted, errors = [], []
    for index, raw in enumerate(call.body.events):
        try:
            accepted.append(CustomEvent.model_validate(raw if isinstance(raw, dict) else {"_": raw}))
        except ValidationError as exc:
            errors += [{"index": index, "field": _loc(e["loc"]) or "event", "message": e["msg"]} for e in exc.errors()]
    over_limit = custom_events.ingest_custom(call.session, call.tenant_id, accepted, now=call.now,
                                             test=call.caller.test)[1] if accepted else 0
    rejected = len(call.body.events) - len(accepted)
    return _with_over_limit(CustomEventResult(accepted=len(accepted) - over_limit, rejected=rejected,
                                              errors=errors), over_limit)


@api.route("POST", "/api/external/events/emit", access="ingest", body=CustomEvent, response=Accepted,
           summary="Push one custom event")
def post_custom_event(call: Call):
    over_limit = custom_events.ingest_custom(call.session, call.tenant_id, [call.body], now=call.now,
                                             test=call.caller.test)[1]
    return _with_over_limit(Accepted(accepted=1 - over_limit), over_limit)


def _with_over_limit(answer: Wire, over_limit: int) -> dict:
    """The answer, with `over_limit` only when the plan's limit left events out: the
    contract's shapes are exactly theirs otherwise (docs/external-actions.md)."""
    body = answer.model_dump(exclude={"over_limit"})
    return body | {"over_limit": over_limit} if over_limit else body


@api.route("GET", "/api/external/platforms", access="read", response=PlatformList,
           summary="Pre-built platform connectors and whether this tenant is connected")
def get_platforms(call: Call):
    return PlatformList(platforms=platforms.list_platforms(call.session))


@api.route("POST", "/api/external/platforms/{platform_id}/connect", access="admin", body=ConnectBody,
           response=PlatformConnected, errors=(404, 409),
           summary="Connect a platform: its action types are registered with these credentials")
def post_platform_connect(call: Call, platform_id: str):
    made, secrets = platforms.connect(call.session, call.tenant_id, platform_id, call.body.credentials,
                                      now=call.now, secret_key=call.rt.settings.secret_key,
                                      allow_private=_allow_private(call))
    return PlatformConnected(platform=made, webhook_secrets=secrets)


@api.route("POST", "/api/external/platforms/{platform_id}/disconnect", access="admin", response=PlatformResponse,
           errors=(404,), summary="Disconnect a platform: its action types are deactivated")
def post_platform_disconnect(call: Call, platform_id: str):
    return PlatformResponse(platform=platforms.disconnect(call.session, platform_id, now=call.now))
