"""The decision engine: for one user, which active playbook acts now, how, and why the
others do not. A pure module: the caller loads the user, the playbooks and the
history, and persists what it decides.

Steps: entry conditions (in memory) → constraints → the tenant's contact policy →
ranking → one action: `send` on a
channel, `escalate`, `external_action`, or `none` with a reason. Every playbook gets a
verdict with its reason (the dry run's `rules`). docs/decisions.md states the rules.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Callable, Iterable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..learning import model
from . import conditions, contact_policy
from .contact_policy import ContactPolicy, Contact, Limits

CHANNELS = ("email", "in_app", "webhook", "crm")
PRIOR_SUCCESS = 0.5
NOT_MATCHED = "entry conditions not met"     # the why of a playbook whose entry conditions did not match


@dataclass(frozen=True)
class PlaybookSpec:
    id: str
    name: str
    entry_conditions: dict
    exit_conditions: dict
    constraints: dict
    strategy_hints: dict
    success_rate: float | None = None
    lifecycle_area: str | None = None

    @property
    def trigger(self) -> str | None:
        return conditions.trigger_of(self.entry_conditions)


@dataclass(frozen=True)
class History:
    """What this user (and the tenant) already received from each playbook, and the
    tenant's contact policy with the user's recent contacts it counts."""

    for_user: dict[str, int] = field(default_factory=dict)          # lifetime, per playbook
    last_for_user: dict[str, datetime] = field(default_factory=dict)
    last_day: dict[str, int] = field(default_factory=dict)          # tenant-wide, last 24 h
    policy: ContactPolicy | None = None
    contacts: tuple[Contact, ...] = ()                              # within policy.lookback

    def limits(self, now: datetime) -> Limits:
        """What the contact policy blocks now (nothing without one)."""
        return contact_policy.limits(self.policy, self.contacts, now)


@dataclass(frozen=True)
class UserContext:
    user_id: str
    facts: conditions.Facts
    email: str | None = None
    timezone: str | None = None
    opted_out: frozenset[str] = frozenset()     # channel names, or "all"


@dataclass
class Verdict:
    playbook_id: str
    name: str
    matched: bool
    verdict: str              # picked | eligible | rejected | not_matched | not_triggered
    why: str
    confidence: float | None = None
    channel: str | None = None
    score: float | None = None
    estimate: dict | None = None   # the learner's, when it chose among playbooks of the same priority
    contact_policy: dict | None = None   # the policy rule that blocked it: {rule, count, limit, free_at}

    def as_dict(self) -> dict:
        out = {"name": self.name, "matched": self.matched, "verdict": self.verdict, "why": self.why,
               "confidence": self.confidence, "channel": self.channel, "score": self.score}
        if self.estimate is not None:
            out["estimate"] = self.estimate
        if self.contact_policy is not None:
            out["contact_policy"] = self.contact_policy
        return out


@dataclass
class Learner:
    """What the learning module needs to choose for this user (docs/decisions.md,
    "Learning"): the user's features, the counts per scope, a source of draws."""

    features: dict
    counts: dict[str, dict]                   # scope -> {(option, key): Tally}
    rng: object

    def choose(self, scope: str, options: list[str]) -> model.Choice:
        return model.choose(options, self.features, self.counts.get(scope, {}), self.rng)

    def estimate(self, scope: str, option: str) -> dict:
        """The posterior estimate of one option for this user, without a draw."""
        e = model.estimate(option, self.features, self.counts.get(scope, {}))
        return {"estimate": round(e.mean, 4), "uncertainty": round(e.uncertainty, 4),
                "successes": e.successes, "trials": e.trials}


@dataclass(frozen=True)
class Learned:
    kind: str            # playbook | channel
    scope: str
    choice: model.Choice


@dataclass
class Decision:
    action: str               # send | escalate | external_action | none
    playbook_id: str | None = None
    channel: str | None = None
    confidence: float | None = None
    reasoning: str | None = None
    reason: str | None = None
    severity: str | None = None
    action_type: str | None = None
    matched_playbooks: int = 0
    verdicts: dict[str, Verdict] = field(default_factory=dict)     # of the matched playbooks
    considered: tuple[PlaybookSpec, ...] = ()
    learned: list[Learned] = field(default_factory=list)            # the choices the learner made
    # every eligible option, best ranked first: what the agent may choose among
    # (docs/ai.md, "The agent")
    options: list[dict] = field(default_factory=list)

    @property
    def rules(self) -> dict[str, Verdict]:
        """Every playbook's verdict, in order; those whose entry conditions did not match
        are made only here, when asked (a dry run), not on every decision."""
        return {pb.id: self.verdicts.get(pb.id) or Verdict(pb.id, pb.name, False, "not_matched", NOT_MATCHED)
                for pb in self.considered}


