"""The agent's scrubbing of what it records and emits (docs/ai.md, "The agent")."""

from __future__ import annotations

from cs_daemon.agent.tools import scrub, summary


def test_scrub_hides_addresses_and_secret_values_and_keeps_the_rest():
    value = {"note": "write to ada@example.com or bob.smith+x@mail.example.org", "api_key": "sk-123",
             "nested": [{"password": "hunter2", "plan": "pro", "n": 3, "ok": True}], "Authorization": "Bearer x"}
    out = scrub(value)
    assert out["note"] == "write to [email] or [email]"
    assert out["api_key"] == "[hidden]" and out["Authorization"] == "[hidden]"
    assert out["nested"] == [{"password": "[hidden]", "plan": "pro", "n": 3, "ok": True}]


def test_a_checks_passed_is_not_taken_for_a_password():
    out = scrub({"checks": [{"check": "placeholders", "passed": False}], "passed_all": True,
                 "pass": "x", "pass_hash": "y", "passwd": "z", "Passphrase": "w"})
    assert out["checks"] == [{"check": "placeholders", "passed": False}] and out["passed_all"] is True
    assert {out[k] for k in ("pass", "pass_hash", "passwd", "Passphrase")} == {"[hidden]"}


def test_long_texts_and_lists_are_cut():
    assert len(scrub("x" * 5000)) == 501 and len(scrub(list(range(500)))) == 50
    assert len(summary("y" * 1000)) == 300
