"""Decisions: the dry run."""

from __future__ import annotations

from cs_daemon.decisions import service
from cs_daemon.decisions.schemas import DryRunRequest, DryRunResponse

from ..api import Api, Call

api = Api("Decisions")


@api.route("POST", "/api/interventions/dry-run", access="decide", body=DryRunRequest, response=DryRunResponse,
           errors=(404,), summary="The decision the engine would take for a user now; nothing is created")
def post_dry_run(call: Call):
    made, customer = service.dry_run(call.session, call.body.user_id, now=call.now)
    return DryRunResponse.of(made, customer)
