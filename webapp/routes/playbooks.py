"""Playbooks."""

from __future__ import annotations

from cs_daemon.analytics import uplift
from cs_daemon.playbooks import service
from cs_daemon.playbooks.schemas import (
    Archived, PlaybookCreate, PlaybookList, PlaybookPublic, PlaybookWrite, PreviewCount,
    PreviewRequest, StatusChange, StatusChanged, Uplift,
)

from ..api import Api, Call

api = Api("Playbooks")


def _public(playbook, rates: dict | None = None, uplifts: dict | None = None) -> PlaybookPublic:
    public = PlaybookPublic.model_validate(playbook)
    public.success_rate = (rates or {}).get(playbook.id)
    shown = Uplift.model_validate((uplifts or {}).get(playbook.id) or uplift.empty())
    for name in Uplift.model_fields:
        setattr(public, name, getattr(shown, name))
    return public


def _fields(body: PlaybookWrite) -> dict:
    return body.model_dump(exclude_unset=True, exclude_none=False)


@api.route("GET", "/api/playbooks", access="read", response=PlaybookList,
           summary="Every playbook of the tenant, with its observed success rate and uplift")
def get_playbooks(call: Call):
    rates, uplifts = service.success_rates(call.session), uplift.by_playbook(call.session)
    return PlaybookList(playbooks=[_public(p, rates, uplifts) for p in service.list_all(call.session)])


@api.route("POST", "/api/playbooks", access="write", body=PlaybookCreate, response=PlaybookPublic,
           status=201, errors=(403,), summary="Create a playbook (as draft), within the plan's limit")
def post_playbook(call: Call):
    playbook = service.create(call.session, call.tenant_id, _fields(call.body), now=call.now,
                              test=call.caller.test)
    return _public(playbook)


@api.route("PUT", "/api/playbooks/{playbook_id}", access="write", body=PlaybookWrite,
           response=PlaybookPublic, errors=(404,), summary="Change a playbook's fields")
def put_playbook(call: Call, playbook_id: str):
    playbook = service.update(call.session, playbook_id, _fields(call.body), now=call.now)
    return _public(playbook, service.success_rates(call.session), uplift.by_playbook(call.session))


@api.route("DELETE", "/api/playbooks/{playbook_id}", access="write", response=Archived,
           errors=(404,), summary="Archive a playbook (it is kept)")
def delete_playbook(call: Call, playbook_id: str):
    service.set_status(call.session, playbook_id, "archived", now=call.now)
    return Archived(archived=True)


@api.route("PUT", "/api/playbooks/{playbook_id}/status", access="write", body=StatusChange,
           response=StatusChanged, errors=(403, 404),
           summary="Move a playbook to any status (out of the archive only within the plan's limit)")
def put_playbook_status(call: Call, playbook_id: str):
    playbook = service.set_status(call.session, playbook_id, call.body.status, now=call.now)
    return StatusChanged(id=playbook.id, status=playbook.status, status_changed_at=playbook.status_changed_at)


@api.route("POST", "/api/playbooks/preview-count", access="write", body=PreviewRequest,
           response=PreviewCount, summary="How many users an entry-condition tree matches now")
def post_preview_count(call: Call):
    return PreviewCount(matching_users=service.preview_count(call.session, call.body.entry_conditions, now=call.now))
