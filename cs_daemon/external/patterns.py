"""The regular expressions of an action type's `parameters_schema` run on RE2, which
matches in time linear in the input: a pattern such as `^(a+)+$`, which Python's own
engine takes minutes to refuse "aaaa…!" with, cannot hold a thread of the service
(docs/api.md, "Action type parameters").

The JSON Schema validator is extended so that every keyword that runs a pattern runs it
on RE2: `pattern` (and through it `propertyNames`), `patternProperties` and
`additionalProperties`. A pattern RE2 cannot run (a backreference, look-around) is
refused when the type is registered, and so is `unevaluatedProperties` beside
`patternProperties`, the one combination whose validation would still use Python's
engine.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterator

import re2
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False         # a refused pattern is the caller's 400, not a log line


class PatternRefused(ValueError):
    pass


@lru_cache(maxsize=1024)
def _compiled(pattern: str):
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternRefused(f"pattern {pattern!r} is not supported ({reason}); patterns use RE2 syntax, "
                             "without backreferences or look-around") from None


def search(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


def _pattern(validator, pattern, instance, schema) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, pattern_properties, instance, schema) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in known and not any(search(p, key) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            names = ", ".join(repr(e) for e in sorted(extras))
            yield ValidationError(f"{names} do not match any of the regexes: "
                                  + ", ".join(repr(p) for p in sorted(patterns)))
        else:
            names = ", ".join(repr(e) for e in extras)
            yield ValidationError(f"Additional properties are not allowed ({names} "
                                  f"{'was' if len(extras) == 1 else 'were'} unexpected)")


_KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
             "additionalProperties": _additional_properties}


@lru_cache(maxsize=None)
def _linear(cls: type[Validator]) -> type[Validator]:
    return extend(cls, _KEYWORDS)


def validator(schema: dict) -> Validator:
    """A validator of `schema` (its draft from `$schema`, 2020-12 by default) whose
    patterns run on RE2."""
    return _linear(validator_for(schema, default=Draft202012Validator))(schema)


def check(schema: Any) -> None:
    """PatternRefused when a pattern of `schema` cannot run on RE2, or when the schema
    would run one outside it."""
    uses = {"unevaluatedProperties": False, "patternProperties": False}
    for key, value in _keywords(schema):
        if key == "pattern" and isinstance(value, str):
            _compiled(value)
        elif key == "patternProperties" and isinstance(value, dict):
            uses[key] = True
            for pattern in value:
                _compiled(pattern)
        elif key == "unevaluatedProperties":
            uses[key] = True
    if all(uses.values()):
        raise PatternRefused("unevaluatedProperties cannot be used together with patternProperties here; "
                             "use additionalProperties")


def _keywords(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every (keyword, value) of a schema and its subschemas (anything nested: a pattern
    under `properties` named like a keyword is read too, which only refuses more)."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield key, value
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
