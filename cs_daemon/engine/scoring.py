"""Scores and lifecycle of one user, from a small running state: a pure module (no
database, no Flask). docs/scoring.md states every rule and default.

Ingest folds new events into the state (`apply_events`) without reading the user's
history; the periodic sweep calls `evaluate` with a later `now` so time decay (dormant,
churned, fading engagement) shows without new events. Both end in `evaluate`, which
turns state + traits + config + now into scores, risk and stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

STAGES = ("new", "onboarding", "activated", "engaged", "at_risk", "dormant", "churned")
RISK_LEVELS = ("low", "medium", "high", "critical")
SPECIAL_EVENTS = ("$identify", "$locale")

DEFAULTS: dict[str, Any] = {
    "milestones": [],
    "health_weights": {"activation": 0.4, "engagement": 0.4, "expansion": 0.2},
    "engagement_half_life_days": 7,
    "engagement_saturation": 10.0,
    "expansion_events": ["invited_teammate", "seat_added", "plan_upgraded"],
    "churn_events": ["churned", "account_closed", "subscription_canceled"],
    "new_for_hours": 24,
    "onboarding_days": 14,
    "engaged_min_engagement": 60,
    "dormant_after_days": 14,
    "churned_after_days": 30,
    "risk_thresholds": {"medium": 60, "high": 40, "critical": 20},
    "risk_trend_drop": 15,
}
EXPANSION_HALF_LIFE_DAYS = 14
TREND_DAYS = 7


def setting(config: dict | None, name: str):
    value = (config or {}).get(name)
    return DEFAULTS[name] if value is None else value


@dataclass
class Event:
    name: str
    at: datetime


@dataclass
class UserState:
    """What scoring needs to remember of a user between events."""

    first_seen_at: datetime | None = None
    last_activity_at: datetime | None = None
    milestones_done: list[str] = field(default_factory=list)
    engagement_mass: float = 0.0        # decayed count of events, as of `mass_at`
    expansion_mass: float = 0.0         # decayed count of expansion events, as of `mass_at`
    mass_at: datetime | None = None
    churned_at: datetime | None = None  # explicit churn event not followed by activity
    event_count: int = 0
    health_history: list[list] = field(default_factory=list)  # [[day number, health], ...]

    def to_json(self) -> dict:
        iso = lambda d: d.isoformat() if d else None  # noqa: E731
        return {
            "first_seen_at": iso(self.first_seen_at), "last_activity_at": iso(self.last_activity_at),
            "milestones_done": self.milestones_done, "engagement_mass": self.engagement_mass,
            "expansion_mass": self.expansion_mass, "mass_at": iso(self.mass_at),
            "churned_at": iso(self.churned_at), "event_count": self.event_count,
            "health_history": self.health_history,
        }

    @classmethod
    def from_json(cls, data: dict | None) -> "UserState":
        data = data or {}
        dt = lambda v: datetime.fromisoformat(v) if v else None  # noqa: E731
        return cls(
            first_seen_at=dt(data.get("first_seen_at")), last_activity_at=dt(data.get("last_activity_at")),
            milestones_done=list(data.get("milestones_done", [])),
            engagement_mass=float(data.get("engagement_mass", 0.0)),
            expansion_mass=float(data.get("expansion_mass", 0.0)), mass_at=dt(data.get("mass_at")),
            churned_at=dt(data.get("churned_at")), event_count=int(data.get("event_count", 0)),
            health_history=[list(x) for x in data.get("health_history", [])],
        )


@dataclass(frozen=True)
class Scores:
    activation_score: float
    engagement_score: float
    expansion_score: float
    health: float
    risk_level: str
    lifecycle_stage: str


def _decay(mass: float, since: datetime | None, until: datetime, half_life_days: float) -> float:
    if since is None or mass == 0.0 or until <= since:
        return mass
    return mass * 0.5 ** ((until - since).total_seconds() / 86400 / half_life_days)


def apply_events(state: UserState, events: Iterable[Event], config: dict | None) -> UserState:
    """Fold events (any order) into the state. `$identify`/`$locale` set traits, not activity."""
    milestones = set(setting(config, "milestones"))
    expansion = set(setting(config, "expansion_events"))
    churn = set(setting(config, "churn_events"))
    half_life = float(setting(config, "engagement_half_life_days"))
    done = list(state.milestones_done)
    for ev in sorted(events, key=lambda e: e.at):
        if state.first_seen_at is None or ev.at < state.first_seen_at:
            state.first_seen_at = ev.at
        if ev.name in SPECIAL_EVENTS:
            continue
        state.event_count += 1
        if state.mass_at is None or ev.at > state.mass_at:
            state.engagement_mass = _decay(state.engagement_mass, state.mass_at, ev.at, half_life)
            state.expansion_mass = _decay(state.expansion_mass, state.mass_at, ev.at, EXPANSION_HALF_LIFE_DAYS)
            state.mass_at = ev.at
        state.engagement_mass += _decay(1.0, ev.at, state.mass_at, half_life)
        if ev.name in expansion:
            state.expansion_mass += _decay(1.0, ev.at, state.mass_at, EXPANSION_HALF_LIFE_DAYS)
        if ev.name in milestones and ev.name not in done:
            done.append(ev.name)
        if ev.name in churn:
            if state.churned_at is None or ev.at > state.churned_at:
                state.churned_at = ev.at
        if state.last_activity_at is None or ev.at > state.last_activity_at:
            state.last_activity_at = ev.at
    state.milestones_done = done
    if state.churned_at and state.last_activity_at and state.last_activity_at > state.churned_at:
        state.churned_at = None
    return state


def activation(state: UserState, config: dict | None) -> float:
    milestones = setting(config, "milestones")
    if not milestones:
        return 100.0 if state.event_count > 0 else 0.0
    done = sum(1 for m in set(milestones) if m in state.milestones_done)
    return round(100.0 * done / len(set(milestones)), 2)


def engagement(state: UserState, config: dict | None, now: datetime) -> float:
    mass = _decay(state.engagement_mass, state.mass_at, now, float(setting(config, "engagement_half_life_days")))
    saturation = max(0.1, float(setting(config, "engagement_saturation")))
    return round(100.0 * (1.0 - math.exp(-mass / saturation)), 2)


def expansion(state: UserState, team_size: float | None, engagement_score: float, now: datetime) -> float:
    team = 0.0
    if team_size and team_size > 0:
        team = min(40.0, 10.0 * math.log2(1.0 + float(team_size)))
    signals = min(40.0, 20.0 * _decay(state.expansion_mass, state.mass_at, now, EXPANSION_HALF_LIFE_DAYS))
    momentum = 20.0 * max(0.0, (engagement_score - 50.0) / 50.0)
    return round(min(100.0, team + signals + momentum), 2)


def health(scores: dict[str, float], config: dict | None) -> float:
    weights = {**DEFAULTS["health_weights"], **(setting(config, "health_weights") or {})}
    parts = {k: max(0.0, float(weights.get(k, 0) or 0)) for k in ("activation", "engagement", "expansion")}
    total = sum(parts.values()) or 1.0
    value = sum(parts[k] * scores[k] for k in parts) / total
    return round(min(100.0, max(0.0, value)), 2)


def _day(now: datetime) -> int:
    return int(now.timestamp() // 86400)


def health_trend(state: UserState, current: float, now: datetime) -> float:
    """Change of health against the oldest sample of the last 7 days (0 without one)."""
    today = _day(now)
    past = [h for d, h in state.health_history if today - TREND_DAYS <= d < today]
    return 0.0 if not past else current - past[0]


def record_health(state: UserState, value: float, now: datetime) -> None:
    """Keep one health sample a day for the last 8 days (the trend's memory)."""
    today = _day(now)
    history = [[d, h] for d, h in state.health_history if today - TREND_DAYS - 1 <= d < today]
    history.append([today, value])
    state.health_history = history


def evaluate(state: UserState, traits: dict | None, config: dict | None, now: datetime) -> Scores:
    traits = traits or {}
    act = activation(state, config)
    eng = engagement(state, config, now)
    exp = expansion(state, _number(traits.get("team_size")), eng, now)
    hl = health({"activation": act, "engagement": eng, "expansion": exp}, config)
    stage, risk = _stage_and_risk(state, act, eng, hl, config, now)
    return Scores(act, eng, exp, hl, risk, stage)


def _number(value) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _stage_and_risk(state, act, eng, hl, config, now) -> tuple[str, str]:
    since = state.last_activity_at or state.first_seen_at
    days_idle = _days(now - since) if since else None
    age_days = _days(now - state.first_seen_at) if state.first_seen_at else 0.0
    activated = act >= 100.0
    if state.churned_at is not None or (days_idle is not None and days_idle >= setting(config, "churned_after_days")):
        return "churned", "critical"
    if days_idle is not None and days_idle >= setting(config, "dormant_after_days"):
        return "dormant", "high"
    risk = _risk(state, hl, config, now)
    if not activated and age_days * 24 < setting(config, "new_for_hours"):
        return "new", "low"
    if not activated and age_days < setting(config, "onboarding_days"):
        return "onboarding", "low" if (days_idle is None or days_idle < 3) else "medium"
    if risk in ("high", "critical"):
        return "at_risk", risk
    if not activated:
        return "onboarding", risk
    if eng >= setting(config, "engaged_min_engagement"):
        return "engaged", risk
    return "activated", risk


def _risk(state: UserState, hl: float, config: dict | None, now: datetime) -> str:
    t = {**DEFAULTS["risk_thresholds"], **(setting(config, "risk_thresholds") or {})}
    if hl < t["critical"]:
        level = 3
    elif hl < t["high"]:
        level = 2
    elif hl < t["medium"]:
        level = 1
    else:
        level = 0
    if health_trend(state, hl, now) <= -float(setting(config, "risk_trend_drop")):
        level = min(3, level + 1)
    return RISK_LEVELS[level]


def _days(delta: timedelta) -> float:
    return delta.total_seconds() / 86400
