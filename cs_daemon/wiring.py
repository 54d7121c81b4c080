"""The composition root: the one place that puts the service together (after
cosmicpython's bootstrap.py). It registers, explicitly and once per process, what each
part needs from the others:

- the channels (email, in_app, webhook, crm, and the test-mode sink), the URL references
  the webhook channel and the secret references the delivery mechanism resolve at send
  time;
- the delivery listeners (interventions, webhook endpoints, external actions) and the
  guard that holds back withdrawn work;
- the email composers of the team invitation and the console's sign-in link;
- the domain event handlers, run in the publisher's transaction (events ingested ->
  decisions owed; events stored -> outcomes settled; outbox rows written -> webhooks) or
  after it commits (deliveries due -> the send job; decisions owed -> the decide job; an
  in-app message withdrawn -> the user's streams woken);
- the job actors and the periodic jobs.

Nothing registers itself by being imported. `cs serve`, `cs worker`, the dramatiq worker
entry (cs_daemon/jobs/entry.py), gunicorn (through `webapp.create_app`), every `cs`
command and the tests build their runtime with `bootstrap` (docs/architecture.md).
Adding a channel or a job is a module and a line here.
"""

from __future__ import annotations

import threading

from . import domain_events
from .channels import base as channels
from .channels import crm, email, in_app, sink, webhook
from .clock import Clock
from .config import Settings
from .console import mail as console_mail
from .customers import actors as customer_jobs
from .decisions import actors as decision_jobs
from .decisions import requests as decision_requests
from .delivery import actors as delivery_jobs
from .delivery import service as delivery
from .external import credentials as platform_urls
from .external import service as external
from .interventions import actors as intervention_jobs
from .interventions import outcomes
from .interventions import pipeline
from .jobs import registry
from .jobs.scheduler import Periodic
from .outbox import actors as event_log_jobs
from .runtime import Runtime
from .team import mail as team_mail
from .tenants import actors as tenant_jobs
from .webhooks import service as webhooks

_lock = threading.Lock()
_wired = False


def bootstrap(settings: Settings, clock: Clock | None = None) -> Runtime:
    """The runtime of this process, with every part wired."""
    wire()
    return Runtime(settings, clock)


def wire() -> None:
    """Register every part (once per process; later calls do nothing)."""
    global _wired
    with _lock:
        if _wired:
            return
        _channels()
        _listeners()
        _domain_events()
        _jobs()
        _wired = True


def _channels() -> None:
    channels.register(email.CHANNEL)
    channels.register(in_app.CHANNEL)
    channels.register(webhook.CHANNEL)
    channels.register(crm.CHANNEL)
    channels.register(sink.CHANNEL)
    webhook.URL_REFS[platform_urls.SCHEME] = platform_urls.resolve
    delivery.SECRET_REFS[crm.NAME] = crm.secret
    email.COMPOSERS[team_mail.KIND] = team_mail.compose
    email.COMPOSERS[console_mail.KIND] = console_mail.compose


def _listeners() -> None:
    delivery.listen(pipeline.KIND, pipeline.on_attempt, lock_first=pipeline.lock_subject)
    delivery.GUARDS[pipeline.KIND] = pipeline.still_wanted
    delivery.listen("event", webhooks.on_gone, when=webhooks.is_gone)
    delivery.listen("test", webhooks.on_gone, when=webhooks.is_gone)
    delivery.listen(external.KIND, external.on_attempt)


def _domain_events() -> None:
    domain_events.handle(domain_events.EventsIngested, decision_requests.owe_after_ingest)
    domain_events.handle(domain_events.EventsStored, outcomes.settle_after_ingest)
    domain_events.handle(domain_events.OutboxRowsWritten, webhooks.fan_out_written)
    domain_events.handle_after_commit(domain_events.DeliveryDue, delivery_jobs.send_soon)
    domain_events.handle_after_commit(domain_events.DeliveryRetryDue, delivery_jobs.send_later)
    domain_events.handle_after_commit(domain_events.DecisionsOwed, decision_jobs.decide_soon)
    domain_events.handle_after_commit(domain_events.InAppInterventionWithdrawn, in_app.wake_streams)


def _jobs() -> None:
    registry.ACTORS[:] = [
        delivery_jobs.send_deliveries, delivery_jobs.sweep_deliveries,
        decision_jobs.decide_owed, decision_jobs.sweep_decisions, decision_jobs.sweep_traces,
        customer_jobs.sweep_scores, intervention_jobs.sweep_outcomes, tenant_jobs.sweep_expiries,
        event_log_jobs.sweep_event_log,
    ]
    registry.PERIODIC[:] = [
        Periodic("sweep_scores", customer_jobs.SWEEP_EVERY_SECONDS, customer_jobs.sweep_scores.send),
        Periodic("sweep_deliveries", delivery_jobs.SWEEP_EVERY_SECONDS, delivery_jobs.sweep_deliveries.send),
        Periodic("sweep_decisions", decision_jobs.SWEEP_EVERY_SECONDS, decision_jobs.sweep_decisions.send),
        Periodic("sweep_traces", decision_jobs.TRACE_SWEEP_EVERY_SECONDS, decision_jobs.sweep_traces.send),
        Periodic("sweep_outcomes", intervention_jobs.SWEEP_EVERY_SECONDS, intervention_jobs.sweep_outcomes.send),
        Periodic("sweep_expiries", tenant_jobs.SWEEP_EVERY_SECONDS, tenant_jobs.sweep_expiries.send),
        Periodic("sweep_event_log", event_log_jobs.SWEEP_EVERY_SECONDS, event_log_jobs.sweep_event_log.send),
    ]
