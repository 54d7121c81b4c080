"""The agent: a language model that chooses among the options the rules allow, through
read-only tools, within step, time and token budgets (docs/ai.md, "The agent")."""
