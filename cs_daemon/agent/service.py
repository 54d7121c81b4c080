"""Running the agent for one engine decision, and applying its answer to it. The rules
computed the eligible options; the agent may only choose among them, so whatever it
answers the decision stays within the rules (docs/ai.md, "The agent")."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Callable

from sqlalchemy.orm import Session

from ..customers.models import Customer
from ..engine.decisions import Decision
from . import budget, loop
from .run import AgentRun
from .tools import Toolbox


def wanted(writer, config, made: Decision) -> bool:
    """A model is configured, the tenant has not switched the agent off, and the rules
    left at least one option."""
    return bool(getattr(writer, "enabled", False) and config.agent_on and made.options)


def run(session: Session, tenant_id: str, customer: Customer, made: Decision, specs, *, writer, config,
        now: datetime, draft: Callable[[dict], object], charge: bool = True) -> AgentRun:
    """The agent's run for this decision (read-only but for the token count)."""
    agent = AgentRun()
    day = now.astimezone(timezone.utc).date()
    tokens_left = None
    if config.ai_daily_token_budget is not None:
        tokens_left = config.ai_daily_token_budget - budget.used(session, tenant_id, day)
        if tokens_left <= 0:
            return agent.fall_back("daily token budget exhausted")
    toolbox = Toolbox(session, customer, made, tuple(specs), draft, agent)
    return loop.run(writer.client, writer.model, toolbox, max_steps=config.agent_max_steps,
                    time_budget_s=config.agent_time_budget_s, tokens_left=tokens_left,
                    charge=budget.charger(session, tenant_id, day) if charge else None,
                    call_timeout_s=writer.timeout)


def apply(made: Decision, agent: AgentRun) -> Decision:
    """The decision as the agent answered it: its option, or none with its reason. A
    fallback leaves the engine's decision. The confidence stays the rules' (approval
    modes compare it), and the learner's own choices are not logged as taken."""
    if agent.decided_by != "agent":
        return made
    for verdict in made.verdicts.values():     # the agent's pick replaces the rules' below
        if verdict.verdict == "picked":
            verdict.verdict = "eligible"
    if agent.no_action:
        return replace(made, action="none", playbook_id=None, channel=None, action_type=None, severity=None,
                       confidence=None, reasoning=None, reason=f"the agent chose no action: {agent.reasoning}",
                       learned=[])
    option = next(o for o in made.options if o["option_id"] == agent.choice)
    picked = made.verdicts.get(option["playbook_id"])
    if picked is not None:
        picked.verdict = "picked"
        if option["action"] == "send":
            picked.channel = option["channel"]
    how = {"send": f"send on {option['channel']}", "escalate": "escalate to the team",
           "external_action": f"run external action {option['action_type']!r}"}[option["action"]]
    return replace(made, action=option["action"], playbook_id=option["playbook_id"], channel=option["channel"],
                   action_type=option["action_type"], severity=option.get("severity"),
                   confidence=option["confidence"], learned=[],
                   reasoning=f"The agent chose playbook {option['playbook']!r} ({how}): {agent.reasoning}")