class PlaybookSet:
    """A tenant's active playbooks ready to decide with: every entry condition compiled
    into one function, exit conditions compiled, and each playbook's confidence and rank
    score worked out. Build it once per set of playbooks (`of` keeps recent ones)."""

    def __init__(self, playbooks: Iterable[PlaybookSpec]):
        self.playbooks = tuple(playbooks)
        self.matching = conditions.compile_many([pb.entry_conditions for pb in self.playbooks])
        self.exit_met = [conditions.compile_tree(pb.exit_conditions) if conditions.fields_of(pb.exit_conditions)
                         else None for pb in self.playbooks]
        self.confidence = [confidence_of(pb) for pb in self.playbooks]
        self.score = [score_of(pb) for pb in self.playbooks]
        self.leaves = [leaf_count(pb.entry_conditions) for pb in self.playbooks]
        # the (event name, within_days) counts the conditions ask of a user
        self.event_clauses = frozenset().union(*(conditions.event_clauses(tree) for pb in self.playbooks
                                                 for tree in (pb.entry_conditions, pb.exit_conditions)))

    def __iter__(self):
        return iter(self.playbooks)

    def __len__(self) -> int:
        return len(self.playbooks)

    _recent: dict[tuple, "PlaybookSet"] = {}
    RECENT = 256

    @classmethod
    def of(cls, playbooks: "PlaybookSet | Iterable[PlaybookSpec]") -> "PlaybookSet":
        """The set of these playbooks, compiled once per distinct set in this process."""
        if isinstance(playbooks, PlaybookSet):
            return playbooks
        playbooks = tuple(playbooks)
        return cls.cached(tuple(_fingerprint(pb) for pb in playbooks), lambda: playbooks)

    @classmethod
    def cached(cls, key: tuple, playbooks: Callable[[], Iterable[PlaybookSpec]]) -> "PlaybookSet":
        """The set remembered under `key` (which must change whenever a playbook does), made
        from `playbooks()` the first time."""
        found = cls._recent.get(key)
        if found is None:
            if len(cls._recent) >= cls.RECENT:
                cls._recent.pop(next(iter(cls._recent)))
            found = cls._recent[key] = cls(playbooks())
        return found


def _fingerprint(pb: PlaybookSpec) -> tuple:
    dump = functools.partial(json.dumps, sort_keys=True, default=str)
    return (pb.id, pb.name, dump(pb.entry_conditions), dump(pb.exit_conditions), dump(pb.constraints),
            dump(pb.strategy_hints), pb.success_rate, pb.lifecycle_area)


def leaf_count(tree: dict | None) -> int:
    node = conditions.fields_of(tree)
    if not node:
        return 0
    for key in ("all", "any"):
        if key in node:
            return sum(leaf_count(c) for c in node[key])
    if "not" in node:
        return leaf_count(node["not"])
    return 1


def confidence_of(pb: PlaybookSpec) -> float:
    rate = PRIOR_SUCCESS if pb.success_rate is None else pb.success_rate
    return round(min(0.95, 0.4 + 0.4 * rate + 0.04 * min(leaf_count(pb.entry_conditions), 5)), 2)


def score_of(pb: PlaybookSpec) -> float:
    rate = PRIOR_SUCCESS if pb.success_rate is None else pb.success_rate
    priority = pb.strategy_hints.get("priority") or 0
    return round(10.0 * priority + 5.0 * rate + 0.2 * min(leaf_count(pb.entry_conditions), 5), 3)


def considered(pb: PlaybookSpec, *, events: frozenset[str], state_changed: bool, every: bool) -> bool:
    """Triggered playbooks fire on their event; the others on the sweep (no events) and on
    state changes."""
    if every:
        return True
    if pb.trigger:
        return pb.trigger in events
    return not events or state_changed


