"""The tenant's contact policy: how often the engine may contact one user, over every
playbook and channel (docs/decisions.md, "Contact policy"). A pure module: the caller
loads the user's recent contacts; `limits` says what the policy blocks now and until
when.

Rules, each named as a decision's reason names it (`contact_policy: <rule>`):
`max_per_user_per_day` (the last 24 hours), `max_per_user_per_week` (the last 7 × 24
hours), `min_hours_between` (since the last contact), and per channel
`channels.<channel>.max_per_user_per_day` / `…_per_week`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

DAY = timedelta(hours=24)
WEEK = timedelta(days=7)
PREFIX = "contact_policy: "


@dataclass(frozen=True)
class Caps:
    per_day: int | None = None
    per_week: int | None = None

    @property
    def any(self) -> bool:
        return self.per_day is not None or self.per_week is not None


@dataclass(frozen=True)
class ContactPolicy:
    caps: Caps = Caps()
    min_hours_between: float | None = None
    channels: dict[str, Caps] = field(default_factory=dict)
    exempt_playbooks: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: dict | None) -> "ContactPolicy | None":
        """From a validated `config.contact_policy` object; None when it limits nothing."""
        config = config or {}
        channels = {ch: Caps(c.get("max_per_user_per_day"), c.get("max_per_user_per_week"))
                    for ch, c in (config.get("channels") or {}).items() if c}
        policy = cls(Caps(config.get("max_per_user_per_day"), config.get("max_per_user_per_week")),
                     config.get("min_hours_between"), {ch: c for ch, c in channels.items() if c.any},
                     frozenset(config.get("exempt_playbooks") or ()))
        return policy if policy.limits_anything else None

    @property
    def limits_anything(self) -> bool:
        return self.caps.any or self.min_hours_between is not None or bool(self.channels)

    @property
    def lookback(self) -> timedelta:
        """How far back the contacts that can matter go."""
        return max(WEEK, timedelta(hours=self.min_hours_between or 0))

    def exempt(self, playbook_id: str) -> bool:
        return playbook_id in self.exempt_playbooks


@dataclass(frozen=True)
class Contact:
    """One contact of the user: when (sent, or decided while not sent yet) and on which
    channel."""

    at: datetime
    channel: str


@dataclass(frozen=True)
class Block:
    rule: str                         # max_per_user_per_day, channels.email.max_per_user_per_week, ...
    count: int | None                 # contacts in the window (None for min_hours_between)
    limit: float
    free_at: datetime | None          # when the window frees (None: a cap of 0 never frees)

    @property
    def reason(self) -> str:
        return PREFIX + self.rule

    def as_dict(self) -> dict:
        return {"rule": self.rule, "count": self.count, "limit": self.limit,
                "free_at": self.free_at.isoformat() if self.free_at else None}


@dataclass(frozen=True)
class Limits:
    """What the policy blocks now: every message (`block`), or some channels."""

    block: Block | None = None
    channels: dict[str, Block] = field(default_factory=dict)


NO_LIMITS = Limits()


def _cap(rule: str, limit: int | None, window: timedelta, ats: list[datetime], now: datetime) -> Block | None:
    if limit is None:
        return None
    inside = sorted(at for at in ats if now - at < window)
    if len(inside) < limit:
        return None
    # the window has room again once all but limit - 1 of these have left it
    free_at = inside[len(inside) - limit] + window if limit > 0 else None
    return Block(rule, len(inside), limit, free_at)


def limits(policy: ContactPolicy | None, contacts: tuple[Contact, ...] | list[Contact], now: datetime) -> Limits:
    """What `policy` blocks at `now`, given the user's contacts (of every playbook and
    channel). The first rule that blocks is named: day, week, then min_hours_between."""
    if policy is None:
        return NO_LIMITS
    ats = [c.at for c in contacts]
    block = (_cap("max_per_user_per_day", policy.caps.per_day, DAY, ats, now)
             or _cap("max_per_user_per_week", policy.caps.per_week, WEEK, ats, now))
    if block is None and policy.min_hours_between is not None and ats:
        last = max(ats)
        gap = timedelta(hours=policy.min_hours_between)
        if now - last < gap:
            block = Block("min_hours_between", None, policy.min_hours_between, last + gap)
    channels = {}
    for channel, caps in policy.channels.items():
        mine = [c.at for c in contacts if c.channel == channel]
        found = (_cap(f"channels.{channel}.max_per_user_per_day", caps.per_day, DAY, mine, now)
                 or _cap(f"channels.{channel}.max_per_user_per_week", caps.per_week, WEEK, mine, now))
        if found:
            channels[channel] = found
    return Limits(block, channels)
