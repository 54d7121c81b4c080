"""Which option to take for a user, learned from outcomes: Thompson sampling over a
Beta-Bernoulli model with sharing between levels (docs/decisions.md, "Learning").

A pure module: the caller loads the counts (`Counts`) and persists the choice. Three
levels, each shrunk toward the one above with a fixed prior strength:

- the option over all users: Beta(1 + successes, 1 + failures), mean m0;
- each of the user's feature values ("plan=pro"): mean (K·m0 + s) / (K + n), compared on
  the log-odds scale with the same shrinkage of the option's overall counts; the values'
  differences add up (at most ±MAX_SHIFT) into m1: a value never seen, one every user
  has, or one that makes no difference adds nothing; features with independent effects add theirs;
- the user's segment, every feature value together ("plan=pro&region=eu"): the posterior
  Beta(K·m1 + s, K·(1 − m1) + f). A population whose kinds of users are defined by a
  combination of features converges here, whatever the single features say.

The choice is one draw from each option's segment posterior (the largest wins); its
propensity is the share of DRAWS further draws, plus that one, in which it came first.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Iterable, Mapping

GLOBAL = "*"
PRIOR_STRENGTH = 2.0        # pseudo-observations a level lends the one below it
DRAWS = 200                 # Monte Carlo draws behind a propensity
MAX_FEATURES = 12
EDGE = 1e-4
MAX_SHIFT = 3.0             # log-odds the feature values may move an option's overall estimate


@dataclass(frozen=True)
class Tally:
    successes: int = 0
    trials: int = 0

    @property
    def failures(self) -> int:
        return self.trials - self.successes


Counts = Mapping[tuple[str, str], Tally]      # (option, key) -> tally; key GLOBAL, "f=v" or a segment


def feature_keys(features: Mapping[str, object]) -> list[str]:
    """The "name=value" key of each feature, in name order (at most MAX_FEATURES)."""
    return [f"{str(name)[:40]}={_text(features[name])[:60]}" for name in sorted(features)[:MAX_FEATURES]]


def segment_key(features: Mapping[str, object]) -> str:
    keys = feature_keys(features)
    return "&".join(keys) if keys else GLOBAL


def keys_of(features: Mapping[str, object]) -> list[str]:
    """Every key an outcome of a decision with these features counts under."""
    singles = feature_keys(features)
    seg = segment_key(features)
    return [GLOBAL, *singles] + ([seg] if seg not in singles and seg != GLOBAL else [])


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Estimate:
    option: str
    alpha: float
    beta: float
    successes: int          # in the user's segment
    trials: int
    overall_successes: int
    overall_trials: int

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)

    @property
    def uncertainty(self) -> float:
        """The posterior's standard deviation."""
        a, b = self.alpha, self.beta
        return math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))


def estimate(option: str, features: Mapping[str, object], counts: Counts) -> Estimate:
    whole = counts.get((option, GLOBAL), Tally())
    m0 = (1 + whole.successes) / (2 + whole.trials)
    shift = 0.0
    singles = feature_keys(features)
    # each value against everyone on the same footing: a value never seen, or one every
    # user has, adds nothing
    base = _logit(_shrunk(whole, m0))
    for key in singles if len(singles) > 1 else ():      # one feature: its value is the segment
        t = counts.get((option, key), Tally())
        shift += _logit(_shrunk(t, m0)) - base if t.trials else 0.0
    m1 = _expit(_logit(m0) + max(-MAX_SHIFT, min(MAX_SHIFT, shift)))
    seg = counts.get((option, segment_key(features)), Tally()) if features else whole
    if not features:    # no features: the segment is everyone
        return Estimate(option, 1 + whole.successes, 1 + whole.failures, whole.successes, whole.trials,
                        whole.successes, whole.trials)
    return Estimate(option, PRIOR_STRENGTH * m1 + seg.successes, PRIOR_STRENGTH * (1 - m1) + seg.failures,
                    seg.successes, seg.trials, whole.successes, whole.trials)


def _shrunk(t: Tally, toward: float) -> float:
    return (PRIOR_STRENGTH * toward + t.successes) / (PRIOR_STRENGTH + t.trials)


def _logit(p: float) -> float:
    p = min(1 - EDGE, max(EDGE, p))
    return math.log(p / (1 - p))


def _expit(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@dataclass
class Choice:
    option: str
    propensity: float
    estimates: list[Estimate]
    probabilities: dict[str, float] = field(default_factory=dict)   # each option's chance of being picked

    @property
    def chosen(self) -> Estimate:
        return next(e for e in self.estimates if e.option == self.option)


def _draw(estimates: list[Estimate], rng: random.Random) -> int:
    """The index of the largest draw; ties go to the earlier option."""
    best, top = 0, -1.0
    for i, e in enumerate(estimates):
        x = rng.betavariate(e.alpha, e.beta)
        if x > top:
            best, top = i, x
    return best


def choose(options: Iterable[str], features: Mapping[str, object], counts: Counts, rng: random.Random,
           *, draws: int = DRAWS) -> Choice:
    """One Thompson draw picks the option; `draws` more estimate every option's
    probability of being picked (the picking draw counts as one of them)."""
    estimates = [estimate(o, features, counts) for o in dict.fromkeys(options)]
    if not estimates:
        raise ValueError("no options to choose from")
    picked = _draw(estimates, rng)
    wins = [0] * len(estimates)
    wins[picked] += 1
    if len(estimates) > 1:
        for _ in range(draws):
            wins[_draw(estimates, rng)] += 1
    total = sum(wins)
    probabilities = {e.option: w / total for e, w in zip(estimates, wins)}
    return Choice(estimates[picked].option, probabilities[estimates[picked].option], estimates, probabilities)


def probabilities(options: Iterable[str], features: Mapping[str, object], counts: Counts, rng: random.Random,
                  *, draws: int = DRAWS) -> dict[str, float]:
    """Each option's chance of being picked now (Monte Carlo, `draws` draws)."""
    estimates = [estimate(o, features, counts) for o in dict.fromkeys(options)]
    wins = [0] * len(estimates)
    for _ in range(draws if len(estimates) > 1 else 1):
        wins[_draw(estimates, rng)] += 1
    total = sum(wins)
    return {e.option: w / total for e, w in zip(estimates, wins)}
