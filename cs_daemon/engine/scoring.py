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
from operator import attrgetter
from typing import Any, Iterable, NamedTuple

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
ENGAGEMENT_WINDOW_DAYS = 30   # engagement is activity of the last 30 days: none in them, 0
_AT = attrgetter("at")
TREND_DAYS = 7


def setting(config: dict | None, name: str):
    value = (config or {}).get(name)
    return DEFAULTS[name] if value is None else value


@dataclass(frozen=True, slots=True)
class Rules:
    """A tenant's scoring config with its defaults applied and its values in the form the
    rules use them, made once (for a batch, for a tenant of the sweep) rather than looked
    up again for every user. Every function below that takes a config takes this too."""

    milestones: frozenset[str]
    expansion_events: frozenset[str]
    churn_events: frozenset[str]
    half_life: float
    saturation: float
    weights: tuple[float, float, float]   # activation, engagement, expansion: never negative
    weight_total: float
    new_for_hours: float
    onboarding_days: float
    engaged_min_engagement: float
    dormant_after_days: float
    churned_after_days: float
    thresholds: tuple[float, float, float]   # critical, high, medium
    trend_drop: float

    @classmethod
    def of(cls, config: "dict | Rules | None") -> "Rules":
        if isinstance(config, Rules):
            return config
        weights = {**DEFAULTS["health_weights"], **(setting(config, "health_weights") or {})}
        parts = {k: max(0.0, float(weights.get(k, 0) or 0)) for k in ("activation", "engagement", "expansion")}
        t = {**DEFAULTS["risk_thresholds"], **(setting(config, "risk_thresholds") or {})}
        return cls(
            milestones=frozenset(setting(config, "milestones")),
            expansion_events=frozenset(setting(config, "expansion_events")),
            churn_events=frozenset(setting(config, "churn_events")),
            half_life=float(setting(config, "engagement_half_life_days")),
            saturation=max(0.1, float(setting(config, "engagement_saturation"))),
            weights=(parts["activation"], parts["engagement"], parts["expansion"]),
            weight_total=sum(parts.values()) or 1.0,
            new_for_hours=setting(config, "new_for_hours"), onboarding_days=setting(config, "onboarding_days"),
            engaged_min_engagement=setting(config, "engaged_min_engagement"),
            dormant_after_days=setting(config, "dormant_after_days"),
            churned_after_days=setting(config, "churned_after_days"),
            thresholds=(t["critical"], t["high"], t["medium"]),
            trend_drop=-float(setting(config, "risk_trend_drop")),
        )


@dataclass(slots=True)
class Event:
    name: str
    at: datetime


@dataclass(slots=True)
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
        # the masses are mostly as of the last activity, the very same time: written once
        # (an aware time's isoformat is one of the dearest steps of a re-score)
        last = self.last_activity_at
        last_text = last.isoformat() if last else None
        mass_at, churned = self.mass_at, self.churned_at
        return {
            "first_seen_at": _iso(self.first_seen_at), "last_activity_at": last_text,
            "milestones_done": self.milestones_done, "engagement_mass": self.engagement_mass,
            "expansion_mass": self.expansion_mass, "mass_at": last_text if mass_at is last else _iso(mass_at),
            "churned_at": last_text if churned is last else _iso(churned), "event_count": self.event_count,
            "health_history": self.health_history,
        }

    @classmethod
    def from_json(cls, data: dict | None) -> "UserState":
        data = data or {}
        get = data.get
        last_text = get("last_activity_at")
        last = datetime.fromisoformat(last_text) if last_text else None
        mass_at, churned = get("mass_at"), get("churned_at")
        return cls(
            first_seen_at=_time(get("first_seen_at")), last_activity_at=last,
            milestones_done=list(get("milestones_done", ())),
            engagement_mass=float(get("engagement_mass", 0.0)), expansion_mass=float(get("expansion_mass", 0.0)),
            mass_at=last if mass_at == last_text else _time(mass_at),
            churned_at=last if churned == last_text else _time(churned), event_count=int(get("event_count", 0)),
            health_history=[list(x) for x in get("health_history", ())],
        )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


class Scores(NamedTuple):
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


def apply_events(state: UserState, events: Iterable[Event], config: dict | Rules | None) -> UserState:
    """Fold events (any order) into the state. `$identify`/`$locale` set traits, not activity."""
    rules = Rules.of(config)
    milestones, expansion, churn = rules.milestones, rules.expansion_events, rules.churn_events
    half_life = rules.half_life
    first, last, churned, count = state.first_seen_at, state.last_activity_at, state.churned_at, state.event_count
    engagement_mass, expansion_mass, mass_at = state.engagement_mass, state.expansion_mass, state.mass_at
    done = list(state.milestones_done)
    for ev in sorted(events, key=_AT):
        at, name = ev.at, ev.name
        if first is None or at < first:
            first = at
        if name in SPECIAL_EVENTS:
            continue
        count += 1
        if mass_at is None or at > mass_at:
            # the masses move forward to this event, which then counts in full
            if mass_at is not None:
                days = (at - mass_at).total_seconds() / 86400
                if engagement_mass != 0.0:
                    engagement_mass = engagement_mass * 0.5 ** (days / half_life)
                if expansion_mass != 0.0:
                    expansion_mass = expansion_mass * 0.5 ** (days / EXPANSION_HALF_LIFE_DAYS)
            mass_at = at
            engagement_mass += 1.0
            if name in expansion:
                expansion_mass += 1.0
        else:   # a late event counts as decayed to where the masses are
            engagement_mass += _decay(1.0, at, mass_at, half_life)
            if name in expansion:
                expansion_mass += _decay(1.0, at, mass_at, EXPANSION_HALF_LIFE_DAYS)
        if name in milestones and name not in done:
            done.append(name)
        if name in churn and (churned is None or at > churned):
            churned = at
        if last is None or at > last:
            last = at
    if churned and last and last > churned:
        churned = None
    state.first_seen_at, state.last_activity_at, state.churned_at, state.event_count = first, last, churned, count
    state.engagement_mass, state.expansion_mass, state.mass_at = engagement_mass, expansion_mass, mass_at
    state.milestones_done = done
    return state


