"""The pure decision engine: matching, constraints, ranking and reasons."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cs_daemon.engine import conditions
from cs_daemon.engine.decisions import History, PlaybookSpec, UserContext, decide, in_quiet_hours

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)


def user(**values):
    traits = values.pop("traits", {})
    counts = values.pop("events", {})
    opted = values.pop("opted_out", frozenset())
    tz = values.pop("timezone", None)
    base = {"lifecycle_stage": "onboarding", "engagement_score": 20, "risk_level": "medium", "email": "a@b.co"}
    base.update(values)
    facts = conditions.Facts(values=base, traits=traits, last_activity_at=NOW - timedelta(days=1),
                             created_at=NOW - timedelta(days=5), now=NOW,
                             event_count=lambda name, within: counts.get(name, 0))
    return UserContext("u1", facts, email=base.get("email"), timezone=tz, opted_out=frozenset(opted))


def pb(pid, entry=None, constraints=None, hints=None, rate=None, exit_=None):
    return PlaybookSpec(pid, f"pb-{pid}", entry or {}, exit_ or {}, constraints or {}, hints or {}, rate)


def test_picks_the_highest_ranked_matching_playbook_and_explains_the_rest():
    playbooks = [
        pb("low", {"field": "engagement_score", "op": "lt", "value": 40}),
        pb("high", {"field": "engagement_score", "op": "lt", "value": 40}, hints={"priority": 2}),
        pb("miss", {"field": "lifecycle_stage", "op": "eq", "value": "churned"}),
    ]
    d = decide(user(), playbooks, History(), now=NOW)
    assert (d.action, d.playbook_id, d.channel) == ("send", "high", "email")
    assert d.matched_playbooks == 2
    assert d.rules["high"].verdict == "picked" and d.rules["low"].verdict == "eligible"
    assert d.rules["miss"].verdict == "not_matched"
    assert "pb-high" in d.reasoning and 0 < d.confidence <= 1


def test_observed_success_rate_ranks_equal_priorities():
    playbooks = [pb("a", rate=0.2), pb("b", rate=0.9)]
    assert decide(user(), playbooks, History(), now=NOW).playbook_id == "b"


def test_each_constraint_blocks_with_its_reason():
    last = {"p": NOW - timedelta(hours=2)}
    cases = [
        ({"max_per_user": 1}, History(for_user={"p": 1}), "max_per_user"),
        ({"cooldown_hours": 24}, History(last_for_user=last), "cooldown"),
        ({"max_per_day": 5}, History(last_day={"p": 5}), "max_per_day"),
        ({"min_confidence": 0.99}, History(), "min_confidence"),
        ({"channels": ["crm"]}, History(), None),
        ({"quiet_hours": {"start": "11:00", "end": "13:00", "timezone": "UTC"}}, History(), "quiet hours"),
    ]
    for constraints, history, reason in cases:
        d = decide(user(), [pb("p", constraints=constraints)], history, now=NOW)
        if reason is None:
            assert d.action == "send" and d.channel == "crm"
        else:
            assert d.action == "none", constraints
            assert d.rules["p"].verdict == "rejected" and reason in d.rules["p"].why
            assert reason in d.reason


def test_opt_out_and_missing_email_choose_another_channel_or_block():
    d = decide(user(opted_out={"email"}), [pb("p")], History(), now=NOW)
    assert d.channel == "in_app"
    d = decide(user(opted_out={"all"}), [pb("p")], History(), now=NOW)
    assert d.action == "none" and "opted out" in d.reason
    d = decide(user(email=None), [pb("p", constraints={"channels": ["email"]})], History(), now=NOW)
    assert d.action == "none" and "no email" in d.reason


def test_escalate_and_external_action():
    d = decide(user(), [pb("e", hints={"escalate": {"severity": "High"}})], History(), now=NOW)
    assert (d.action, d.channel, d.severity) == ("escalate", "escalate", "High")
    d = decide(user(), [pb("x", hints={"action_type": "award_points"})], History(), now=NOW)
    assert (d.action, d.action_type, d.channel) == ("external_action", "award_points", None)


def test_triggers_and_exit_conditions():
    triggered = pb("t", {"trigger": {"event": "signed_up"}})
    assert decide(user(), [triggered], History(), now=NOW).rules["t"].verdict == "not_triggered"
    assert decide(user(), [triggered], History(), now=NOW, events=["signed_up"]).action == "send"
    assert decide(user(), [triggered], History(), now=NOW, every=True).action == "send"
    plain = pb("p")
    waiting = decide(user(), [plain], History(), now=NOW, events=["clicked"])
    assert waiting.rules["p"].verdict == "not_triggered" and "None" not in waiting.reason
    assert "has no trigger event: waits for the decision sweep" in waiting.rules["p"].why
    assert "'signed_up'" in decide(user(), [triggered], History(), now=NOW).rules["t"].why
    assert decide(user(), [plain], History(), now=NOW, events=["clicked"], state_changed=True).action == "send"
    done = pb("d", exit_={"field": "lifecycle_stage", "op": "eq", "value": "onboarding"})
    assert "exit conditions" in decide(user(), [done], History(), now=NOW).reason


def test_none_without_playbooks_or_matches():
    assert decide(user(), [], History(), now=NOW).reason == "no active playbooks"
    d = decide(user(), [pb("m", {"field": "health", "op": "gt", "value": 99})], History(), now=NOW)
    assert d.reason == "no playbook's entry conditions match"


def test_quiet_hours_wrap_midnight_in_the_users_time_zone():
    quiet = {"start": "22:00", "end": "07:00", "timezone": "UTC"}
    assert in_quiet_hours(quiet, "Asia/Tokyo", datetime(2026, 11, 2, 14, 0, tzinfo=timezone.utc))  # 23:00 JST
    assert not in_quiet_hours(quiet, "Asia/Tokyo", datetime(2026, 11, 2, 3, 0, tzinfo=timezone.utc))  # 12:00
    assert in_quiet_hours(quiet, None, datetime(2026, 11, 2, 6, 59, tzinfo=timezone.utc))


def test_a_playbook_without_limits_acts_once_per_user():
    assert decide(user(), [pb("p")], History(for_user={"p": 1}), now=NOW).reason.endswith("max_per_user reached (1 of 1)")
    repeat = pb("p", constraints={"cooldown_hours": 1})
    assert decide(user(), [repeat], History(for_user={"p": 5}), now=NOW).action == "send"


def test_the_options_are_every_way_an_eligible_playbook_may_act_and_nothing_else():
    playbooks = [
        pb("mail", constraints={"channels": ["email", "in_app", "crm"]}, hints={"priority": 2}),
        pb("esc", hints={"escalate": {"severity": "High"}}),
        pb("act", hints={"action_type": "grant_credit"}),
        pb("cool", constraints={"cooldown_hours": 24}),
        pb("miss", {"field": "lifecycle_stage", "op": "eq", "value": "churned"}),
    ]
    history = History(last_for_user={"cool": NOW - timedelta(hours=1)})
    d = decide(user(opted_out={"crm"}), playbooks, history, now=NOW)
    ids = [o["option_id"] for o in d.options]
    assert ids[:2] == ["mail:email", "mail:in_app"]                      # ranked first; crm opted out
    assert set(ids[2:]) == {"esc:escalate", "act:action:grant_credit"}
    by_id = {o["option_id"]: o for o in d.options}
    assert (by_id["esc:escalate"]["action"], by_id["esc:escalate"]["severity"]) == ("escalate", "High")
    assert (by_id["act:action:grant_credit"]["action"], by_id["act:action:grant_credit"]["action_type"]) == (
        "external_action", "grant_credit")
    assert by_id["mail:in_app"]["playbook"] == "pb-mail" and by_id["mail:in_app"]["estimate"] is None
    no_email = decide(user(email=None), [pb("mail", constraints={"channels": ["email", "in_app"]})], History(), now=NOW)
    assert [o["option_id"] for o in no_email.options] == ["mail:in_app"]
    blocked = decide(user(), [pb("cool", constraints={"cooldown_hours": 24})], history, now=NOW)
    assert blocked.action == "none" and blocked.options == []


def test_the_reasoning_names_the_channel_the_learner_picked():
    import random

    from cs_daemon.engine.decisions import Learner

    playbooks = [pb("p", constraints={"channels": ["email", "in_app"]})]
    seen = set()
    for seed in range(40):
        d = decide(user(), playbooks, History(), now=NOW, learner=Learner({}, {}, random.Random(seed)))
        seen.add(d.channel)
        assert f"send on {d.channel}." in d.reasoning
        other = ({"email", "in_app"} - {d.channel}).pop()
        assert f"send on {other}." not in d.reasoning
    assert seen == {"email", "in_app"}
