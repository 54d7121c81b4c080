"""External actions (docs/external-actions.md): action types, dispatch through the one signed
delivery mechanism, the action log, outcomes and expiry (custom events are a flow:
cs_daemon/flows/custom_events.py)."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.validators import validator_for
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .. import crypto
from ..channels import sink, webhook
from ..customers.models import Customer
from ..db import locked
from ..delivery import service as delivery
from ..delivery import states as delivery_states
from ..delivery.models import Delivery
from ..errors import Conflict, InvalidState, NotFound, ValidationFailed, present
from ..integrations import netguard
from ..integrations.http import Outcome
from ..learning import service as learning
from ..outbox import service as outbox
from . import credentials as credentials_
from . import patterns
from .models import ActionType, ExternalAction

EXPIRE_AFTER = timedelta(days=7)
KIND = "dispatch"


def check_schema(schema: dict) -> None:
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise ValidationFailed(f"parameters_schema is not a valid JSON Schema: {exc.message}",
                               [{"field": "parameters_schema", "message": exc.message}]) from None
    try:
        patterns.check(schema)
    except patterns.PatternRefused as exc:
        raise ValidationFailed(f"parameters_schema refused: {exc}",
                               [{"field": "parameters_schema", "message": str(exc)}]) from None


def _check_url(url: str, allow_private: bool, tenant_id: str | None = None,
               credentials: dict | None = None) -> None:
    """A platform's URL template is checked as the credentials fill it (and again at
    every send, as every URL is)."""
    try:
        netguard.check(url if credentials is None else credentials_.fill(url, credentials),
                       allow_private=allow_private, tenant=tenant_id)
    except netguard.UrlRefused as exc:
        raise ValidationFailed(f"delivery_webhook refused: {exc}",
                               [{"field": "delivery_webhook", "message": str(exc)}]) from None


def create_type(session: Session, tenant_id: str, fields: dict, *, now: datetime, secret_key: str,
                allow_private: bool, platform_id: str | None = None,
                credentials: dict | None = None) -> tuple[ActionType, str]:
    """`credentials`: the type is a platform's, its URL a template they fill at dispatch."""
    check_schema(fields["parameters_schema"])
    _check_url(fields["delivery_webhook"], allow_private, tenant_id, credentials)
    if find_type(session, fields["name"]) is not None:
        raise Conflict(f"an action type named {fields['name']!r} already exists")
    secret = secrets.token_hex(32)
    action_type = ActionType(tenant_id=tenant_id, secret_enc=crypto.encrypt(secret_key, secret), active=True,
                             platform_id=platform_id, created_at=now, updated_at=now, **fields)
    session.add(action_type)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"an action type named {fields['name']!r} already exists") from None
    return action_type, secret


def find_type(session: Session, name: str) -> ActionType | None:
    return session.scalars(select(ActionType).where(ActionType.name == name)).first()


def get_type(session: Session, type_id: str) -> ActionType:
    return present(session.get(ActionType, type_id), "action type")


def list_types(session: Session, *, provider: str | None, domain: str | None, active: bool | None) -> list[ActionType]:
    query = select(ActionType).order_by(ActionType.created_at, ActionType.id)
    if provider is not None:
        query = query.where(ActionType.provider == provider)
    if domain is not None:
        query = query.where(ActionType.domain == domain)
    if active is not None:
        query = query.where(ActionType.active.is_(active))
    return list(session.scalars(query))


def update_type(session: Session, type_id: str, fields: dict, *, now: datetime, allow_private: bool,
                credentials: dict | None = None) -> ActionType:
    action_type = get_type(session, type_id)
    if fields.get("parameters_schema") is not None:
        check_schema(fields["parameters_schema"])
    if fields.get("delivery_webhook") is not None:
        _check_url(fields["delivery_webhook"], allow_private, action_type.tenant_id, credentials)
    if fields.get("name") and fields["name"] != action_type.name and find_type(session, fields["name"]):
        raise Conflict(f"an action type named {fields['name']!r} already exists")
    for key, value in fields.items():
        if value is not None or key in ("domain", "estimated_cost_usd"):
            setattr(action_type, key, value)
    action_type.updated_at = now
    return action_type


def deactivate_type(session: Session, type_id: str, *, now: datetime) -> ActionType:
    action_type = get_type(session, type_id)
    action_type.active, action_type.updated_at = False, now
    return action_type


def validate_parameters(action_type: ActionType, parameters: dict) -> None:
    try:
        errors = sorted(patterns.validator(action_type.parameters_schema).iter_errors(parameters),
                        key=lambda e: list(e.absolute_path))
    except patterns.PatternRefused as exc:      # a schema stored before patterns were checked
        raise ValidationFailed(f"the parameters_schema of {action_type.name} cannot be used: {exc}",
                               [{"field": "parameters", "message": str(exc)}]) from None
    if errors:
        details = [{"field": "parameters" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path),
                    "message": e.message} for e in errors]
        raise ValidationFailed(f"parameters do not match the schema of {action_type.name}: {errors[0].message}", details)


