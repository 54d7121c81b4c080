"""The pure scoring module: bounds, decay and lifecycle rules (docs/scoring.md)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings as hsettings
from hypothesis import strategies as st

from cs_daemon.engine import scoring
from cs_daemon.engine.scoring import Event, UserState, apply_events, evaluate

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NAMES = ["signed_up", "created_project", "invited_teammate", "seat_added", "churned", "$identify", "viewed"]

configs = st.fixed_dictionaries({}, optional={
    "milestones": st.lists(st.sampled_from(NAMES), max_size=4),
    "health_weights": st.fixed_dictionaries({}, optional={
        k: st.floats(0, 10) for k in ("activation", "engagement", "expansion")}),
    "engagement_saturation": st.floats(0.01, 1000),
    "engagement_half_life_days": st.floats(0.5, 60),
})
events = st.lists(st.tuples(st.sampled_from(NAMES), st.floats(0, 200)), max_size=60)


@hsettings(max_examples=300, deadline=None)
@given(config=configs, history=events, later=st.floats(0, 400), team=st.one_of(st.none(), st.integers(0, 10**6)))
def test_scores_stay_within_0_and_100(config, history, later, team):
    state = apply_events(UserState(), [Event(n, T0 + timedelta(days=d)) for n, d in history], config)
    now = T0 + timedelta(days=later + (max((d for _, d in history), default=0)))
    s = evaluate(state, {"team_size": team}, config, now)
    for value in (s.activation_score, s.engagement_score, s.expansion_score, s.health):
        assert 0.0 <= value <= 100.0
    assert s.risk_level in scoring.RISK_LEVELS
    assert s.lifecycle_stage in scoring.STAGES


@hsettings(max_examples=200, deadline=None)
@given(history=events, split=st.integers(0, 60))
def test_incremental_equals_all_at_once(history, split):
    evs = [Event(n, T0 + timedelta(days=d)) for n, d in history]
    cfg = {"milestones": ["created_project"]}
    whole = apply_events(UserState(), evs, cfg)
    parts = apply_events(apply_events(UserState(), evs[:split], cfg), evs[split:], cfg)
    now = T0 + timedelta(days=250)
    assert evaluate(whole, {}, cfg, now) == evaluate(parts, {}, cfg, now)


def test_activation_is_the_share_of_milestones_done():
    cfg = {"milestones": ["a", "b", "c", "d"]}
    state = apply_events(UserState(), [Event("a", T0), Event("c", T0), Event("A", T0)], cfg)
    assert scoring.activation(state, cfg) == 50.0  # "A" is not "a": names are case-sensitive


def test_engagement_halves_every_seven_days():
    state = apply_events(UserState(), [Event("x", T0)], {})
    e0 = scoring._decay(state.engagement_mass, state.mass_at, T0 + timedelta(days=7), 7)
    assert abs(e0 - 0.5) < 1e-9


def test_engagement_is_activity_of_the_last_30_days():
    """No event in the last 30 days: 0, however many came before; one inside: counted."""
    state = apply_events(UserState(), [Event("x", T0 + timedelta(hours=h)) for h in range(30)], {})
    assert evaluate(state, {}, {}, T0 + timedelta(days=31, hours=5)).engagement_score > 0
    assert evaluate(state, {}, {}, T0 + timedelta(days=31, hours=5, seconds=1)).engagement_score == 0.0
    assert scoring.engagement(state, {}, T0 + timedelta(days=31, hours=5, seconds=1)) == 0.0
    apply_events(state, [Event("x", T0 + timedelta(days=40))], {})
    assert evaluate(state, {}, {}, T0 + timedelta(days=41)).engagement_score > 0


def test_lifecycle_path_new_onboarding_activated_engaged_dormant_churned():
    cfg = {"milestones": ["created_project"]}
    state = apply_events(UserState(), [Event("signed_up", T0)], cfg)
    assert evaluate(state, {}, cfg, T0 + timedelta(hours=1)).lifecycle_stage == "new"
    assert evaluate(state, {}, cfg, T0 + timedelta(days=2)).lifecycle_stage == "onboarding"
    state = apply_events(state, [Event("created_project", T0 + timedelta(days=2))], cfg)
    assert evaluate(state, {}, cfg, T0 + timedelta(days=2)).lifecycle_stage == "activated"
    daily = [Event("viewed", T0 + timedelta(days=2, hours=h)) for h in range(0, 24 * 10, 8)]
    state = apply_events(state, daily, cfg)
    busy = T0 + timedelta(days=12)
    assert evaluate(state, {}, cfg, busy).lifecycle_stage == "engaged"
    last = state.last_activity_at
    assert evaluate(state, {}, cfg, last + timedelta(days=14)).lifecycle_stage == "dormant"
    assert evaluate(state, {}, cfg, last + timedelta(days=31)).lifecycle_stage == "churned"


def test_explicit_churn_event_churns_until_the_user_comes_back():
    state = apply_events(UserState(), [Event("signed_up", T0), Event("churned", T0 + timedelta(hours=1))], {})
    assert evaluate(state, {}, {}, T0 + timedelta(hours=2)).lifecycle_stage == "churned"
    state = apply_events(state, [Event("viewed", T0 + timedelta(days=1))], {})
    assert evaluate(state, {}, {}, T0 + timedelta(days=1)).lifecycle_stage != "churned"


def test_a_health_drop_over_seven_days_raises_risk():
    cfg = {"milestones": ["m"]}
    state = apply_events(UserState(), [Event("m", T0)] + [Event("v", T0 + timedelta(hours=h)) for h in range(40)], cfg)
    at = T0 + timedelta(days=15)
    steady = evaluate(state, {}, cfg, at)
    scoring.record_health(state, steady.health + 30, at - timedelta(days=6))
    dropped = evaluate(state, {}, cfg, at)
    assert scoring.RISK_LEVELS.index(dropped.risk_level) == min(3, scoring.RISK_LEVELS.index(steady.risk_level) + 1)


def test_state_round_trips_through_json():
    state = apply_events(UserState(), [Event("a", T0), Event("churned", T0)], {"milestones": ["a"]})
    scoring.record_health(state, 42.0, T0)
    assert UserState.from_json(state.to_json()) == state
