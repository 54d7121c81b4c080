"""Flows: orchestration that spans domains or transactions, one module per flow, called
alike by the HTTP routes, the `cs` commands and the jobs (docs/architecture.md, "Flows").
A flow may end a transaction between its steps (a row committed before an attempt made
outside any transaction); the services it calls never do."""
