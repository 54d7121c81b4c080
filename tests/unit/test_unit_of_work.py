"""The unit of work is one typed object reached by one accessor, and ingest reaches the
domains that react to it only through domain events (docs/architecture.md, "The unit
of work and domain events")."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.orm import Session

from cs_daemon import domain_events, uow, wiring
from cs_daemon.interventions import outcomes
from cs_daemon.webhooks import service as webhooks
from tests.unit.test_import_graph import _graph, _modules

ROOT = Path(__file__).resolve().parents[2]
# a session's `info` dict, read or written: `session.info[...]`, `s.info.get(...)`, ...
RAW_INFO = re.compile(r"\.info\s*(\[|\.(get|setdefault|update|pop|clear)\b)|\bsession\.info\b")


def test_no_module_but_the_accessors_touches_session_info():
    found = []
    for top in ("cs_daemon", "webapp", "cs_cli", "tests", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path in (ROOT / "cs_daemon" / "uow.py", Path(__file__).resolve()):
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if RAW_INFO.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "session.info used outside cs_daemon/uow.py:\n" + "\n".join(found)


def test_the_pattern_finds_raw_keys():
    assert RAW_INFO.search('session.info["tenant_id"] = x')
    assert RAW_INFO.search('tenant = s.info.get("tenant")')
    assert not RAW_INFO.search("log.info('done')")


def test_a_session_has_one_unit_of_work_and_forgets_its_work_on_rollback():
    session = Session()
    work = uow.uow_of(session)
    assert uow.uow_of(session) is work and work.tenant_id is None and work.settings is None
    work.after_commit.append((print, ("x",)))
    work.after_commit_items[print] = ["x"]
    work.events.append(object())
    work.forget()
    assert (work.after_commit, work.after_commit_items, work.events) == ([], {}, [])
    work.after_commit.append((print, ("y",)))
    assert work.committed() == [(print, ("y",))] and work.after_commit == []


def _closure(graph: dict[str, set[str]], module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _direct(module: str) -> set[str]:
    graph = _graph()
    assert module in _modules()
    return graph[module]


def test_ingest_imports_neither_interventions_nor_webhooks():
    direct = _direct("cs_daemon.customers.ingest")
    assert not {m for m in direct if m.startswith(("cs_daemon.interventions", "cs_daemon.webhooks",
                                                    "cs_daemon.decisions"))}
    # through its storage it reads the tables that say who follows the tenant's changes
    # (interventions.models, webhooks.models), and no code of those domains
    reached = _closure(_graph(), "cs_daemon.customers.ingest")
    assert not {m for m in reached if m.startswith(("cs_daemon.interventions", "cs_daemon.webhooks",
                                                     "cs_daemon.decisions")) and not m.endswith(".models")}


def test_the_event_log_does_not_import_the_webhooks():
    assert not {m for m in _closure(_graph(), "cs_daemon.outbox.service") if m.startswith("cs_daemon.webhooks")}


def test_the_root_registers_one_handler_for_each_domain_event():
    wiring.wire()
    wiring.wire()
    handlers = domain_events._handlers
    assert handlers[domain_events.EventsStored] == [outcomes.settle_after_ingest]
    assert handlers[domain_events.OutboxRowsWritten] == [webhooks.fan_out_written]
    assert len(handlers[domain_events.EventsIngested]) == 1