def decide(user: UserContext, playbooks: PlaybookSet | list[PlaybookSpec], history: History, *,
           now: datetime, events: Iterable[str] = (), state_changed: bool = False, every: bool = False,
           learner: Learner | None = None) -> Decision:
    """`events`: the event names that arrived (none on the sweep); `every` (dry runs)
    considers every playbook as if its trigger had fired; `learner` chooses among the
    eligible playbooks of the same top priority, and the channel of a playbook that lists
    several and prefers none."""
    events = frozenset(events)
    pset = PlaybookSet.of(playbooks)
    matched = pset.matching(user.facts)
    decision = Decision(action="none", matched_playbooks=len(matched), considered=pset.playbooks)
    limits = history.limits(now)
    eligible: list[tuple[float, PlaybookSpec, Verdict, int]] = []
    for i in matched:
        pb = pset.playbooks[i]
        verdict = decision.verdicts[pb.id] = Verdict(pb.id, pb.name, True, "not_matched", "")
        if not considered(pb, events=events, state_changed=state_changed, every=every):
            verdict.verdict, verdict.why = "not_triggered", (
                f"waits for its trigger event {pb.trigger!r}" if pb.trigger
                else "has no trigger event: waits for the decision sweep or a change of the user's stage or risk")
            continue
        blocked = _blocked(pset, i, user, history, now, verdict, limits_for(pb, history.policy, limits))
        if blocked:
            verdict.verdict, verdict.why = "rejected", blocked
            continue
        verdict.verdict, verdict.why, verdict.score = "eligible", "entry conditions met, no constraint blocks it", pset.score[i]
        eligible.append((verdict.score, pb, verdict, i))
    if not eligible:
        decision.reason = _why_none(pset.playbooks, decision)
        return decision
    eligible.sort(key=lambda item: (-item[0], item[1].name, item[1].id))
    decision.options = eligible_options(eligible, user, learner,
                                        lambda pb: limits_for(pb, history.policy, limits))
    _, pb, verdict, i = eligible[0]
    note = None
    if learner is not None:
        (_, pb, verdict, i), note = _learn_pick(eligible, learner, decision)
    verdict.verdict = "picked"
    _fill(decision, pb, verdict, len(eligible), pset.leaves[i], note)
    if learner is not None and decision.action == "send":
        _learn_channel(decision, pb, user, learner, limits_for(pb, history.policy, limits))
    return decision


def limits_for(pb: PlaybookSpec, policy: ContactPolicy | None, limits: Limits) -> Limits | None:
    """The policy's limits on this playbook: none for an exempt one (its messages still
    count as contacts)."""
    if policy is None or policy.exempt(pb.id):
        return None
    return limits


def eligible_options(eligible: list, user: UserContext, learner: Learner | None,
                     limits_of: Callable[[PlaybookSpec], Limits | None] = lambda pb: None) -> list[dict]:
    """Each way an eligible playbook may act: one option per usable channel of a playbook
    that sends (less the channels the contact policy caps now), one for an escalation, one
    for an external action. The rules already rejected every playbook a constraint blocks,
    so each option here is allowed now."""
    out = []
    for _, pb, verdict, _i in eligible:
        limits = limits_of(pb)
        hints = pb.strategy_hints or {}
        base = {"playbook_id": pb.id, "playbook": pb.name, "confidence": verdict.confidence,
                "score": verdict.score, "priority": priority_of(pb), "success_rate": pb.success_rate,
                "estimate": learner.estimate("playbook", pb.id) if learner is not None else None}
        if hints.get("escalate"):
            out.append({"option_id": f"{pb.id}:escalate", **base, "action": "escalate", "channel": "escalate",
                        "action_type": None, "severity": (hints["escalate"] or {}).get("severity", "Medium")})
        elif hints.get("action_type"):
            out.append({"option_id": f"{pb.id}:action:{hints['action_type']}", **base, "action": "external_action",
                        "channel": None, "action_type": hints["action_type"]})
        else:
            for channel in usable_channels(list((pb.constraints or {}).get("channels") or CHANNELS), user):
                if limits is not None and channel in limits.channels:
                    continue
                out.append({"option_id": f"{pb.id}:{channel}", **base, "action": "send", "channel": channel,
                            "action_type": None})
    return out


def priority_of(pb: PlaybookSpec) -> float:
    return pb.strategy_hints.get("priority") or 0


