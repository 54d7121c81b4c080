"""The message of an intervention: the deterministic (templated) text and the quality
checks every message gets, whoever wrote it. A pure module (no network, no database, no
Flask). docs/ai.md states every rule.

`render_template` fills a playbook's `message_template` (or a short default per channel)
from the user, the strategy hints and the brand context. `quality_checks` records, for
any message, whether it avoids the brand's things_to_avoid, has no unfilled placeholder,
fits the channel and keeps a calm tone; `passed_all` says whether all of them passed.
"""

from __future__ import annotations

import math
import re
from typing import Callable

CHANNEL_LIMITS = {"email": 5000, "in_app": 280, "webhook": 5000, "crm": 5000}

DEFAULT_PRODUCT = "our product"
DEFAULT_GREETING_NAME = "there"
DEFAULT_COMPANY = "your team"

# Tone: words a formal or professional tone does not use (whole words, case-insensitive).
SLANG = (
    "hey", "hiya", "yo", "gonna", "wanna", "gotta", "kinda", "sorta", "lol", "omg", "btw",
    "tbh", "awesome", "dude", "yeah", "yep", "nope", "yay", "woohoo", "stoked", "y'all",
)
# Tone: all-caps words that are not shouting (acronyms), besides those in the brand context.
ACRONYMS = ("HTTP", "HTTPS", "JSON", "HTML", "GDPR", "HIPAA", "SAML", "OAUTH", "ASAP")
SHOUT_MIN_LETTERS = 4
EXCLAMATIONS_PER = 100  # characters per allowed "!"

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_UNFILLED = (
    re.compile(r"\{\{[^{}]*\}\}"),                   # {{name}}, {{ anything }}
    re.compile(r"(?<!\{)\{[^{}\n]{1,60}\}(?!\})"),  # {name}, {first name}
    re.compile(r"\[[A-Z][A-Z0-9_ ]*[A-Z0-9_]\]"),     # [NAME], [FIRST NAME], [CTA_URL]
)
_CAPS_WORD = re.compile(r"\b[A-Z]+(?:'[A-Z]+)*\b")  # URGENT, DON'T
_FORMAL = re.compile(r"\b(formal|professional)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def channel_limit(channel: str) -> int:
    try:
        return CHANNEL_LIMITS[channel]
    except KeyError:
        raise ValueError(f"unknown channel {channel!r}; one of {', '.join(CHANNEL_LIMITS)}") from None


# --- the deterministic message -------------------------------------------------------

def product_name(brand: dict | None) -> str:
    """The first sentence of the brand's product_description, or "our product"."""
    description = ((brand or {}).get("product_description") or "").strip()
    if not description:
        return DEFAULT_PRODUCT
    first = _SENTENCE_END.split(description, maxsplit=1)[0].strip()
    return first.rstrip(".!?").strip() or DEFAULT_PRODUCT


def first_name(user: dict) -> str | None:
    name = (user.get("name") or "").strip()
    if not name or "@" in name:
        return None
    return name.split()[0]


def placeholder_values(*, user: dict, hints: dict, brand: dict | None) -> dict[str, str | None]:
    """What each known placeholder becomes; None leaves the placeholder unfilled."""
    name = (user.get("name") or "").strip()
    return {
        "name": name if name and "@" not in name else DEFAULT_GREETING_NAME,
        "first_name": first_name(user) or DEFAULT_GREETING_NAME,
        "company": (user.get("company") or "").strip() or DEFAULT_COMPANY,
        "product": product_name(brand),
        "cta_url": (hints.get("cta_url") or "").strip() or None,
        "goal": _goal_text(hints) or None,
    }


def fill_placeholders(template: str, values: dict[str, str | None]) -> str:
    """Replace `{{key}}` (spaces inside allowed) in one pass; unknown or empty keys stay."""
    def fill(match: re.Match) -> str:
        value = values.get(match.group(1))
        return value if value else match.group(0)

    return _PLACEHOLDER.sub(fill, template)


def render_template(template: str | None, *, channel: str, user: dict, hints: dict,
                    brand: dict | None) -> str:
    """The deterministic message: the playbook's template filled in, or a default."""
    limit = channel_limit(channel)
    hints = hints or {}
    values = placeholder_values(user=user, hints=hints, brand=brand)
    if template and template.strip():
        return fill_placeholders(template.strip(), values)
    return _shorten(default_message(channel, values, brand), limit)


def default_message(channel: str, values: dict[str, str | None], brand: dict | None) -> str:
    """A short message from the goal, the brand and the call to action."""
    sentences = [f"we'd like to help you get the most out of {values['product']}."]
    if values["goal"]:
        sentences.append(f"Suggested next step: {values['goal']}.")
    mention = _first_mention(brand)
    if mention and channel != "in_app":
        sentences.append(f"Worth knowing: {mention}.")
    if values["cta_url"]:
        sentences.append(f"Start here: {values['cta_url']}")
    greeting = f"Hi {values['first_name']},"
    if channel == "email":
        body = " ".join(sentences)
        return f"{greeting}\n\n{body[0].upper()}{body[1:]}\n\nBest regards,\nThe customer success team"
    return f"{greeting} {' '.join(sentences)}"


def _goal_text(hints: dict) -> str:
    return (hints.get("goal") or "").strip().rstrip(".!?").strip()


def _first_mention(brand: dict | None) -> str | None:
    for item in (brand or {}).get("things_to_mention") or []:
        if item and item.strip():
            return item.strip().rstrip(".!?")
    return None


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(" ,;:")
    return cut + "…"


# --- quality checks --------------------------------------------------------------------

def check(name: str, passed: bool, detail: str) -> dict:
    return {"check": name, "passed": passed, "detail": detail}


def check_things_to_avoid(message: str, brand: dict | None) -> dict:
    """No phrase of brand.things_to_avoid appears (whole words, case-insensitive)."""
    phrases = [p.strip() for p in (brand or {}).get("things_to_avoid") or [] if p and p.strip()]
    found = [p for p in phrases if _phrase_pattern(p).search(message)]
    if found:
        return check("things_to_avoid", False, "found: " + ", ".join(repr(p) for p in found))
    return check("things_to_avoid", True, f"none of {len(phrases)} phrases found")


def _phrase_pattern(phrase: str) -> re.Pattern:
    body = r"\s+".join(re.escape(word) for word in phrase.split())
    start = r"(?<!\w)" if phrase[0].isalnum() or phrase[0] == "_" else ""
    end = r"(?!\w)" if phrase[-1].isalnum() or phrase[-1] == "_" else ""
    return re.compile(start + body + end, re.IGNORECASE)


def check_placeholders(message: str) -> dict:
    """No `{{...}}`, `{...}` or `[NAME]`-style placeholder is left."""
    found: list[str] = []
    for pattern in _UNFILLED:
        for match in pattern.findall(message):
            if match not in found:
                found.append(match)
    if found:
        return check("placeholders", False, "unfilled: " + ", ".join(found[:5]))
    return check("placeholders", True, "no unfilled placeholder")


def check_length(message: str, channel: str) -> dict:
    """Non-empty (beyond white space) and at most the channel's limit in characters."""
    limit = channel_limit(channel)
    size = len(message)
    if not message.strip():
        return check("length", False, f"empty; {channel} allows 1 to {limit} characters")
    if size > limit:
        return check("length", False, f"{size} characters; {channel} allows at most {limit}")
    return check("length", True, f"{size} of at most {limit} characters")


def check_tone(message: str, *, brand: dict | None, hints: dict) -> dict:
    """No shouting, few exclamation marks, and no slang when the tone is formal."""
    problems = [p for rule in _TONE_RULES for p in rule(message, brand, hints)]
    if problems:
        return check("tone", False, "; ".join(problems))
    formal = " (formal)" if wants_formal(brand, hints) else ""
    return check("tone", True, f"calm{formal}: no shouting, exclamation marks within limit")


def _shouting(message: str, brand: dict | None, hints: dict) -> list[str]:
    allowed = set(ACRONYMS) | set(_CAPS_WORD.findall(_brand_text(brand)))
    words = [w for w in _CAPS_WORD.findall(message)
             if sum(c.isalpha() for c in w) >= SHOUT_MIN_LETTERS and w not in allowed]
    words = list(dict.fromkeys(words))
    return [f"all-caps words: {', '.join(words[:5])}"] if words else []


def _exclamations(message: str, brand: dict | None, hints: dict) -> list[str]:
    count = message.count("!")
    allowed = max(1, math.ceil(len(message) / EXCLAMATIONS_PER))
    if count <= allowed:
        return []
    return [f"{count} exclamation marks; at most {allowed} for {len(message)} characters"]


def _slang(message: str, brand: dict | None, hints: dict) -> list[str]:
    if not wants_formal(brand, hints):
        return []
    found = [w for w in SLANG if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", message, re.IGNORECASE)]
    return [f"slang in a formal tone: {', '.join(found)}"] if found else []


_TONE_RULES: tuple[Callable[[str, dict | None, dict], list[str]], ...] = (_shouting, _exclamations, _slang)


def wants_formal(brand: dict | None, hints: dict) -> bool:
    """hints.tone or brand.tone_guidelines names "formal" or "professional" as a word."""
    text = f"{(hints or {}).get('tone') or ''} {(brand or {}).get('tone_guidelines') or ''}"
    return bool(_FORMAL.search(text))


def _brand_text(brand: dict | None) -> str:
    brand = brand or {}
    parts = [brand.get("product_description") or "", brand.get("tone_guidelines") or ""]
    parts += list(brand.get("things_to_mention") or [])
    return " ".join(p for p in parts if isinstance(p, str))


def quality_checks(message: str, *, channel: str, brand: dict | None, hints: dict) -> list[dict]:
    """Every check of a message, in a fixed order: things_to_avoid, placeholders, length, tone."""
    message = message or ""
    hints = hints or {}
    return [
        check_things_to_avoid(message, brand),
        check_placeholders(message),
        check_length(message, channel),
        check_tone(message, brand=brand, hints=hints),
    ]


def passed_all(checks: list[dict]) -> bool:
    return all(c["passed"] for c in checks)
