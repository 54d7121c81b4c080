"""The learning module: Thompson sampling with sharing, on a simulated population."""

from __future__ import annotations

import random
from collections import Counter

from cs_daemon.learning import evaluate, model
from cs_daemon.learning.model import Tally

ACTIONS = ("feature_tour", "send_coupon", "call_user", "award_points")
# kinds of users are a combination of two features: the best action is an XOR of them
RATES = {
    ("smb", "eu"): {"feature_tour": 0.6, "send_coupon": 0.2, "call_user": 0.1, "award_points": 0.25},
    ("smb", "us"): {"feature_tour": 0.15, "send_coupon": 0.6, "call_user": 0.1, "award_points": 0.25},
    ("ent", "eu"): {"feature_tour": 0.15, "send_coupon": 0.2, "call_user": 0.6, "award_points": 0.25},
    ("ent", "us"): {"feature_tour": 0.6, "send_coupon": 0.2, "call_user": 0.1, "award_points": 0.25},
}
BEST = {seg: max(r, key=r.get) for seg, r in RATES.items()}


def _learn(counts: dict, features: dict, option: str, success: bool) -> None:
    for key in model.keys_of(features):
        t = counts.get((option, key), Tally())
        counts[(option, key)] = Tally(t.successes + int(success), t.trials + 1)


def _simulate(rounds: int, seed: int):
    rng, world = random.Random(seed), random.Random(seed + 1)
    counts: dict = {}
    picks = []
    for _ in range(rounds):
        seg = world.choice(list(RATES))
        features = {"plan": seg[0], "region": seg[1], "lifecycle_stage": "activated"}
        choice = model.choose(ACTIONS, features, counts, rng, draws=50)
        success = world.random() < RATES[seg][choice.option]
        _learn(counts, features, choice.option, success)
        picks.append((seg, choice, success))
    return counts, picks


def test_converges_on_the_best_action_per_kind_of_user():
    _, picks = _simulate(1200, seed=7)
    late = picks[600:]
    right = sum(1 for seg, choice, _ in late if choice.option == BEST[seg])
    assert right / len(late) > 0.85
    won = sum(1 for _, _, success in late if success)
    assert won / len(late) > 0.9 * 0.6 * 0.95


def test_the_same_seed_makes_the_same_choices():
    a = [c.option for _, c, _ in _simulate(100, seed=3)[1]]
    b = [c.option for _, c, _ in _simulate(100, seed=3)[1]]
    assert a == b


def test_it_still_tries_an_untried_option():
    counts: dict = {}
    features = {"plan": "smb"}
    for _ in range(30):
        _learn(counts, features, "send_coupon", False)
    for _ in range(10):
        _learn(counts, features, "send_coupon", True)
    rng = random.Random(1)
    picked = Counter(model.choose(["send_coupon", "brand_new"], features, counts, rng, draws=10).option
                     for _ in range(200))
    assert picked["brand_new"] > 50
    fresh = model.estimate("brand_new", features, counts)
    assert fresh.trials == 0 and fresh.uncertainty > model.estimate("send_coupon", features, counts).uncertainty


def test_propensities_sum_to_one_and_name_the_chosen_option():
    counts, _ = _simulate(200, seed=11)
    choice = model.choose(ACTIONS, {"plan": "smb", "region": "eu"}, counts, random.Random(5))
    assert abs(sum(choice.probabilities.values()) - 1) < 1e-9
    assert set(choice.probabilities) == set(ACTIONS)
    assert choice.propensity == choice.probabilities[choice.option] > 0


def test_a_single_option_is_chosen_with_certainty():
    choice = model.choose(["only"], {"plan": "smb"}, {}, random.Random(1))
    assert choice.option == "only" and choice.propensity == 1.0


def test_an_unseen_feature_value_borrows_the_options_overall_estimate():
    counts: dict = {}
    for i in range(40):
        _learn(counts, {"plan": "smb", "region": "eu"}, "a", i % 4 != 0)    # 75 %
        _learn(counts, {"plan": "smb", "region": "eu"}, "b", i % 4 == 0)    # 25 %
    a = model.estimate("a", {"plan": "new_plan", "region": "apac"}, counts)
    b = model.estimate("b", {"plan": "new_plan", "region": "apac"}, counts)
    assert a.trials == b.trials == 0
    assert a.mean > 0.6 > 0.4 > b.mean


def _uniform_log(n: int, seed: int) -> list[evaluate.Logged]:
    world = random.Random(seed)
    logs = []
    for _ in range(n):
        seg = world.choice(list(RATES))
        choice = world.choice(ACTIONS)
        logs.append(evaluate.Logged(ACTIONS, choice, 1 / len(ACTIONS), world.random() < RATES[seg][choice],
                                    {"plan": seg[0], "region": seg[1]}))
    return logs


