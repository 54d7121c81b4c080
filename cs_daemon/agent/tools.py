"""The agent's tools: read-only views of one user and of the options the rules allow,
a message draft, and the two final answers (`decide`, `no_action`). Nothing here writes,
sends or changes a setting; every result is JSON data, and whatever came from users or
tenants (traits, event properties, names, message text) reaches the model only inside
these results. docs/ai.md, "The agent", lists them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..customers.models import Customer, Event
from ..engine.decisions import Decision, PlaybookSpec
from ..interventions.models import Intervention
from .run import AgentRun

MAX_EVENTS = 20
MAX_HISTORY = 20
MAX_TEXT = 500
MAX_ITEMS = 50
SUMMARY_CHARS = 300
PROFILE_FIELDS = ("name", "company", "role", "team_size", "locale", "lifecycle_stage", "health",
                  "activation_score", "engagement_score", "expansion_score", "risk_level", "last_activity_at",
                  "created_at")

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}")
# `pass` not followed by a letter (pass, pass_hash, password, passwd), so a check's
# `passed` and `passed_all` stay readable
_SECRET_KEY = re.compile(r"pass(word|wd|phrase)?(?![a-z])|secret|token|api[_-]?key|authori[sz]ation|credential|"
                         r"private[_-]?key|cookie", re.IGNORECASE)


def scrub(value: Any, depth: int = 0) -> Any:
    """The value with e-mail addresses replaced and the values of secret-looking keys
    hidden; long texts and collections cut short."""
    if isinstance(value, str):
        text = _EMAIL.sub("[email]", value)
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {scrub(str(k))[:80]: "[hidden]" if _SECRET_KEY.search(str(k)) else scrub(v, depth + 1)
                for k, v in list(value.items())[:MAX_ITEMS]}
    if isinstance(value, (list, tuple)):
        return [scrub(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
    if isinstance(value, datetime):
        return value.isoformat()
    return scrub(str(value), depth)


def summary(text: str) -> str:
    text = scrub(text)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


def _function(name: str, description: str, properties: dict | None = None, required: tuple = ()) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties or {}, "required": list(required),
                       "additionalProperties": False}}}


TOOLS = [
    _function("get_customer", "The user's profile, scores, lifecycle stage, traits and opted-out channels."),
    _function("get_recent_events", f"The user's most recent events, newest first (at most {MAX_EVENTS}).",
              {"limit": {"type": "integer", "minimum": 1, "maximum": MAX_EVENTS}}),
    _function("get_history", "The interventions the user already received, with their status and outcome."),
    _function("list_options", "The options the rules allow now, each with its option_id and the learner's estimate."),
    _function("get_playbook", "A playbook's goal, tone and hints.",
              {"playbook_id": {"type": "string"}}, ("playbook_id",)),
    _function("draft_message", "Write the message of a send option and run the quality checks on it.",
              {"option_id": {"type": "string"}}, ("option_id",)),
    _function("decide", "Final answer: take this option.",
              {"option_id": {"type": "string"}, "reasoning": {"type": "string"},
               "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
              ("option_id", "reasoning", "confidence")),
    _function("no_action", "Final answer: do nothing for this user now.",
              {"reason": {"type": "string"}}, ("reason",)),
]
NAMES = frozenset(t["function"]["name"] for t in TOOLS)
FINAL = frozenset({"decide", "no_action"})


@dataclass
class Outcome:
    result: dict            # what the model reads (JSON)
    summary: str            # one line for the step's record and the agent.action event
    final: bool = False     # decide or no_action was accepted: the run ends


class ToolError(Exception):
    """A tool's refusal, sent back to the model as a result: the run goes on."""


