"""The deterministic message and the quality checks of every message (docs/ai.md)."""

from __future__ import annotations

import pytest

from cs_daemon.engine import messages
from cs_daemon.engine.messages import CHANNEL_LIMITS, passed_all, quality_checks, render_template

ADA = {"name": "Ada Lovelace", "company": "Analytical Engines", "email": "ada@example.com"}
BRAND = {
    "product_description": "Acme Reports. Dashboards for busy teams.",
    "tone_guidelines": "Warm and concise.",
    "things_to_mention": ["the new report builder"],
    "things_to_avoid": ["cheap", "free trial", "competitor"],
}
HINTS = {"goal": "build your first dashboard", "cta_url": "https://acme.test/start"}


def by_name(checks: list[dict]) -> dict[str, dict]:
    return {c["check"]: c for c in checks}


def check_of(name: str, message: str, *, channel="email", brand=BRAND, hints=HINTS) -> dict:
    return by_name(quality_checks(message, channel=channel, brand=brand, hints=hints))[name]


# --- render_template ----------------------------------------------------------------------

def test_every_known_placeholder_is_filled_from_user_hints_and_brand():
    template = ("Dear {{name}} ({{ first_name }}) at {{company}}: {{product}} can help you "
                "{{goal}}. Open {{cta_url}}")
    text = render_template(template, channel="email", user=ADA, hints=HINTS, brand=BRAND)
    assert text == ("Dear Ada Lovelace (Ada) at Analytical Engines: Acme Reports can help you "
                    "build your first dashboard. Open https://acme.test/start")


def test_product_is_the_first_sentence_of_the_description_or_our_product():
    one = {"product_description": "Acme Reports turns data into dashboards! Fast and simple."}
    assert messages.product_name(one) == "Acme Reports turns data into dashboards"
    assert messages.product_name({"product_description": "  "}) == "our product"
    assert messages.product_name(None) == "our product"


def test_missing_user_details_use_neutral_words():
    text = render_template("Hi {{first_name}} / {{name}} of {{company}}", channel="email",
                           user={"name": "ada@example.com"}, hints={}, brand=None)
    assert text == "Hi there / there of your team"


def test_unknown_placeholders_and_placeholders_without_a_value_stay_for_the_check():
    text = render_template("Hi {{first_name}}, see {{cta_url}} {{discount}}", channel="email",
                           user=ADA, hints={}, brand=BRAND)
    assert text == "Hi Ada, see {{cta_url}} {{discount}}"
    assert not check_of("placeholders", text)["passed"]


def test_a_value_that_looks_like_a_placeholder_is_not_filled_again():
    text = render_template("Hi {{name}}", channel="email", user={"name": "{{company}}"}, hints={},
                           brand=None)
    assert text == "Hi {{company}}"


def test_default_email_greets_states_the_goal_mentions_the_brand_and_links():
    text = render_template(None, channel="email", user=ADA, hints=HINTS, brand=BRAND)
    assert text.startswith("Hi Ada,\n\nWe'd like to help you get the most out of Acme Reports.")
    assert "Suggested next step: build your first dashboard." in text
    assert "Worth knowing: the new report builder." in text
    assert "Start here: https://acme.test/start" in text
    assert passed_all(quality_checks(text, channel="email", brand=BRAND, hints=HINTS))


def test_default_in_app_message_is_one_short_paragraph_within_280_characters():
    long_goal = {"goal": "explore " + "every dashboard " * 40, "cta_url": "https://acme.test/x"}
    text = render_template("", channel="in_app", user=ADA, hints=long_goal, brand=BRAND)
    assert text.startswith("Hi Ada, we'd like to help")
    assert "\n" not in text and len(text) <= CHANNEL_LIMITS["in_app"]
    assert text.endswith("…")


def test_default_without_anything_known_is_still_a_complete_message():
    text = render_template(None, channel="webhook", user={}, hints={}, brand=None)
    assert text == "Hi there, we'd like to help you get the most out of our product."
    assert passed_all(quality_checks(text, channel="webhook", brand=None, hints={}))


def test_an_unknown_channel_is_refused():
    with pytest.raises(ValueError, match="unknown channel 'sms'"):
        render_template(None, channel="sms", user=ADA, hints={}, brand=None)


# --- things_to_avoid ----------------------------------------------------------------------

def test_things_to_avoid_passes_when_no_phrase_appears():
    result = check_of("things_to_avoid", "Your reports are ready, Ada.")
    assert result == {"check": "things_to_avoid", "passed": True, "detail": "none of 3 phrases found"}


def test_things_to_avoid_fails_case_insensitively_and_names_each_phrase_found():
    result = check_of("things_to_avoid", "Not CHEAP at all: start your Free  Trial today.")
    assert result["passed"] is False
    assert result["detail"] == "found: 'cheap', 'free trial'"


def test_things_to_avoid_matches_whole_words_only():
    assert check_of("things_to_avoid", "Our competitors cheapen nothing.")["passed"]