def test_evaluate_recovers_a_fixed_policys_success_rate_from_uniform_logs():
    logs = _uniform_log(4000, seed=2)
    for action in ACTIONS:
        truth = sum(r[action] for r in RATES.values()) / len(RATES)
        got = evaluate.snips(f"action:{action}", logs, evaluate.single(action))
        assert got.ci[0] <= truth <= got.ci[1], (action, truth, got)
    oracle = evaluate.snips("oracle", logs, lambda d: 1.0 if d.choice == BEST[(d.features["plan"],
                                                                               d.features["region"])] else 0.0)
    assert oracle.ci[0] <= 0.6 <= oracle.ci[1]
    everyone = evaluate.snips("uniform", logs, evaluate.uniform)
    assert everyone.decisions == 4000 and everyone.ci[0] < everyone.success_rate < everyone.ci[1]


def test_doubly_robust_recovers_fixed_policies_with_an_interval_no_wider_than_snips():
    logs = _uniform_log(4000, seed=2)
    counts: dict = {}
    for d in logs:       # the learner trained on the same outcomes is the reward model
        _learn(counts, d.features, d.choice, d.success)

    def rewards(d):
        return {o: model.estimate(o, d.features, counts).mean for o in d.options}
    policies = {a: (evaluate.always(a), sum(r[a] for r in RATES.values()) / len(RATES)) for a in ACTIONS}
    policies["uniform"] = (evaluate.evenly, sum(sum(r.values()) for r in RATES.values()) / len(RATES) / len(ACTIONS))
    policies["oracle"] = (lambda d: {BEST[(d.features["plan"], d.features["region"])]: 1.0}, 0.6)
    for name, (policy, truth) in policies.items():
        robust = evaluate.doubly_robust(name, logs, policy, rewards)
        assert robust.decisions == 4000 and robust.ci[0] <= truth <= robust.ci[1], (name, truth, robust)
        plain = evaluate.snips(name, logs, evaluate.chance(policy))
        if name not in ("award_points", "oracle"):    # success differs by kind of user: the model explains it
            assert robust.ci[1] - robust.ci[0] <= plain.ci[1] - plain.ci[0], (name, robust, plain)
    assert evaluate.doubly_robust("x", logs, evaluate.always("x"), rewards).success_rate is None


def test_doubly_robust_interval_stays_within_zero_and_one_in_order():
    """One success the model thought unlikely, on a rare choice: its term is above 1 (a
    weighted residual), as seen from `POST /api/decisions/evaluate` with one outcome."""
    logs = [evaluate.Logged(("a", "b"), "a", 0.5, True, {})]
    robust = evaluate.doubly_robust("action:a", logs, evaluate.always("a"), lambda d: {"a": 0.9, "b": 0.1})
    assert robust.success_rate == 1.0
    assert 0.0 <= robust.ci[0] <= robust.ci[1] <= 1.0, robust
    low = evaluate.doubly_robust("action:a", [evaluate.Logged(("a", "b"), "a", 0.5, False, {})],
                                 evaluate.always("a"), lambda d: {"a": 0.1, "b": 0.1})
    assert low.success_rate == 0.0 and 0.0 <= low.ci[0] <= low.ci[1] <= 1.0, low


def test_doubly_robust_has_no_estimate_for_a_policy_that_made_none_of_the_logged_choices():
    """It was the model's guess alone, 0.5 with an interval of no width, from evaluate."""
    logs = [evaluate.Logged(("a", "b"), "a", 0.5, True, {}), evaluate.Logged(("a", "b"), "a", 0.5, False, {})]
    never = evaluate.doubly_robust("action:b", logs, evaluate.always("b"), lambda d: {"a": 0.5, "b": 0.5})
    assert (never.success_rate, never.ci) == (None, None)
    assert evaluate.doubly_robust("action:a", logs, evaluate.always("a"), lambda d: {"a": 0.5, "b": 0.5}).ci


def test_evaluate_without_a_usable_decision_has_no_estimate():
    assert evaluate.snips("action:x", _uniform_log(10, 1), evaluate.single("x")).success_rate is None


def test_a_value_every_user_has_or_none_has_shown_does_not_move_the_estimate():
    counts: dict = {}
    for success in (False, False, True):
        _learn(counts, {"lifecycle_stage": "new", "risk_level": "low"}, "a", success)
    fresh_segment = model.estimate("a", {"lifecycle_stage": "new", "risk_level": "low", "plan": "pro"}, counts)
    assert fresh_segment.trials == 0
    assert abs(fresh_segment.mean - (1 + 1) / (2 + 3)) < 1e-9     # the overall rate, no more
