"""How well would a policy have done on the logged decisions: self-normalised inverse
propensity scoring, and doubly robust where a reward model is at hand (docs/decisions.md,
"Evaluating a policy"). A pure module.

Each logged decision chose option a with probability p (its propensity) and then
succeeded (r = 1) or not (r = 0). A policy that would choose a with probability π gets
weight w = π / p; its success rate is Σ w·r / Σ w, with a 95 % interval from the
delta-method variance Σ w²(r − est)² / (Σ w)². Valid when every propensity was logged
truthfully and above zero for the options the policy picks, and outcomes depend only on
the user and the option (not on when or how often they were asked).

Doubly robust adds a reward model q(d, a), the estimated success of option a for the user
of decision d: each decision contributes Σ_a π(a)·q(d, a) + w·(r − q(d, choice)), and the
estimate is their mean, with a 95 % interval from their standard error. It stays unbiased
when either the propensities or the model are right, and its interval narrows as far as
the model explains who succeeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

Z95 = 1.959964


@dataclass(frozen=True)
class Logged:
    options: tuple[str, ...]
    choice: str
    propensity: float
    success: bool
    features: dict


@dataclass(frozen=True)
class Estimate:
    policy: str
    success_rate: float | None
    ci: tuple[float, float] | None
    decisions: int              # with a non-zero weight

    def as_dict(self) -> dict:
        return {"policy": self.policy, "success_rate": None if self.success_rate is None else round(self.success_rate, 4),
                "ci": None if self.ci is None else [round(self.ci[0], 4), round(self.ci[1], 4)],
                "decisions": self.decisions}


Policy = Callable[[Logged], float]      # the probability the policy picks the logged choice
Distribution = Callable[[Logged], Mapping[str, float]]     # the policy's probability of each option
Rewards = Callable[[Logged], Mapping[str, float]]          # the model's success estimate of each option


def snips(name: str, logs: Iterable[Logged], policy: Policy) -> Estimate:
    weights, rewards = [], []
    for d in logs:
        if d.propensity > 0:
            weights.append(policy(d) / d.propensity)
            rewards.append(1.0 if d.success else 0.0)
    total = sum(weights)
    if total <= 0:
        return Estimate(name, None, None, 0)
    est = sum(w * r for w, r in zip(weights, rewards)) / total
    var = sum(w * w * (r - est) ** 2 for w, r in zip(weights, rewards)) / total ** 2
    half = Z95 * math.sqrt(var)
    return Estimate(name, est, (max(0.0, est - half), min(1.0, est + half)), sum(1 for w in weights if w > 0))


def doubly_robust(name: str, logs: Iterable[Logged], policy: Distribution, rewards: Rewards) -> Estimate:
    """Over the decisions where the policy would pick one of the options offered; none when
    it would have made none of the logged choices (SNIPS's decisions), where the estimate
    would be the model's guess alone with an interval of zero width."""
    terms = []
    matched = 0
    for d in logs:
        chances = policy(d)
        if d.propensity <= 0 or sum(chances.values()) <= 0:
            continue
        q = rewards(d)
        direct = sum(p * q.get(o, 0.0) for o, p in chances.items())
        residual = (1.0 if d.success else 0.0) - q.get(d.choice, 0.0)
        terms.append(direct + chances.get(d.choice, 0.0) / d.propensity * residual)
        matched += chances.get(d.choice, 0.0) > 0
    n = len(terms)
    if not matched:
        return Estimate(name, None, None, 0)
    est = sum(terms) / n
    var = sum((t - est) ** 2 for t in terms) / (n - 1) / n if n > 1 else 0.0
    half = Z95 * math.sqrt(var)
    # a term may fall outside [0, 1] (a weighted residual): the rate and both bounds are
    # held within it, so the interval never runs backwards (low above high)
    return Estimate(name, _rate(est), (_rate(est - half), _rate(est + half)), n)


def _rate(value: float) -> float:
    return min(1.0, max(0.0, value))


def chance(policy: Distribution) -> Policy:
    return lambda d: policy(d).get(d.choice, 0.0)


def always(option: str) -> Distribution:
    return lambda d: {option: 1.0} if option in d.options else {}


def evenly(d: Logged) -> dict[str, float]:
    return dict.fromkeys(d.options, 1.0 / len(d.options))


def single(option: str) -> Policy:
    return chance(always(option))


uniform: Policy = chance(evenly)
