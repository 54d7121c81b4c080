"""Interventions and escalations: listing, manual creation and the review actions."""

from __future__ import annotations

from cs_daemon.decisions import trace
from cs_daemon.decisions.schemas import TraceResponse
from cs_daemon.interventions import service
from cs_daemon.interventions.schemas import (
    DelegateBody, EscalationCreate, EscalationList, EscalationPublic, FlagBody, Flagged, HandleBody, IdStatus,
    InterventionCreate, InterventionCreated, InterventionList, InterventionPublic, InterventionQuery,
    MessageEdit,
    MessageEdited, RejectBody, RollbackBody,
)

from ..api import Api, Call

api = Api("Interventions")


@api.route("GET", "/api/interventions", access="read", query=InterventionQuery, response=InterventionList,
           summary="Interventions, newest planned first (limit 1..200, default 50; status filters)")
def get_interventions(call: Call):
    rows = service.list_recent(call.session, limit=call.query.limit, status=call.query.status)
    return InterventionList(interventions=[InterventionPublic.model_validate(iv) for iv in rows])


@api.route("GET", "/api/interventions/{intervention_id}/trace", access="read", response=TraceResponse,
           errors=(404,), summary="The trace of the engine decision that made an intervention (extension): features, "
                                  "each playbook's verdict, options, agent steps, drafts, choice")
def get_intervention_trace(call: Call, intervention_id: str):
    service.get(call.session, intervention_id)
    return TraceResponse(trace=trace.of_intervention(call.session, intervention_id))


@api.route("POST", "/api/interventions", access="write", body=InterventionCreate, response=InterventionCreated,
           status=201, errors=(404,), summary="Plan an intervention by hand (status planned)")
def post_intervention(call: Call):
    data: InterventionCreate = call.body
    iv = service.create(call.session, call.tenant_id, user_id=data.user_id, playbook_id=str(data.playbook_id),
                        channel=data.channel, message_body=data.message_body, now=call.now, test=call.caller.test)
    return InterventionCreated(id=iv.id, status=iv.status, channel=iv.channel, planned_at=iv.planned_at)


@api.route("PATCH", "/api/interventions/{intervention_id}", access="write", body=MessageEdit, response=MessageEdited,
           errors=(404,), summary="Rewrite the message of a planned intervention; the quality checks run again")
def patch_intervention(call: Call, intervention_id: str):
    iv = service.edit_message(call.session, intervention_id, call.body.message_body, now=call.now)
    return MessageEdited(id=iv.id, status=iv.status, message_body=iv.message_body, quality_checks=iv.quality_checks)


@api.route("PUT", "/api/interventions/{intervention_id}/approve", access="write", response=IdStatus, errors=(404,),
           summary="Approve a planned intervention; the execute pipeline delivers it")
def put_approve(call: Call, intervention_id: str):
    iv = service.approve(call.session, intervention_id, now=call.now)
    return IdStatus(id=iv.id, status=iv.status)


@api.route("PUT", "/api/interventions/{intervention_id}/pause", access="write", response=IdStatus,
           errors=(404, 409), summary="Hold a planned or approved intervention (back to planned)")
def put_pause(call: Call, intervention_id: str):
    iv = service.pause(call.session, intervention_id, now=call.now)
    return IdStatus(id=iv.id, status=iv.status)


@api.route("PUT", "/api/interventions/{intervention_id}/reject", access="write", body=RejectBody,
           response=IdStatus, errors=(404,), summary="Reject a planned intervention")
def put_reject(call: Call, intervention_id: str):
    iv = service.reject(call.session, intervention_id, call.body.reason, now=call.now)
    return IdStatus(id=iv.id, status=iv.status)


@api.route("PUT", "/api/interventions/{intervention_id}/rollback", access="write", body=RollbackBody,
           response=IdStatus, errors=(404,), summary="Roll back approved, sent or delivered work")
def put_rollback(call: Call, intervention_id: str):
    iv = service.rollback(call.session, intervention_id, call.body.reason, now=call.now)
    return IdStatus(id=iv.id, status=iv.status)


@api.route("PUT", "/api/interventions/{intervention_id}/flag", access="write", body=FlagBody, response=Flagged,
           errors=(404,), summary="Flag an intervention for review (status unchanged)")
def put_flag(call: Call, intervention_id: str):
    iv = service.flag(call.session, intervention_id, call.body.reason, now=call.now)
    return Flagged(id=iv.id, flagged=iv.flagged)


@api.route("GET", "/api/escalations", access="read", query=InterventionQuery, response=EscalationList,
           summary="Escalations, newest first (limit 1..200, default 50; status filters)")
def get_escalations(call: Call):
    rows = service.list_recent(call.session, limit=call.query.limit, escalations=True, status=call.query.status)
    return EscalationList(escalations=[EscalationPublic.of(iv) for iv in rows])


@api.route("POST", "/api/escalations", access="write", body=EscalationCreate, response=IdStatus, status=201,
           errors=(404,), summary="Escalate a user to the team (status open)")
def post_escalation(call: Call):
    data: EscalationCreate = call.body
    iv = service.escalate(call.session, call.tenant_id, user_id=data.user_id, playbook_id=str(data.playbook_id),
                          severity=data.severity, reason=data.reason, now=call.now, test=call.caller.test)
    return IdStatus(id=iv.id, status=iv.status)


@api.route("PUT", "/api/escalations/{escalation_id}/handle", access="write", body=HandleBody, response=IdStatus,
           errors=(404,), summary="Record what was done (status handled)")
def put_handle(call: Call, escalation_id: str):
    iv = service.handle(call.session, escalation_id, action_taken=call.body.action_taken, outcome=call.body.outcome,
                        handled_by=call.caller.actor, now=call.now)
    return IdStatus(id=iv.id, status=iv.status)


@api.route("PUT", "/api/escalations/{escalation_id}/delegate", access="write", body=DelegateBody,
           response=IdStatus, errors=(404,), summary="Delegate to a channel: a new intervention enters the pipeline")
def put_delegate(call: Call, escalation_id: str):
    iv = service.delegate(call.session, call.tenant_id, escalation_id, channel=call.body.channel, now=call.now)
    return IdStatus(id=iv.id, status=iv.status)