def dispatch(session: Session, tenant_id: str, *, type_name: str, user_id: str, parameters: dict,
             reasoning: str | None, confidence: float, now: datetime, test: bool,
             decision_id: str | None = None) -> ExternalAction:
    """Create the action and its signed dispatch delivery, in the caller's transaction. The
    body's `confidence` is the number as a string, as the spec's dispatch body has it."""
    action_type = find_type(session, type_name)
    if action_type is None or not action_type.active:
        raise NotFound(f"no active action type named {type_name!r}")
    customer = session.get(Customer, (tenant_id, user_id))
    if customer is None:
        raise NotFound("user not found")
    validate_parameters(action_type, parameters)
    action = ExternalAction(tenant_id=tenant_id, action_type=action_type.name, action_type_id=action_type.id,
                            provider=action_type.provider, user_id=user_id, status="pending", parameters=parameters,
                            reasoning=reasoning, confidence=confidence, lifecycle_stage=customer.lifecycle_stage,
                            test=test, created_at=now)
    session.add(action)
    session.flush()
    if learning.join_action(session, action, decision_id=decision_id) is None and decision_id is not None:
        raise NotFound("no recommendation for this user with that decision_id awaits an action")
    body = {"action_id": action.id, "action_type": action_type.name, "user_id": user_id, "parameters": parameters,
            "reasoning": reasoning or "", "confidence": str(float(confidence)),
            "tenant_id": tenant_id, "timestamp": now.isoformat()}
    delivery.create(session, tenant_id, kind=KIND, channel=sink.NAME if test else webhook.NAME,
                    url=sink.SINK_URL if test else dispatch_url(action_type),
                    body=body, secret_enc="" if test else action_type.secret_enc, event_type="external_action.dispatch",
                    subject_id=action.id, headers={"X-Service-Action-Id": action.id}, test=test, now=now)
    return action


def dispatch_url(action_type: ActionType) -> str:
    """Where a dispatch goes: a platform type's URL template is a reference, filled from
    the platform's credentials only when the dispatch is sent."""
    url = action_type.delivery_webhook
    if action_type.platform_id and credentials_.is_template(url):
        return credentials_.reference(action_type.platform_id, url)
    return url


def _event(action: ExternalAction, kind: str, now: datetime, **extra) -> tuple[str, dict]:
    return kind, {"action_id": action.id, "action_type": action.action_type, "user_id": action.user_id,
                  "status": action.status, "at": now.isoformat(), **extra}


def on_attempt(session: Session, made: Delivery, outcome: Outcome, final: bool) -> None:
    action = locked(session, ExternalAction, made.subject_id)   # an outcome report may settle it now
    if action is None:
        return
    action.attempts = made.attempts   # an attempt in flight when an outcome settled it counts too
    if action.status not in ("pending", "dispatched"):
        return
    now = made.updated_at
    events = []
    if action.status == "pending":
        action.status, action.dispatched_at = "dispatched", now
        events.append(_event(action, "external_action.dispatched", now))
    if made.status == delivery_states.DELIVERED:
        action.status, action.delivered_at = "delivered", now
    elif made.status == delivery_states.FAILED:
        action.status, action.completed_at = "failed", now
        events.append(_event(action, "external_action.failed", now, error=outcome.error))
    outbox.record_many(session, action.tenant_id, events, now=now, test=action.test)


def get_action(session: Session, action_id: str) -> ExternalAction:
    return present(session.get(ExternalAction, action_id), "external action")


def dispatch_of(session: Session, action_id: str) -> Delivery | None:
    """The signed delivery that carries an action to its partner (None for an unknown id)."""
    return session.scalars(select(Delivery).where(Delivery.kind == KIND, Delivery.subject_id == action_id)
                           .order_by(Delivery.created_at)).first()


def list_actions(session: Session, *, status: str | None, provider: str | None, user_id: str | None,
                 since: datetime | None, limit: int) -> list[ExternalAction]:
    query = select(ExternalAction).order_by(ExternalAction.created_at.desc(), ExternalAction.id.desc()).limit(limit)
    for column, value in ((ExternalAction.status, status), (ExternalAction.provider, provider),
                          (ExternalAction.user_id, user_id)):
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(ExternalAction.created_at > since)
    return list(session.scalars(query))


# the states an outcome may be reported in: not once delivery failed for good or the
# action expired (docs/external-actions.md, "States")
OUTCOME_FROM = ("pending", "dispatched", "delivered")


def report_outcome(session: Session, action_id: str, *, status: str, result: dict, now: datetime) -> ExternalAction:
    """Record the outcome, once: the action is read locked, so of concurrent reports one
    records it and the others find it reported (409). An action settled otherwise (failed,
    expired) takes none; a dispatch not yet delivered is let go: the outcome settles it."""
    action = locked(session, ExternalAction, action_id)
    if action is None:
        raise NotFound("external action not found")
    if action.outcome_status is not None:
        raise Conflict("an outcome was already reported for this action")
    if action.status not in OUTCOME_FROM:
        raise InvalidState(f"an outcome cannot be reported for a {action.status} action: "
                           f"only one {' or '.join(OUTCOME_FROM)}")
    delivery.cancel(session, subject_id=action.id, kind=KIND, now=now)
    action.outcome_status, action.outcome_result, action.completed_at = status, result, now
    success = status in ("completed", "partial")
    action.status = "completed" if success else "failed"
    kind = "external_action.completed" if success else "external_action.failed"
    learning.on_action_outcome(session, action, now=now)
    outbox.record_many(session, action.tenant_id, [_event(action, kind, now, outcome_status=status, result=result)],
                       now=now, test=action.test)
    return action


def _expiring(now: datetime) -> tuple:
    return ExternalAction.status == "delivered", ExternalAction.delivered_at <= now - EXPIRE_AFTER


def expire(session: Session, *, now: datetime) -> int:
    """Delivered actions without an outcome 7 days later become expired (the tenant's in
    a tenant-scoped session, as the expiry sweep runs it; every tenant's otherwise)."""
    rows = session.scalars(select(ExternalAction).where(*_expiring(now))).all()
    for action in rows:
        action.status, action.completed_at = "expired", now
    return len(rows)


def tenants_with_expiring(now: datetime):
    """A select of the tenants with actions to expire now."""
    return select(ExternalAction.tenant_id).where(*_expiring(now)).distinct()
