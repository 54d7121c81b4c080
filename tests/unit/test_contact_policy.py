"""The contact policy, pure: which rule blocks, until when, and how the engine acts on it
(docs/decisions.md, "Contact policy")."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from cs_daemon.engine.contact_policy import Contact, ContactPolicy, limits
from cs_daemon.engine.decisions import History, Learner, contact_limit, decide
from tests.unit.test_decisions import pb, user

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)


def ago(hours, channel="email"):
    return Contact(NOW - timedelta(hours=hours), channel)


def policy(**config):
    return ContactPolicy.of(config)


def test_an_empty_policy_limits_nothing():
    assert ContactPolicy.of({}) is None and ContactPolicy.of(None) is None
    assert ContactPolicy.of({"exempt_playbooks": ["a"], "channels": {"email": {}}}) is None
    assert limits(None, [ago(1)], NOW).block is None


@pytest.mark.parametrize("config, contacts, rule, free_at", [
    ({"max_per_user_per_day": 1}, [ago(2)], "max_per_user_per_day", NOW + timedelta(hours=22)),
    ({"max_per_user_per_day": 2}, [ago(2), ago(5), ago(30)], "max_per_user_per_day", NOW + timedelta(hours=19)),
    ({"max_per_user_per_day": 1}, [ago(24)], None, None),                 # the day is the last 24 h
    ({"max_per_user_per_week": 2}, [ago(30), ago(100)], "max_per_user_per_week", NOW + timedelta(hours=68)),
    ({"max_per_user_per_week": 2}, [ago(30), ago(168)], None, None),
    ({"min_hours_between": 24}, [ago(23), ago(60)], "min_hours_between", NOW + timedelta(hours=1)),
    ({"min_hours_between": 24}, [ago(25)], None, None),
    ({"max_per_user_per_day": 0}, [], "max_per_user_per_day", None),       # 0: no message at all, never frees
    ({"max_per_user_per_day": 1, "max_per_user_per_week": 1}, [ago(2)], "max_per_user_per_day",
     NOW + timedelta(hours=22)),
])
def test_each_user_wide_rule_blocks_until_its_window_frees(config, contacts, rule, free_at):
    block = limits(policy(**config), contacts, NOW).block
    if rule is None:
        assert block is None
    else:
        assert (block.rule, block.free_at, block.reason) == (rule, free_at, f"contact_policy: {rule}")


def test_channel_caps_count_their_channel_only():
    p = policy(channels={"email": {"max_per_user_per_week": 1}, "crm": {"max_per_user_per_day": 1}})
    found = limits(p, [ago(50, "email"), ago(2, "in_app"), ago(30, "crm")], NOW)
    assert found.block is None
    assert set(found.channels) == {"email"}
    assert found.channels["email"].rule == "channels.email.max_per_user_per_week"


def test_a_blocked_decision_is_none_with_the_rule_and_the_dry_run_says_why():
    history = History(policy=policy(max_per_user_per_day=1), contacts=(ago(3, "in_app"),))
    d = decide(user(), [pb("a"), pb("b", hints={"priority": 1})], history, now=NOW)
    assert d.action == "none" and d.reason == "contact_policy: max_per_user_per_day"
    for pid in ("a", "b"):
        verdict = d.rules[pid].as_dict()
        assert (verdict["verdict"], verdict["why"]) == ("rejected", "contact_policy: max_per_user_per_day")
        assert verdict["contact_policy"] == {"rule": "max_per_user_per_day", "count": 1, "limit": 1,
                                             "free_at": (NOW + timedelta(hours=21)).isoformat()}
    assert decide(user(), [pb("a")], history, now=NOW + timedelta(hours=21)).action == "send"


def test_a_playbooks_own_constraint_is_named_before_the_policy():
    history = History(for_user={"a": 1}, policy=policy(max_per_user_per_day=1), contacts=(ago(3),))
    d = decide(user(), [pb("a", constraints={"max_per_user": 1})], history, now=NOW)
    assert "max_per_user reached" in d.rules["a"].why and d.rules["a"].contact_policy is None


def test_a_capped_channel_moves_the_message_to_another_usable_channel():
    history = History(policy=policy(channels={"email": {"max_per_user_per_day": 1}}), contacts=(ago(1),))
    d = decide(user(), [pb("p", constraints={"channels": ["email", "in_app"]},
                           hints={"preferred_channel": "email"})], history, now=NOW)
    assert (d.action, d.channel) == ("send", "in_app")
    d = decide(user(), [pb("p", constraints={"channels": ["email"]})], history, now=NOW)
    assert d.action == "none" and d.reason == "contact_policy: channels.email.max_per_user_per_day"
    d = decide(user(opted_out={"in_app"}), [pb("p", constraints={"channels": ["email", "in_app"]})], history,
               now=NOW)
    assert d.action == "none" and d.reason == "contact_policy: channels.email.max_per_user_per_day"


def test_the_learner_chooses_among_the_channels_the_policy_leaves_open():
    history = History(policy=policy(channels={"email": {"max_per_user_per_day": 1}}), contacts=(ago(1),))
    for seed in range(20):
        learner = Learner({}, {}, random.Random(seed))
        d = decide(user(), [pb("p", constraints={"channels": ["email", "in_app", "webhook"]})], history,
                   now=NOW, learner=learner)
        assert d.action == "send" and d.channel in ("in_app", "webhook")


def test_exempt_playbooks_are_not_limited_and_escalations_never_are():
    history = History(policy=policy(max_per_user_per_day=1, exempt_playbooks=["x"]), contacts=(ago(1),))
    assert decide(user(), [pb("x")], history, now=NOW).action == "send"
    d = decide(user(), [pb("e", hints={"escalate": {"severity": "High"}})], history, now=NOW)
    assert d.action == "escalate"
    d = decide(user(), [pb("t", hints={"action_type": "coupon"})], history, now=NOW)
    assert d.action == "external_action"


def test_contact_limit_rechecks_a_decision_against_the_history_now():
    p = policy(max_per_user_per_day=1, channels={"crm": {"max_per_user_per_day": 1}}, exempt_playbooks=["x"])
    empty, one = History(policy=p), History(policy=p, contacts=(ago(1, "crm"),))
    assert contact_limit(pb("a"), "send", "email", empty, NOW) is None
    assert contact_limit(pb("a"), "send", "email", one, NOW) == "contact_policy: max_per_user_per_day"
    assert contact_limit(pb("x"), "send", "email", one, NOW) is None
    assert contact_limit(pb("a"), "escalate", "escalate", one, NOW) is None
    only_crm = History(policy=policy(channels={"crm": {"max_per_user_per_day": 1}}), contacts=(ago(1, "crm"),))
    assert contact_limit(pb("a"), "send", "crm", only_crm, NOW) == "contact_policy: channels.crm.max_per_user_per_day"
    assert contact_limit(pb("a"), "send", "email", only_crm, NOW) is None
