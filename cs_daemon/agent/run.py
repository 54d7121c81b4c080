"""What one agent run did: its steps, drafts, tokens and final answer (or why the
learner's decision stands instead)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class AgentRun:
    decided_by: str = "learner"        # agent | learner | rules
    steps: list[dict] = field(default_factory=list)    # {step, tool, arguments, result_summary, duration_ms, tokens}
    fallback_reason: str | None = None
    tokens: int = 0
    drafts: list[dict] = field(default_factory=list)   # {option_id, message, checks}
    refused: int = 0                   # decide calls naming an option the rules do not allow
    choice: str | None = None          # the option_id decided, None for no action or a fallback
    reasoning: str | None = None
    confidence: float | None = None
    no_action: bool = False

    def fall_back(self, reason: str) -> "AgentRun":
        self.decided_by, self.fallback_reason, self.choice, self.no_action = "learner", reason, None, False
        return self

    def draft_for(self, option_id: str) -> dict | None:
        """The last draft written for this option."""
        return next((d for d in reversed(self.drafts) if d["option_id"] == option_id), None)

    def as_dict(self) -> dict:
        return asdict(self)
