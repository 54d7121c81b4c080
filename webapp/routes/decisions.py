"""Decisions: the dry run and recommendations."""

from __future__ import annotations

from cs_daemon.decisions import evaluation, recommend, service
from cs_daemon.decisions.schemas import (DryRunRequest, DryRunResponse, EvaluateRequest, EvaluateResponse,
                                         RecommendRequest, RecommendResponse)

from ..api import Api, Call

api = Api("Decisions")


# No transaction of its own (it writes nothing but the key's last use, at once): the
# agent's token count, in a unit of work of its own, must not wait on a lock the request
# holds (SQLite's one writer) for the model's whole run.
@api.route("POST", "/api/interventions/dry-run", access="decide", body=DryRunRequest, response=DryRunResponse,
           atomic=False, errors=(404,),
           summary="The decision the engine would take for a user now; nothing is created")
def post_dry_run(call: Call):
    made, customer, agent, trace = service.dry_run_with_agent(call.session, call.body.user_id, now=call.now,
                                                              writer=call.rt.writer)
    return DryRunResponse.of(made, customer, agent, trace)


@api.route("POST", "/api/decisions/recommend", access="decide", body=RecommendRequest, response=RecommendResponse,
           errors=(404,), summary="Which of the available actions to take for a user, learned from outcomes")
def post_recommend(call: Call):
    data: RecommendRequest = call.body
    return recommend.recommend(call.session, call.tenant_id, user_id=data.user_id, available=data.available_actions,
                               domain=data.domain, context=data.context, now=call.now,
                               test=call.caller.test)


@api.route("POST", "/api/decisions/evaluate", access="decide_or_read", body=EvaluateRequest, response=EvaluateResponse,
           summary="How each action, uniform random and the learned policy would have done on logged recommendations")
def post_evaluate(call: Call):
    return evaluation.evaluate_policies(call.session, since=call.body.since, domain=call.body.domain)