@dataclass
class Toolbox:
    """The tools of one decision for one user. `draft(option)` writes a message for a send
    option (the message writer and its quality checks)."""

    session: Session
    customer: Customer
    decision: Decision
    specs: tuple[PlaybookSpec, ...]
    draft: Callable[[dict], Any]
    run: AgentRun

    def __post_init__(self):
        self.options = {o["option_id"]: o for o in self.decision.options}

    def call(self, name: str, arguments: dict) -> Outcome:
        try:
            return getattr(self, f"_{name}")(**arguments)
        except ToolError as exc:
            return Outcome({"error": str(exc)}, f"error: {exc}")
        except TypeError:    # arguments the tool does not take, or one it needs missing
            return Outcome({"error": f"wrong arguments for {name}"}, f"error: wrong arguments for {name}")

    # -- read-only --------------------------------------------------------------------------

    def _get_customer(self) -> Outcome:
        c = self.customer
        profile = {"user_id": c.id, **{f: getattr(c, f) for f in PROFILE_FIELDS},
                   "has_email": bool(c.email), "opted_out": list(c.opted_out or []), "traits": c.traits or {}}
        return Outcome(scrub(profile), f"profile: lifecycle {c.lifecycle_stage}, risk {c.risk_level}, "
                                       f"health {c.health}")

    def _get_recent_events(self, limit: int = MAX_EVENTS) -> Outcome:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ToolError("limit must be an integer")
        rows = self.session.scalars(select(Event).where(Event.user_id == self.customer.id)
                                    .order_by(Event.timestamp.desc()).limit(max(1, min(limit, MAX_EVENTS))))
        events = [{"event": e.event, "timestamp": e.timestamp, "properties": e.properties or {}} for e in rows]
        names = sorted({e["event"] for e in events})
        return Outcome({"events": scrub(events)}, f"{len(events)} events ({', '.join(names[:5])})")

    def _get_history(self) -> Outcome:
        names = {pb.id: pb.name for pb in self.specs}
        rows = self.session.scalars(select(Intervention).where(Intervention.user_id == self.customer.id)
                                    .order_by(Intervention.planned_at.desc()).limit(MAX_HISTORY))
        items = [{"intervention_id": iv.id, "playbook_id": iv.playbook_id, "playbook": names.get(iv.playbook_id),
                  "channel": iv.channel, "status": iv.status, "outcome": iv.outcome, "planned_at": iv.planned_at,
                  "sent_at": iv.sent_at} for iv in rows]
        done = sum(1 for i in items if i["outcome"] == "positive")
        return Outcome({"interventions": scrub(items)}, f"{len(items)} interventions, {done} with a positive outcome")

    def _list_options(self) -> Outcome:
        keys = ("option_id", "playbook_id", "playbook", "action", "channel", "action_type", "confidence",
                "priority", "success_rate", "estimate")
        items = [{k: o.get(k) for k in keys} for o in self.decision.options]
        return Outcome({"options": scrub(items)}, f"{len(items)} options: " + ", ".join(self.options))

    def _get_playbook(self, playbook_id: str) -> Outcome:
        pb = next((p for p in self.specs if p.id == playbook_id), None)
        if pb is None:
            raise ToolError(f"no active playbook {playbook_id!r}")
        hints = pb.strategy_hints or {}
        data = {"playbook_id": pb.id, "name": pb.name, "lifecycle_area": pb.lifecycle_area,
                "success_rate": pb.success_rate,
                "eligible_now": any(o["playbook_id"] == pb.id for o in self.decision.options),
                "channels": (pb.constraints or {}).get("channels"),
                **{k: hints.get(k) for k in ("goal", "tone", "cta_url", "preferred_channel", "priority")
                   if hints.get(k) is not None}}
        return Outcome(scrub(data), f"playbook {pb.name}")

    def _draft_message(self, option_id: str) -> Outcome:
        option = self._eligible(option_id)
        if option["action"] != "send":
            raise ToolError(f"option {option_id!r} sends no message ({option['action']})")
        draft = self.draft(option)
        self.run.tokens += getattr(draft, "tokens", 0) or 0     # the writer's call counts against the budget
        checks = [{"check": c["check"], "passed": c["passed"], "detail": c.get("detail")} for c in draft.checks]
        self.run.drafts.append({"option_id": option_id, "message": draft.message, "checks": draft.checks,
                                "source": draft.source, "reasoning": draft.reasoning})
        passed = all(c["passed"] for c in checks)
        return Outcome(scrub({"option_id": option_id, "channel": option["channel"], "message": draft.message,
                              "checks": checks, "passed_all": passed}),
                       f"draft for {option_id} ({len(draft.message)} characters, "
                       f"{'all checks passed' if passed else 'a check failed'})")

    # -- final answers ----------------------------------------------------------------------

    def _decide(self, option_id: str, reasoning: str, confidence: float | int | None = None) -> Outcome:
        if not isinstance(option_id, str) or option_id not in self.options:
            self.run.refused += 1
            raise ToolError(f"option {option_id!r} is not allowed now; choose one option_id of list_options")
        if not isinstance(reasoning, str) or not reasoning.strip():
            raise ToolError("reasoning must be a non-empty string")
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float, type(None))):
            raise ToolError("confidence must be a number between 0 and 1")
        run = self.run
        run.decided_by, run.choice, run.reasoning = "agent", option_id, reasoning.strip()[:2000]
        run.confidence = None if confidence is None else max(0.0, min(1.0, float(confidence)))
        return Outcome({"accepted": True, "option_id": option_id}, f"decided {option_id}", final=True)

    def _no_action(self, reason: str) -> Outcome:
        if not isinstance(reason, str) or not reason.strip():
            raise ToolError("reason must be a non-empty string")
        run = self.run
        run.decided_by, run.choice, run.no_action, run.reasoning = "agent", None, True, reason.strip()[:2000]
        return Outcome({"accepted": True}, "no action", final=True)

    def _eligible(self, option_id: str) -> dict:
        if not isinstance(option_id, str) or option_id not in self.options:
            raise ToolError(f"option {option_id!r} is not allowed now; choose one option_id of list_options")
        return self.options[option_id]