# --- placeholders ---------------------------------------------------------------------------

@pytest.mark.parametrize("leftover", ["{{first_name}}", "{{ anything }}", "{name}", "{first name}",
                                      "[NAME]", "[CTA_URL]", "[FIRST NAME]"])
def test_placeholders_fails_on_each_style_of_unfilled_placeholder(leftover):
    result = check_of("placeholders", f"Hi {leftover}, welcome back.")
    assert result["passed"] is False
    assert leftover in result["detail"]


def test_placeholders_passes_on_plain_text_with_brackets_in_ordinary_use():
    result = check_of("placeholders", "Hi Ada, see [the guide](https://acme.test/guide) (2 min).")
    assert result == {"check": "placeholders", "passed": True, "detail": "no unfilled placeholder"}


# --- length -----------------------------------------------------------------------------------

@pytest.mark.parametrize("channel", sorted(CHANNEL_LIMITS))
def test_length_passes_at_the_channel_limit_and_fails_one_character_over(channel):
    limit = CHANNEL_LIMITS[channel]
    assert check_of("length", "a" * limit, channel=channel)["passed"]
    over = check_of("length", "a" * (limit + 1), channel=channel)
    assert over["passed"] is False
    assert over["detail"] == f"{limit + 1} characters; {channel} allows at most {limit}"


def test_channel_limits_are_the_documented_ones():
    assert CHANNEL_LIMITS == {"email": 5000, "in_app": 280, "webhook": 5000, "crm": 5000}


def test_length_fails_on_an_empty_or_blank_message():
    assert not check_of("length", "")["passed"]
    assert not check_of("length", "  \n ")["passed"]


# --- tone -------------------------------------------------------------------------------------

def test_tone_passes_a_calm_message():
    assert check_of("tone", "Hi Ada, your first dashboard is one click away. Try it today!")["passed"]


def test_tone_fails_on_all_caps_words_but_allows_acronyms_and_brand_words():
    shouting = check_of("tone", "Hi Ada, this is URGENT: act NOW before it is gone.")
    assert shouting["passed"] is False and "all-caps words: URGENT" in shouting["detail"]
    brand = {**BRAND, "product_description": "ACME Reports. Dashboards."}
    calm = check_of("tone", "ACME exports JSON and is GDPR ready; API and CRM too.", brand=brand)
    assert calm["passed"], calm["detail"]


def test_tone_counts_letters_of_caps_words_joined_by_apostrophes():
    assert "all-caps words: DON'T" in check_of("tone", "DON'T wait, Ada.")["detail"]
    assert check_of("tone", "IT'S ready, Ada.")["passed"]
    brand = {**BRAND, "product_description": "ACME Reports. Dashboards."}
    assert check_of("tone", "ACME's builder is ready, Ada.", brand=brand)["passed"]


def test_tone_allows_one_exclamation_mark_per_100_characters():
    short = "Great work, Ada!"
    assert check_of("tone", short)["passed"]
    assert not check_of("tone", "Great work, Ada!!")["passed"]
    two_hundred = "Great work! " + "x" * 176 + " Thanks!"
    assert len(two_hundred) <= 200 and check_of("tone", two_hundred)["passed"]
    assert "3 exclamation marks; at most 2" in check_of("tone", two_hundred + "!")["detail"]


def test_tone_rejects_slang_only_when_the_tone_is_formal_or_professional():
    casual = "Hey Ada, gonna love the new builder."
    assert check_of("tone", casual, hints={"tone": "playful"})["passed"]
    formal_hint = check_of("tone", casual, hints={"tone": "Formal"})
    assert formal_hint["passed"] is False and "slang in a formal tone: hey, gonna" in formal_hint["detail"]
    brand = {**BRAND, "tone_guidelines": "Always professional and precise."}
    assert not check_of("tone", casual, brand=brand, hints={})["passed"]


def test_informal_is_not_formal():
    assert not messages.wants_formal({"tone_guidelines": "informal and friendly"}, {})
    assert check_of("tone", "Hey Ada, awesome progress.", hints={"tone": "informal"})["passed"]


# --- all checks ---------------------------------------------------------------------------------

def test_quality_checks_lists_every_check_in_order_and_passed_all_needs_each():
    checks = quality_checks("Hi Ada, welcome.", channel="in_app", brand=BRAND, hints=HINTS)
    assert [c["check"] for c in checks] == ["things_to_avoid", "placeholders", "length", "tone"]
    assert all(set(c) == {"check", "passed", "detail"} for c in checks)
    assert passed_all(checks)
    bad = quality_checks("Hi {{name}}, welcome.", channel="in_app", brand=BRAND, hints=HINTS)
    assert not passed_all(bad)
    assert [c["check"] for c in bad if not c["passed"]] == ["placeholders"]


def test_quality_checks_without_brand_context():
    checks = quality_checks("Hi Ada.", channel="crm", brand=None, hints={})
    assert passed_all(checks)
    assert by_name(checks)["things_to_avoid"]["detail"] == "none of 0 phrases found"