def _learn_pick(eligible: list, learner: Learner, decision: Decision) -> tuple[tuple, str | None]:
    """Among the eligible playbooks of the top priority, the learner's pick."""
    top = priority_of(eligible[0][1])
    tied = [item for item in eligible if priority_of(item[1]) == top]
    if len(tied) < 2:
        return eligible[0], None
    choice = learner.choose("playbook", [item[1].id for item in tied])
    decision.learned.append(Learned("playbook", "playbook", choice))
    for e in choice.estimates:
        verdict = next(item[2] for item in tied if item[1].id == e.option)
        verdict.estimate = {"estimate": round(e.mean, 4), "uncertainty": round(e.uncertainty, 4),
                            "successes": e.successes, "trials": e.trials,
                            "probability": round(choice.probabilities[e.option], 4)}
    picked = next(item for item in tied if item[1].id == choice.option)
    e = choice.chosen
    return picked, (f"the learner picked it among {len(tied)} of priority {top} (estimate {e.mean:.2f} "
                    f"± {e.uncertainty:.2f}, {e.successes} of {e.trials} succeeded for users like this one, "
                    f"picked in {choice.propensity:.0%} of draws)")


def _learn_channel(decision: Decision, pb: PlaybookSpec, user: UserContext, learner: Learner,
                   limits: Limits | None = None) -> None:
    """A playbook that lists several channels and prefers none: the learner picks one
    (among those the contact policy leaves open)."""
    listed = (pb.constraints or {}).get("channels") or []
    if len(listed) < 2 or pb.strategy_hints.get("preferred_channel"):
        return
    usable = [ch for ch in usable_channels(listed, user) if not limits or ch not in limits.channels]
    if len(usable) < 2:
        return
    scope = f"channel:{pb.id}"
    choice = learner.choose(scope, usable)
    decision.learned.append(Learned("channel", scope, choice))
    first, decision.channel = decision.channel, choice.option
    decision.verdicts[pb.id].channel = choice.option
    e = choice.chosen
    # the rules' sentence named the channel they would have used; it is the learner's now
    decision.reasoning = (decision.reasoning or "").replace(f"send on {first}.", f"send on {choice.option}.") + (
        f" The learner picked {choice.option} among {', '.join(usable)} (estimate {e.mean:.2f}, "
        f"{e.successes} of {e.trials} succeeded for users like this one).")


def _fill(decision: Decision, pb: PlaybookSpec, verdict: Verdict, eligible: int, leaves: int,
          note: str | None = None) -> None:
    hints = pb.strategy_hints
    decision.playbook_id, decision.confidence = pb.id, verdict.confidence
    if hints.get("escalate"):
        decision.action, decision.channel = "escalate", "escalate"
        decision.severity = (hints["escalate"] or {}).get("severity", "Medium")
        how = f"escalate to the team (severity {decision.severity})"
    elif hints.get("action_type"):
        decision.action, decision.action_type = "external_action", hints["action_type"]
        how = f"run external action {decision.action_type!r}"
    else:
        decision.action, decision.channel = "send", verdict.channel
        how = f"send on {verdict.channel}"
    rate = "no outcomes yet" if pb.success_rate is None else f"success rate {pb.success_rate:.0%}"
    if note:
        decision.reasoning = f"Playbook {pb.name!r} matches ({leaves} conditions); {note}; {how}."
        return
    decision.reasoning = (f"Playbook {pb.name!r} matches ({leaves} conditions) and ranks "
                          f"first of {eligible} eligible (priority {pb.strategy_hints.get('priority') or 0}, {rate}); "
                          f"{how}.")


def _why_none(playbooks: tuple[PlaybookSpec, ...], decision: Decision) -> str:
    if not playbooks:
        return "no active playbooks"
    verdicts = list(decision.verdicts.values())
    rejected = [v for v in verdicts if v.verdict == "rejected"]
    suppressed = [v for v in rejected if v.contact_policy is not None]
    if suppressed:      # without the policy one of these would act: the policy is the reason
        return suppressed[0].why
    if rejected:
        return f"every matching playbook is blocked; {rejected[0].name}: {rejected[0].why}"
    waiting = [v for v in verdicts if v.verdict == "not_triggered"]
    if waiting:
        return f"matching playbooks wait for their trigger events; {waiting[0].name}: {waiting[0].why}"
    return "no playbook's entry conditions match"


def _blocked(pset: PlaybookSet, i: int, user: UserContext, history: History, now: datetime,
             verdict: Verdict, limits: Limits | None = None) -> str | None:
    pb = pset.playbooks[i]
    c, hints = pb.constraints or {}, pb.strategy_hints or {}
    exit_met = pset.exit_met[i]
    if exit_met is not None and exit_met(user.facts):
        return "exit conditions already met"
    verdict.confidence = pset.confidence[i]
    user_facing = not hints.get("escalate") and not hints.get("action_type")
    if user_facing:
        channel, why = choose_channel(c, hints, user)
        if channel is None:
            return why
        verdict.channel = channel
    repeated = repeat_limit(pb, history, now)
    if repeated:
        return repeated
    if user_facing and c.get("quiet_hours") and in_quiet_hours(c["quiet_hours"], user.timezone, now):
        return "quiet hours in the user's time zone"
    if c.get("min_confidence") is not None and verdict.confidence < c["min_confidence"]:
        return f"confidence {verdict.confidence} below min_confidence {c['min_confidence']}"
    if user_facing and limits is not None:
        return _policy_blocks(c, hints, user, limits, verdict)
    return None


