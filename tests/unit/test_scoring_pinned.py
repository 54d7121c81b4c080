"""Scoring's exact results, pinned: varied configs, events (out of order, across batches,
in several time zones), traits and sweep times go through the path ingest and the sweep
take (state from and to JSON, `apply_events`, `state.rescore`), and every score, stage,
risk, change, decayed mass and the final stored state must equal, to the last bit, what scoring_pinned.json
recorded. A rewrite of scoring for speed must not move a single float (the floats are
those of x86-64 Linux: the C library's exp and pow make some of them).

The file is made by `python -m tests.unit.test_scoring_pinned --write`: only for a rule
change docs/scoring.md states, never to make a refactor pass."""

from __future__ import annotations

import json
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cs_daemon.customers.bulk import CustomerRow
from cs_daemon.customers.state import rescore
from cs_daemon.engine import scoring

PINNED = Path(__file__).with_name("scoring_pinned.json")
CASES = 80
T0 = datetime(2026, 3, 1, 9, 30, tzinfo=timezone.utc)
ZONES = (timezone.utc, timezone(timedelta(hours=2)), timezone(timedelta(hours=-7, minutes=-30)))
NAMES = ("signed_up", "created_project", "invited_teammate", "seat_added", "plan_upgraded", "churned",
         "account_closed", "viewed", "exported", "$identify", "$locale")
TEAM_SIZES = (None, 0, 1, 7, 250, "12", "many", 3.5)


def _config(rnd: random.Random) -> dict:
    """Some of the scoring keys, each possibly null (its default then applies)."""
    choices = {
        "milestones": lambda: rnd.sample(NAMES[:8], rnd.randint(0, 4)),
        "expansion_events": lambda: rnd.sample(NAMES[:8], rnd.randint(0, 3)),
        "churn_events": lambda: rnd.sample(NAMES[4:8], rnd.randint(0, 2)),
        "health_weights": lambda: {k: rnd.choice((None, 0, 0.0, 1, rnd.uniform(0, 100)))
                                   for k in rnd.sample(("activation", "engagement", "expansion"), rnd.randint(0, 3))},
        "engagement_half_life_days": lambda: rnd.choice((1, 7, rnd.uniform(0.1, 60))),
        "engagement_saturation": lambda: rnd.choice((0.05, 10, rnd.uniform(0.5, 100))),
        "new_for_hours": lambda: rnd.choice((0, 24, rnd.uniform(0, 200))),
        "onboarding_days": lambda: rnd.choice((0, 14, rnd.uniform(0, 40))),
        "engaged_min_engagement": lambda: rnd.choice((0, 60, rnd.uniform(0, 100))),
        "dormant_after_days": lambda: rnd.choice((14, rnd.uniform(0.5, 30))),
        "churned_after_days": lambda: rnd.choice((30, rnd.uniform(1, 60))),
        "risk_thresholds": lambda: {k: rnd.uniform(0, 100)
                                    for k in rnd.sample(("medium", "high", "critical"), rnd.randint(0, 3))},
        "risk_trend_drop": lambda: rnd.choice((0, 15, rnd.uniform(0, 50))),
    }
    if rnd.random() < 0.15:
        return rnd.choice(({}, None))
    return {k: (None if rnd.random() < 0.1 else make()) for k, make in choices.items() if rnd.random() < 0.5}


def _at(rnd: random.Random, start: datetime, days: float) -> datetime:
    moment = start + timedelta(days=rnd.uniform(-days / 4, days), microseconds=rnd.randint(0, 999_999))
    return moment.astimezone(rnd.choice(ZONES))


def _case(seed: int) -> dict:
    """One user through a few ingest batches, then a few sweeps: what each step scored."""
    rnd = random.Random(seed)
    config = _config(rnd)
    if seed % 2:   # as ingest and the sweep pass it: resolved once
        config = scoring.Rules.of(config)
    customer = CustomerRow(id=f"u{seed}", traits={"plan": "pro"} if rnd.random() < 0.5 else {},
                           team_size=rnd.choice(TEAM_SIZES), created_at=T0)
    now = T0
    steps = []
    for _ in range(rnd.randint(1, 4)):
        now += timedelta(hours=rnd.uniform(0, 24 * 20))
        events = [scoring.Event(rnd.choice(NAMES), _at(rnd, now - timedelta(days=3), 3))
                  for _ in range(rnd.randint(0, 12))]
        state = scoring.UserState.from_json(customer.state)
        if state.first_seen_at is None and not customer.state and events:
            state.first_seen_at = min(customer.created_at, min(e.at for e in events))
        scoring.apply_events(state, events, config)
        steps.append(_step(customer, state, config, now))
    for _ in range(rnd.randint(0, 3)):
        now += timedelta(days=rnd.uniform(0, 20))
        state = scoring.UserState.from_json(customer.state)
        if state.first_seen_at is None:
            state.first_seen_at = customer.created_at
        steps.append(_step(customer, state, config, now))
    return {"seed": seed, "steps": steps, "state": customer.state}


def _step(customer: CustomerRow, state: scoring.UserState, config: dict | scoring.Rules | None,
          now: datetime) -> dict:
    changes = rescore(customer, state, config, now)
    return {"now": now.isoformat(), "changes": changes,
            "scores": [customer.activation_score, customer.engagement_score, customer.expansion_score,
                       customer.health, customer.risk_level, customer.lifecycle_stage],
            "last_activity_at": customer.last_activity_at.isoformat() if customer.last_activity_at else None,
            "masses": [state.engagement_mass, state.expansion_mass]}


def _cases() -> list[dict]:
    return json.loads(json.dumps([_case(seed) for seed in range(CASES)]))


def test_scores_equal_the_pinned_ones_to_the_last_bit():
    pinned = json.loads(PINNED.read_text())
    for found, expected in zip(_cases(), pinned, strict=True):
        # the text too: json compares -0.0 equal to 0.0 and 1 to 1.0
        assert found == expected and json.dumps(found) == json.dumps(expected), f"case {expected['seed']}"


def test_the_pinned_cases_reach_every_stage_and_risk():
    steps = [s for case in json.loads(PINNED.read_text()) for s in case["steps"]]
    assert {s["scores"][5] for s in steps} == set(scoring.STAGES)
    assert {s["scores"][4] for s in steps} == set(scoring.RISK_LEVELS)
    assert any(s["changes"] for s in steps)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    PINNED.write_text(json.dumps(_cases(), separators=(",", ":")) + "\n")
