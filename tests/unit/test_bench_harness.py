"""The pure parts of bench/harness.py (no database, no server): a broken harness fails here
before anyone runs a bench."""

from __future__ import annotations

import importlib.util
import random
import statistics
import time
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("harness", Path(__file__).parents[2] / "bench" / "harness.py")
h = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(h)


def test_percentiles_are_the_inclusive_quantiles():
    rng = random.Random(7)
    xs = [rng.expovariate(1.0) for _ in range(501)]
    cuts = statistics.quantiles(xs, n=100, method="inclusive")
    for p in (1, 5, 50, 95, 99):
        assert h.percentile(xs, p) == pytest.approx(cuts[p - 1])
    assert h.percentile(xs, 50) == pytest.approx(statistics.median(xs))
    assert (h.percentile([3.0], 99), h.percentile([1.0, 2.0], 0), h.percentile([1.0, 2.0], 100)) == (3.0, 1.0, 2.0)


def test_summary_is_in_milliseconds():
    s = h.summary([0.001, 0.002, 0.003, 0.004])
    assert s == {"n": 4, "p50": pytest.approx(2.5), "p95": pytest.approx(3.85), "p99": pytest.approx(3.97),
                 "mean": pytest.approx(2.5), "min": pytest.approx(1.0), "max": pytest.approx(4.0)}


def test_table_aligns_the_columns_and_formats_numbers():
    out = h.table([["GET /api/settings", 1.5, 12345], ["GET /bare", 10.25, 7]], ["endpoint", "p50 ms", "n"])
    assert out.splitlines() == [
        "  endpoint          p50 ms      n",
        "  GET /api/settings   1.50 12,345",
        "  GET /bare          10.25      7",
    ]
    assert h.table([["a", "x"], ["bb", "y"]], align="><", indent="") == " a x\nbb y"


def test_interleave_reverses_the_order_every_other_round():
    assert list(h.interleave(3, ["ours", "bare"])) == [
        (0, "ours"), (0, "bare"), (1, "bare"), (1, "ours"), (2, "ours"), (2, "bare")]
    assert [s for _, s in h.interleave(2, "abc")] == list("abccba")


def test_interleave_stops_before_a_round_that_would_pass_the_budget():
    long_ago = time.monotonic() - 10
    assert list(h.interleave(3, ["a", "b"], budget=5, started=long_ago)) == [(0, "a"), (0, "b")]
    assert len(list(h.interleave(3, ["a", "b"], budget=60))) == 6


def test_options_take_their_type_default_and_help_from_one_line():
    ap = h.parser("A bench.\n\nMore.", """
--requests 3000   measured requests
--budget 100.0    seconds for the whole run: rounds that
                  would end later are skipped
--mode auto|on|off  the mode
--only ''         tree keys
--py-spy DIR      record the workers
--strict          exit 1 when the goal is missed
""")
    args = ap.parse_args([])
    assert vars(args) == {"requests": 3000, "budget": 100.0, "mode": "auto", "only": "", "py_spy": None,
                          "strict": False}
    args = ap.parse_args(["--requests", "5", "--budget", "2.5", "--mode", "off", "--py-spy", "/tmp/x", "--strict"])
    assert (args.requests, args.budget, args.mode, args.py_spy, args.strict) == (5, 2.5, "off", "/tmp/x", True)
    text = " ".join(ap.format_help().split())
    assert "A bench." in text and "(default 3000)" in text and "would end later are skipped (default 100.0)" in text
    with pytest.raises(SystemExit):
        ap.parse_args(["--mode", "sometimes"])


def test_sides_warm_up_then_time_each_side_once_a_round_interleaved():
    calls = []

    def side(name):
        def call():
            calls.append(name)
            return len(calls)
        return call
    times, last = h.sides({"ours": side("ours"), "bare": side("bare")}, 2, warmup=1)
    assert calls == ["ours", "bare", "ours", "bare", "bare", "ours"]
    assert {k: len(v) for k, v in times.items()} == {"ours": 2, "bare": 2} and last == {"ours": 6, "bare": 5}
    assert all(t >= 0 for v in times.values() for t in v)


def test_an_option_below_its_least_value_is_refused_before_anything_runs(capsys):
    ran = []
    options = "--users 1000   >=100 customers, 5% of them test-mode\n--runs 3 measured runs"
    assert "at least 100 (default 1000)" in " ".join(h.parser("A bench.", options).format_help().split())
    with pytest.raises(SystemExit) as exc:
        h.main("t", "A bench.", options, lambda bench, args: ran.append(args), argv=["--users", "99"])
    assert exc.value.code == 2 and not ran and "--users must be >= 100" in capsys.readouterr().err
