"""The customer's fields: the one declaration every list of them derives from (what a
condition may compare, what `$identify` sets, what the engine and the AI writer see, what
the customer API shows, what a CRM delivery and a score snapshot carry). Each is a column of `customers` (customers/models.py, `Customer`),
here in the order every list shows them, with the kind a condition compares it as
(docs/conditions.md); `last_activity_at` is a time, compared through the derived
`days_since_last_activity`."""

from __future__ import annotations

FIELDS: dict[str, str] = {
    "name": "text", "email": "text", "company": "text", "role": "text", "team_size": "number",
    "locale": "text", "lifecycle_stage": "text", "health": "number", "activation_score": "number",
    "engagement_score": "number", "expansion_score": "number", "risk_level": "text", "last_activity_at": "time",
}
ALL = tuple(FIELDS)
IDENTITY = ("name", "email", "company", "role", "team_size")     # what `$identify` sets (customers/state.py)
SCORES = ("health", "activation_score", "engagement_score", "expansion_score")     # computed by scoring
STANDING = ("lifecycle_stage", "risk_level")                                     # computed by scoring too
COMPARED = {name: kind for name, kind in FIELDS.items() if kind != "time"}       # a condition's `field`
