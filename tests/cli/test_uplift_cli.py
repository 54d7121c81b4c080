"""cs analytics --tenant ID uplift: each playbook's uplift over its holdout as a table, or
one JSON document (docs/decisions.md, "Holdout and uplift")."""

from __future__ import annotations

import json

from tests.api.test_uplift import _by_hand, data  # noqa: F401  (the fixed data, and the hand computation)


def test_the_uplift_table_and_its_json(cs, data):  # noqa: F811
    code, out, _ = cs("analytics", "--tenant", data.id, "uplift", "--json")
    body = json.loads(out)
    assert code == 0 and body["range"] == "30d"
    assert [u["name"] for u in body["uplift"]] == ["Proven", "Unproven", "Untested"]
    assert body["uplift"][0]["uplift_ci"] == [0.0524, 0.3339] and body["uplift"][0]["uplift_significant"] is True
    code, out, _ = cs("analytics", "--tenant", data.id, "uplift")
    assert code == 0 and "Uplift over the holdout, last 30d" in out
    proven = next(line for line in out.splitlines() if "Proven" in line and "Unproven" not in line)
    d, low, high = _by_hand(56, 70, 48, 80)
    for shown in ("56/70 (80.0%)", "48/80 (60.0%)", f"{d * 100:+.1f} pts", f"{low * 100:+.1f} pts",
                  f"{high * 100:+.1f} pts", "yes"):
        assert shown in proven, (shown, proven)
    untested = next(line for line in out.splitlines() if "Untested" in line)
    assert "3/4 (75.0%)" in untested and "0/0" in untested and "—" in untested and "no" in untested


def test_an_unknown_view_is_one_clear_error(cs, tenant):
    code, out, err = cs("analytics", "--tenant", tenant.id, "upflit")
    assert code != 0 and out == "" and "upflit" in err and "Traceback" not in err
