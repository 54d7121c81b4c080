"""GET /metrics (docs/operations.md, "Metrics"): refused without CS_METRICS_TOKEN, and
each family moves when its thing happens: a request, an ingest, a decision, a delivery,
a rate-limit refusal, a sweep; the gauges read at scrape time (deliveries due and overdue,
job queues) count what is there."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from cs_daemon.decisions import requests
from cs_daemon.decisions.models import DecisionRequest
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.jobs import sweeps
from cs_daemon.outbox import service as outbox
from cs_daemon.runtime import Runtime
from tests.conftest import NO_HOLDOUT, auth
from webapp import create_app

TOKEN = "metrics-token-for-tests"


@pytest.fixture
def mrt(settings, clock):
    return Runtime(settings.model_copy(update={"cs_metrics_token": TOKEN, "cs_health_rate_limit": 2}), clock)


@pytest.fixture
def mclient(mrt):
    return create_app(runtime=mrt).test_client()


def scrape(client) -> dict[tuple, float]:
    resp = client.get("/metrics", headers=auth(TOKEN))
    assert resp.status_code == 200, resp.data
    assert resp.content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(resp.get_data(as_text=True)):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_are_404_without_the_setting(client):
    resp = client.get("/metrics", headers=auth(TOKEN))
    assert resp.status_code == 404 and resp.json == {"error": "no such endpoint", "code": "not_found"}


@pytest.mark.parametrize("headers", [{}, auth("wrong"), auth(TOKEN + "x"), {"Authorization": TOKEN}])
def test_metrics_refused_without_their_token(mclient, headers):
    resp = mclient.get("/metrics", headers=headers)
    assert resp.status_code == 401 and resp.json["code"] == "unauthorized"
    assert resp.headers["WWW-Authenticate"] == "Bearer"      # as docs/operations.md gives it
    assert b"cs_http_requests_total" not in resp.data


def test_a_request_counts_under_its_route_with_its_latency(mclient, make_tenant):
    tenant = make_tenant()
    before = scrape(mclient)
    for user in ("a", "b"):
        assert mclient.get(f"/api/customers/{user}", headers=auth(tenant.key)).status_code == 404
    after = scrape(mclient)
    labels = {"method": "GET", "route": "/api/customers/<user_id>"}
    assert value(after, "cs_http_requests_total", status="404", **labels) - \
        value(before, "cs_http_requests_total", status="404", **labels) == 2
    assert value(after, "cs_http_request_duration_seconds_count", **labels) - \
        value(before, "cs_http_request_duration_seconds_count", **labels) == 2
    assert not any(dict(k[1]).get("route") == "/api/customers/a" for k in after)   # no raw paths


def test_an_ingest_counts_accepted_and_duplicates(mclient, make_tenant):
    tenant = make_tenant()
    before = scrape(mclient)
    event = {"user_id": "u1", "event": "opened", "idempotency_key": "k-1"}
    assert mclient.post("/api/track", headers=auth(tenant.key), json={"events": [event]}).status_code == 200
    assert mclient.post("/api/track", headers=auth(tenant.key), json={"events": [event, event]}).status_code == 200
    after = scrape(mclient)
    assert value(after, "cs_events_ingested_total", outcome="accepted") - \
        value(before, "cs_events_ingested_total", outcome="accepted") == 1
    assert value(after, "cs_events_ingested_total", outcome="duplicate") - \
        value(before, "cs_events_ingested_total", outcome="duplicate") == 2


def test_a_decision_counts_by_decided_by_and_action(mclient, mrt, make_tenant):
    tenant = make_tenant()
    h = auth(tenant.key)
    pid = mclient.post("/api/playbooks", headers=h, json={
        "name": "welcome", "entry_conditions": {"trigger": {"event": "signed_up"}},
        "strategy_hints": {"preferred_channel": "email"}}).json["id"]
    mclient.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"})
    before = scrape(mclient)
    mclient.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "u1@x.io"}},
        {"user_id": "u1", "event": "signed_up"}]})
    with mrt.session(tenant.id) as s:
        owed = [r.id for r in s.scalars(select(DecisionRequest))]
    for request_id in owed:
        requests.process(mrt, request_id)
    after = scrape(mclient)
    assert value(after, "cs_decisions_total", decided_by="rules", action="send") - \
        value(before, "cs_decisions_total", decided_by="rules", action="send") == 1


def test_a_delivery_counts_and_due_and_overdue_are_read_at_scrape(mclient, mrt, make_tenant, receiver, clock):
    tenant = make_tenant("Hooks", plan_tier="growth")
    resp = mclient.post("/api/webhooks/endpoints", headers=auth(tenant.key), json={"url": receiver.url})
    assert resp.status_code == 201, resp.json
    with mrt.session(tenant.id) as s:
        ids = [outbox.record(s, tenant.id, "user.risk_changed", {"user_id": f"u{i}"}, now=mrt.now()) for i in range(2)]
        made = [d.id for d in s.scalars(select(Delivery).where(Delivery.subject_id.in_(ids)))]
    clock.advance(seconds=600)   # both are overdue now (due ten minutes ago)
    before = scrape(mclient)
    assert value(before, "cs_deliveries_due", channel="event") == 2
    assert value(before, "cs_deliveries_overdue", channel="event") == 2
    assert delivery.attempt(mrt, made[0]) == "delivered"
    after = scrape(mclient)
    assert value(after, "cs_delivery_attempts_total", channel="event", status="delivered") - \
        value(before, "cs_delivery_attempts_total", channel="event", status="delivered") == 1
    assert value(after, "cs_deliveries_due", channel="event") == 1
    assert value(after, "cs_deliveries_overdue", channel="event") == 1
    assert ("cs_job_queue_ready", (("queue", "default"),)) in after


def test_an_interventions_delivery_counts_under_its_channel_and_a_learned_choice_under_the_learner(
        mclient, mrt, make_tenant, receiver):
    tenant = make_tenant("Crew", plan_tier="growth", config=dict(NO_HOLDOUT))
    h = auth(tenant.key)
    mclient.patch("/api/settings", headers=h, json={"approvalMode": "full_auto"})
    assert mclient.post("/api/webhooks/endpoints", headers=h, json={"url": receiver.url,
                                                                    "events": ["user.responded"]}).status_code == 201
    for name in ("tour", "checklist"):   # two of the same priority: the learner picks
        pid = mclient.post("/api/playbooks", headers=h, json={
            "name": name, "entry_conditions": {"trigger": {"event": "signed_up"}},
            "strategy_hints": {"priority": 2, "preferred_channel": "webhook"}}).json["id"]
        mclient.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"})
    before = scrape(mclient)
    mclient.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "signed_up"}]})
    with mrt.session(tenant.id) as s:
        owed = [r.id for r in s.scalars(select(DecisionRequest))]
    for request_id in owed:
        requests.process(mrt, request_id)
    with mrt.session(tenant.id) as s:
        [made] = s.scalars(select(Delivery.id).where(Delivery.kind == "channel"))
    due = scrape(mclient)
    assert value(due, "cs_decisions_total", decided_by="learner", action="send") - \
        value(before, "cs_decisions_total", decided_by="learner", action="send") == 1
    assert value(due, "cs_deliveries_due", channel="webhook") == 1
    assert delivery.attempt(mrt, made) == "delivered"
    after = scrape(mclient)
    assert value(after, "cs_delivery_attempts_total", channel="webhook", status="delivered") - \
        value(before, "cs_delivery_attempts_total", channel="webhook", status="delivered") == 1


def test_rate_limit_refusals_count(mclient):
    before = scrape(mclient)
    codes = [mclient.get("/api/health").status_code for _ in range(3)]
    assert codes[-1] == 429
    after = scrape(mclient)
    assert value(after, "cs_rate_limit_refusals_total", limit="address") - \
        value(before, "cs_rate_limit_refusals_total", limit="address") == 1


def test_a_sweep_counts_its_duration_and_each_failing_tenant(mclient, mrt):
    before = scrape(mclient)

    def work(tenant_id):
        if tenant_id == "t-bad":
            raise RuntimeError("broken")
        return 1

    sweeps.for_each_tenant(mrt, "sweep_metrics_test", ["t-ok", "t-bad"], work)
    after = scrape(mclient)
    assert value(after, "cs_sweep_duration_seconds_count", sweep="sweep_metrics_test") - \
        value(before, "cs_sweep_duration_seconds_count", sweep="sweep_metrics_test") == 1
    assert value(after, "cs_sweep_tenant_failures_total", sweep="sweep_metrics_test", tenant_id="t-bad") - \
        value(before, "cs_sweep_tenant_failures_total", sweep="sweep_metrics_test", tenant_id="t-bad") == 1
    assert value(after, "cs_sweep_tenant_failures_total", sweep="sweep_metrics_test", tenant_id="t-ok") == 0


def test_llm_calls_and_tokens_count(mclient, settings):
    from cs_daemon.integrations.llm import MessageWriter
    from tests.support.openai_server import OpenAIServer, Reply, model_answer

    model = OpenAIServer(script=[model_answer("Hi Ada", "Because"), Reply(status=500)])
    try:
        writer = MessageWriter.from_settings(settings.model_copy(update={
            "openai_base_url": model.base_url, "openai_model": model.model, "openai_api_key": "sk-test"}))
        before = scrape(mclient)
        for _ in range(2):
            writer.write(channel="email", user={"name": "Ada"}, playbook={"name": "p"}, brand=None,
                         decision_reasoning="r", template_message="Hello")
        after = scrape(mclient)
    finally:
        model.close()
    assert value(after, "cs_llm_calls_total", outcome="ok") - value(before, "cs_llm_calls_total", outcome="ok") == 1
    assert value(after, "cs_llm_calls_total", outcome="unavailable") - \
        value(before, "cs_llm_calls_total", outcome="unavailable") == 1
    assert value(after, "cs_llm_tokens_total", kind="prompt") - value(before, "cs_llm_tokens_total", kind="prompt") == 10
    assert value(after, "cs_llm_tokens_total", kind="completion") - \
        value(before, "cs_llm_tokens_total", kind="completion") == 10
