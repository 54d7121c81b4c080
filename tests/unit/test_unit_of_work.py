"""The unit of work is one typed object reached by one accessor, and ingest reaches the
domains that react to it only through domain events (docs/architecture.md, "The unit
of work and domain events")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sqlalchemy.orm import Session

from cs_daemon import domain_events, uow, wiring
from cs_daemon.channels import in_app
from cs_daemon.decisions import actors as decision_jobs
from cs_daemon.delivery import actors as delivery_jobs
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


def test_collected_items_go_to_their_function_in_one_call_at_the_place_of_the_first():
    work = uow.UnitOfWork()
    first, second = (lambda items: None), (lambda items, extra: None)
    work.collect(first, 1)
    work.after_commit.append((print, ("between",)))
    work.collect(second, "a", "extra")
    work.collect(first, 2)
    work.collect(second, "b", "ignored")
    assert work.committed() == [(first, ([1, 2],)), (print, ("between",)), (second, (["a", "b"], "extra"))]
    assert work.after_commit_items == {}


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



def test_the_root_registers_the_after_commit_handlers_of_the_jobs_and_wake_ups():
    wiring.wire()
    wiring.wire()
    after = domain_events._after_commit
    assert after[domain_events.DeliveryDue] == [delivery_jobs.send_soon]
    assert after[domain_events.DeliveryRetryDue] == [delivery_jobs.send_later]
    assert after[domain_events.DecisionsOwed] == [decision_jobs.decide_soon]
    assert after[domain_events.InAppInterventionWithdrawn] == [in_app.wake_streams]


JOB_MODULES = {"cs_daemon.jobs.broker", "cs_daemon.jobs.registry", "cs_daemon.jobs.entry",
               "cs_daemon.jobs.scheduler", "cs_daemon.wiring"}
# the plumbing a service would need to enqueue a job itself
AFTER_COMMIT_PLUMBING = {"on_commit", "on_commit_each", "JOB", "dramatiq"}


def _names(module: str) -> set[str]:
    """Every name, attribute and imported name or module the module's source uses."""
    found = set()
    for node in ast.walk(ast.parse(_modules()[module].read_text())):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {alias.name.split(".")[0] for alias in node.names}
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_the_delivery_and_decision_services_import_no_job_and_publish_what_is_due_instead():
    graph = _graph()
    for module in ("cs_daemon.delivery.service", "cs_daemon.decisions.requests", "cs_daemon.channels.in_app"):
        assert module in _modules()
        # no module that declares, registers or sends a job, directly or through others
        jobs = {m for m in _closure(graph, module) if m.endswith(".actors") or m in JOB_MODULES}
        assert not jobs, (module, jobs)
        assert not _names(module) & AFTER_COMMIT_PLUMBING, (module, _names(module) & AFTER_COMMIT_PLUMBING)
        assert "cs_daemon.domain_events" in graph[module]