def activation(state: UserState, config: dict | Rules | None) -> float:
    return _activation(state, Rules.of(config))


def _activation(state: UserState, rules: Rules) -> float:
    milestones = rules.milestones
    if not milestones:
        return 100.0 if state.event_count > 0 else 0.0
    done = sum(1 for m in milestones if m in state.milestones_done)
    return round(100.0 * done / len(milestones), 2)


def engagement(state: UserState, config: dict | Rules | None, now: datetime) -> float:
    rules = Rules.of(config)
    if not _active_within_window(state, now):
        return 0.0
    return _engagement_of(_decay(state.engagement_mass, state.mass_at, now, rules.half_life), rules)


def _active_within_window(state: UserState, now: datetime) -> bool:
    """Whether the user has an event of the last ENGAGEMENT_WINDOW_DAYS (docs/scoring.md)."""
    last = state.last_activity_at
    return last is not None and (now - last).total_seconds() <= ENGAGEMENT_WINDOW_DAYS * 86400


def _engagement_of(mass: float, rules: Rules) -> float:
    return round(100.0 * (1.0 - math.exp(-mass / rules.saturation)), 2)


def expansion(state: UserState, team_size: float | None, engagement_score: float, now: datetime) -> float:
    return _expansion_of(_decay(state.expansion_mass, state.mass_at, now, EXPANSION_HALF_LIFE_DAYS), team_size,
                         engagement_score)


def _expansion_of(mass: float, team_size: float | None, engagement_score: float) -> float:
    team = 0.0
    if team_size and team_size > 0:
        team = min(40.0, 10.0 * math.log2(1.0 + float(team_size)))
    signals = min(40.0, 20.0 * mass)
    momentum = 20.0 * max(0.0, (engagement_score - 50.0) / 50.0)
    return round(min(100.0, team + signals + momentum), 2)


def _decayed(mass: float, days: float, half_life_days: float) -> float:
    """`_decay` over `days` (those from the masses' time to now): one subtraction of
    times for both masses."""
    if days <= 0.0 or mass == 0.0:
        return mass
    return mass * 0.5 ** (days / half_life_days)


def health(scores: dict[str, float], config: dict | Rules | None) -> float:
    return _health(scores["activation"], scores["engagement"], scores["expansion"], Rules.of(config))


def _health(act: float, eng: float, exp: float, rules: Rules) -> float:
    w_act, w_eng, w_exp = rules.weights
    value = sum((w_act * act, w_eng * eng, w_exp * exp)) / rules.weight_total
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


def evaluate(state: UserState, traits: dict | None, config: dict | Rules | None, now: datetime) -> Scores:
    rules = Rules.of(config)
    days = _days(now - state.mass_at) if state.mass_at is not None else 0.0
    act = _activation(state, rules)
    eng = _engagement_of(_decayed(state.engagement_mass, days, rules.half_life), rules) \
        if _active_within_window(state, now) else 0.0
    exp = _expansion_of(_decayed(state.expansion_mass, days, EXPANSION_HALF_LIFE_DAYS),
                        _number(traits.get("team_size")) if traits else None, eng)
    hl = _health(act, eng, exp, rules)
    stage, risk = _stage_and_risk(state, act, eng, hl, rules, now)
    return Scores(act, eng, exp, hl, risk, stage)


def _number(value) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _stage_and_risk(state: UserState, act: float, eng: float, hl: float, rules: Rules,
                    now: datetime) -> tuple[str, str]:
    since = state.last_activity_at or state.first_seen_at
    days_idle = _days(now - since) if since else None
    age_days = _days(now - state.first_seen_at) if state.first_seen_at else 0.0
    activated = act >= 100.0
    if state.churned_at is not None or (days_idle is not None and days_idle >= rules.churned_after_days):
        return "churned", "critical"
    if days_idle is not None and days_idle >= rules.dormant_after_days:
        return "dormant", "high"
    if not activated and age_days * 24 < rules.new_for_hours:
        return "new", "low"
    if not activated and age_days < rules.onboarding_days:
        return "onboarding", "low" if (days_idle is None or days_idle < 3) else "medium"
    risk = _risk(state, hl, rules, now)
    if risk in ("high", "critical"):
        return "at_risk", risk
    if not activated:
        return "onboarding", risk
    if eng >= rules.engaged_min_engagement:
        return "engaged", risk
    return "activated", risk


def _risk(state: UserState, hl: float, rules: Rules, now: datetime) -> str:
    critical, high, medium = rules.thresholds
    if hl < critical:
        level = 3
    elif hl < high:
        level = 2
    elif hl < medium:
        level = 1
    else:
        level = 0
    if health_trend(state, hl, now) <= rules.trend_drop:
        level = min(3, level + 1)
    return RISK_LEVELS[level]


def _days(delta: timedelta) -> float:
    return delta.total_seconds() / 86400
