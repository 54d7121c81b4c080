"""How well would a policy have done on the logged decisions: self-normalised inverse
propensity scoring (docs/decisions.md, "Evaluating a policy"). A pure module.

Each logged decision chose option a with probability p (its propensity) and then
succeeded (r = 1) or not (r = 0). A policy that would choose a with probability π gets
weight w = π / p; its success rate is Σ w·r / Σ w, with a 95 % interval from the
delta-method variance Σ w²(r − est)² / (Σ w)². Valid when every propensity was logged
truthfully and above zero for the options the policy picks, and outcomes depend only on
the user and the option (not on when or how often they were asked).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

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


def single(option: str) -> Policy:
    return lambda d: 1.0 if d.choice == option else 0.0


def uniform(d: Logged) -> float:
    return 1.0 / len(d.options)