def _policy_blocks(constraints: dict, hints: dict, user: UserContext, limits: Limits,
                   verdict: Verdict) -> str | None:
    """The contact policy on a message otherwise eligible: a user-wide rule blocks it; a
    channel's cap moves it to another usable channel, or blocks it when none is left."""
    block = limits.block
    if block is None and verdict.channel in limits.channels:
        open_ = [ch for ch in usable_channels(list(constraints.get("channels") or CHANNELS), user)
                 if ch not in limits.channels]
        if open_:
            preferred = hints.get("preferred_channel")
            verdict.channel = preferred if preferred in open_ else open_[0]
            return None
        block = limits.channels[verdict.channel]
    if block is None:
        return None
    verdict.contact_policy = block.as_dict()
    return block.reason


def repeat_limit(pb: PlaybookSpec, history: History, now: datetime) -> str | None:
    """Why what the user and the tenant already received keeps this playbook from acting
    again now (max_per_user, cooldown_hours, max_per_day), or None."""
    c = pb.constraints or {}
    limit = max_per_user(c)
    if limit is not None and history.for_user.get(pb.id, 0) >= limit:
        return f"max_per_user reached ({history.for_user.get(pb.id, 0)} of {limit})"
    last = history.last_for_user.get(pb.id)
    if c.get("cooldown_hours") is not None and last is not None and now - last < timedelta(hours=c["cooldown_hours"]):
        return f"in cooldown until {(last + timedelta(hours=c['cooldown_hours'])).isoformat()}"
    if c.get("max_per_day") is not None and history.last_day.get(pb.id, 0) >= c["max_per_day"]:
        return f"max_per_day reached ({history.last_day.get(pb.id, 0)} of {c['max_per_day']} in 24 h)"
    return None


def contact_limit(pb: PlaybookSpec, action: str, channel: str | None, history: History,
                  now: datetime) -> str | None:
    """Why the contact policy keeps this decision from being recorded now (the reason
    `contact_policy: <rule>`), or None: only messages are limited, exempt playbooks never."""
    if action != "send":
        return None
    limits = limits_for(pb, history.policy, history.limits(now))
    if limits is None:
        return None
    block = limits.block or limits.channels.get(channel or "")
    return block.reason if block else None


def max_per_user(constraints: dict) -> int | None:
    """Without max_per_user or cooldown_hours a playbook acts once per user, so a sweep
    never repeats itself; a cooldown alone allows repeats."""
    if constraints.get("max_per_user") is not None:
        return constraints["max_per_user"]
    return None if constraints.get("cooldown_hours") is not None else 1


def choose_channel(constraints: dict, hints: dict, user: UserContext) -> tuple[str | None, str]:
    if "all" in user.opted_out:
        return None, "the user opted out of all channels"
    allowed = list(constraints.get("channels") or CHANNELS)
    usable = usable_channels(allowed, user)
    if not usable:
        opted = [ch for ch in allowed if ch in user.opted_out]
        if opted:
            return None, f"the user opted out of {', '.join(opted)}"
        return None, "no allowed channel can reach the user (no email address)"
    preferred = hints.get("preferred_channel")
    return (preferred if preferred in usable else usable[0]), ""


def usable_channels(allowed: list[str], user: UserContext) -> list[str]:
    return [ch for ch in allowed if ch not in user.opted_out and (ch != "email" or user.email)]


def in_quiet_hours(quiet: dict, user_tz: str | None, now: datetime) -> bool:
    tz_name = user_tz or quiet.get("timezone") or "UTC"
    try:
        local = now.astimezone(ZoneInfo(tz_name)).time()
    except (ZoneInfoNotFoundError, ValueError):
        local = now.astimezone(ZoneInfo(quiet.get("timezone") or "UTC")).time()
    start, end = (time.fromisoformat(quiet["start"]), time.fromisoformat(quiet["end"]))
    if start <= end:
        return start <= local < end
    return local >= start or local < end
