"""`cs decide evaluate` (docs/decisions.md, "Evaluating a policy")."""

from __future__ import annotations

import json

from tests.api.test_evaluate import _log_and_learn_uniformly, _log_uniformly


def test_cli_prints_the_estimates(cs, tenant, rt):
    _log_uniformly(rt, tenant, 300)
    code, out, _ = cs("decide", "evaluate", "--tenant", tenant.id, "--since", "2026-10-01T00:00:00", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["decisions"] == 300 and body["estimates"][0]["policy"] == "current"
    code, out, _ = cs("decide", "evaluate", "--tenant", tenant.id, "--since", "1d")
    assert code == 0 and json.loads(cs("decide", "evaluate", "--tenant", tenant.id, "--since", "1d",
                                       "--json")[1])["decisions"] == 0   # the rows are older than a day
    code, out, _ = cs("decide", "evaluate", "--tenant", tenant.id)
    assert code == 0 and "action:feature_tour" in out and "300 logged decisions" in out
    code, _, err = cs("decide", "evaluate", "--tenant", tenant.id, "--since", "last week")
    assert code != 0 and "--since" in err and "Traceback" not in err


def test_cli_shows_doubly_robust_once_the_learner_has_counts(cs, tenant, rt):
    _log_and_learn_uniformly(rt, tenant, 300, seed=5)
    body = json.loads(cs("decide", "evaluate", "--tenant", tenant.id, "--json")[1])
    assert all(set(e["doubly_robust"]) == {"estimate", "ci"} for e in body["estimates"])
    code, out, _ = cs("decide", "evaluate", "--tenant", tenant.id)
    assert code == 0 and "doubly robust" in out
