"""Production mode: `cs serve` starts gunicorn API processes and Dramatiq worker
processes and keeps them running; `cs worker` runs only the workers. A child that dies
is restarted with a growing pause, except one that exits with 2 (a bad setting): then
all stop and so does the supervisor, with 2. SIGTERM or SIGINT stops them all gracefully."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cs_daemon.config import BAD_SETTING_EXIT, Settings
from cs_daemon.metrics import MULTIPROC_ENV

from .output import out

log = logging.getLogger("cs.supervisor")
STOP_GRACE = 30


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = field(default=0.0)

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, start_new_session=True)
        self.started_at = time.monotonic()
        log.info("started %s (pid %s)", self.name, self.proc.pid)


def gunicorn_argv(settings: Settings, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "gunicorn", "webapp.wsgi:app",
            "--bind", f"{host}:{port}", "--workers", str(settings.cs_web_processes),
            # gthread, whose threads hand in-app streams to the process's event loop (webapp/stream_handoff.py)
            "--worker-class", "webapp.gunicorn_worker.StreamWorker", "--threads", str(settings.cs_api_threads),
            "--worker-connections", "1000",
            "--graceful-timeout", "20", "--timeout", "60", "--log-level", settings.cs_log_level.lower(),
            "--config", "python:webapp.gunicorn_hooks", "--no-control-socket"]


def dramatiq_argv(settings: Settings, processes: int | None, threads: int | None) -> list[str]:
    return [sys.executable, "-m", "dramatiq", "cs_daemon.jobs.entry",
            "--processes", str(processes or settings.cs_worker_processes),
            "--threads", str(threads or settings.cs_worker_threads)]


def metrics_dir() -> Callable[[], None]:
    """The directory where every child writes its metrics (PROMETHEUS_MULTIPROC_DIR): the
    one set, emptied, else a new temporary one; returns what cleans it up at the end.
    docs/operations.md, "Metrics"."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.db"):   # counts of an earlier run would be summed in
            old.unlink(missing_ok=True)
        return lambda: None
    folder = Path(tempfile.mkdtemp(prefix="cs-metrics-"))
    os.environ[MULTIPROC_ENV] = str(folder)
    return lambda: shutil.rmtree(folder, ignore_errors=True)


def supervise(settings: Settings, host: str, port: int) -> int:
    out.print(f"[bold green]cs[/bold green] serving on [bold]http://{host}:{port}[/bold] "
              f"(production: {settings.cs_web_processes} API processes, "
              f"{settings.cs_worker_processes} worker processes)")
    cleanup = metrics_dir()
    try:
        return _run([Child("api", gunicorn_argv(settings, host, port)),
                     Child("worker", dramatiq_argv(settings, None, None))])
    finally:
        cleanup()


def run_workers(settings: Settings, processes: int | None, threads: int | None) -> int:
    out.print(f"[bold green]cs[/bold green] worker running ({processes or settings.cs_worker_processes} processes)")
    return _run([Child("worker", dramatiq_argv(settings, processes, threads))])


def _run(children: list[Child]) -> int:
    stopping = False

    def _stop(signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    for child in children:
        child.start()
    while not stopping:
        for child in children:
            if child.proc is not None and child.proc.poll() is not None:
                code = child.proc.returncode
                child.proc = None
                if code == BAD_SETTING_EXIT:   # its one line is on stderr; a restart cannot help
                    log.error("%s stopped on a bad setting; stopping", child.name)
                    _stop_all(children)
                    return BAD_SETTING_EXIT
                quick = time.monotonic() - child.started_at < 10
                child.restarts = child.restarts + 1 if quick else 0
                pause = min(30.0, 0.5 * 2 ** child.restarts)
                child.next_start = time.monotonic() + pause
                log.warning("%s exited with %s; restarting in %.1f s", child.name, code, pause)
            if child.proc is None and time.monotonic() >= child.next_start and not stopping:
                child.start()
        time.sleep(0.2)
    return _stop_all(children)


def _stop_all(children: list[Child]) -> int:
    for child in children:
        if child.proc is not None and child.proc.poll() is None:
            os.killpg(child.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for child in children:
        if child.proc is None:
            continue
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %s s; killing it", child.name, STOP_GRACE)
            os.killpg(child.proc.pid, signal.SIGKILL)
            child.proc.wait()
    out.print("stopped")
    return 0
