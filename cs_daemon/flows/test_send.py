"""Test-send to a webhook endpoint: a signed `webhook.test` delivery of one attempt,
written (committed, so it is in the delivery log), sent now, and reported with the
answer (docs/webhooks.md, "webhook.test"). `POST /api/webhooks/endpoints/{id}/test` and the console's
test button (through that endpoint) are this flow."""

from __future__ import annotations

from http import HTTPStatus

from sqlalchemy.orm import Session

from ..delivery import service as delivery
from ..tenants.models import Tenant
from ..webhooks import service as webhooks
from ..webhooks.schemas import TestResult


def send_test(rt, session: Session, endpoint_id: str) -> TestResult:
    """`session` is the caller's (tenant-scoped) unit of work; the test delivery is
    committed in it before the attempt. With the kill switch on nothing is made: the test
    would wait for the switch and go out long after its answer said it was not sent."""
    if session.get(Tenant, webhooks.get(session, endpoint_id).tenant_id).kill_switch_active:
        return TestResult(success=False, error="the kill switch is on: nothing leaves the service; nothing was sent")
    made = webhooks.send_test(session, endpoint_id, now=rt.now())
    session.commit()
    done = delivery.attempt(rt, made.id, paced=False)
    attempt = delivery.attempts_of(session, [made.id])[made.id][-1:] if done else []
    if not attempt:
        return TestResult(success=False, error="the test delivery could not be sent")
    last = attempt[0]
    text = HTTPStatus(last.status_code).phrase if last.status_code in HTTPStatus._value2member_map_ else None
    return TestResult(success=done == "delivered", status=last.status_code, status_text=text, error=last.error)
