"""Subprocess helpers for the daemon integration tests: a started command whose stdout is
read line by line, polling HTTP with a deadline, free ports, and a /proc view of process
trees (no psutil needed)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
CS = str(VENV_BIN / "cs")
PYTHON = str(VENV_BIN / "python")

# Settings the service reads from the environment: a test passes exactly the ones it means.
_SERVICE_VARS = re.compile(
    r"^(CS_.*|DATABASE_URL|REDIS_URL|SMTP_.*|MAIL_FROM|OPENAI_.*|STRIPE_.*|ALLOW_PRIVATE_WEBHOOK_URLS)$"
)


# Terminal hints that change what rich prints: without them output is plain, as when piped.
_TERMINAL_VARS = {"COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"}


def service_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not _SERVICE_VARS.match(k) and k not in _TERMINAL_VARS}
    env.update({k: str(v) for k, v in values.items()})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    @property
    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def __bool__(self) -> bool:  # true while time is left
        return time.monotonic() < self.end


class Service:
    """A started command. Stdout lines are collected by a thread (so the pipe never fills);
    stderr goes to a file, shown when something fails."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: Path, log: Path,
                 new_session: bool = False):
        self.argv = argv
        self.log = log
        self._err = open(log, "wb")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._err,
                                     start_new_session=new_session)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._cond:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_line(self, pattern: str, timeout: float = 20.0) -> re.Match:
        rx = re.compile(pattern)
        deadline = Deadline(timeout)
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self.lines)
                if not deadline or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no line matching {pattern!r} from {self.argv[:3]} "
                                         f"(exit {self.proc.poll()})\n{self.describe()}")
                self._cond.wait(min(0.1, deadline.left))

    def stdout(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stderr_tail(self, n: int = 40) -> str:
        self._err.flush()
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def describe(self) -> str:
        return f"--- stdout ---\n{self.stdout()}\n--- stderr (tail) ---\n{self.stderr_tail()}"

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(2)
        return code

    def kill(self) -> None:
        """Teardown: kill the process (its group too when it leads its own session)."""
        if self.proc.poll() is None:
            try:
                if self.proc.pid == os.getsid(self.proc.pid):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        # Closing stdout while the reader is blocked in read() would wait for its lock,
        # and a grandchild that outlived the process may still hold the pipe open.
        self._reader.join(1)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()
        self._err.close()


def poll_http(url: str, *, until: Callable[[requests.Response], bool], timeout: float = 30.0,
              service: Service | None = None, headers: dict | None = None) -> requests.Response:
    """GET url every 0.1 s until `until(response)` holds; fail with the last answer
    (and the service's output) when the deadline passes or the service exits."""
    deadline = Deadline(timeout)
    last: object = None
    while True:
        try:
            resp = requests.get(url, headers=headers, timeout=5)
            if until(resp):
                return resp
            last = f"{resp.status_code} {resp.text[:500]}"
        except requests.RequestException as exc:
            last = exc
        if service is not None and service.proc.poll() is not None:
            raise AssertionError(f"{service.argv[:3]} exited with {service.proc.returncode} while "
                                 f"waiting for {url}; last: {last}\n{service.describe()}")
        if not deadline:
            extra = f"\n{service.describe()}" if service is not None else ""
            raise AssertionError(f"{url} not ready in {timeout} s; last: {last}{extra}")
        time.sleep(0.1)


# --- /proc -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start: int  # clock ticks after boot: with pid, identifies one process across pid reuse
    cmdline: str

    @property
    def ident(self) -> tuple[int, int]:
        return (self.pid, self.start)

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def processes() -> dict[int, ProcInfo]:
    table: dict[int, ProcInfo] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry)] = ProcInfo(pid=int(entry), ppid=int(fields[1]), pgid=int(fields[2]),
                                     sid=int(fields[3]), state=fields[0], start=int(fields[19]),
                                     cmdline=cmd.strip())
    return table


def descendants(root: int, table: dict[int, ProcInfo] | None = None) -> list[ProcInfo]:
    table = table if table is not None else processes()
    children: dict[int, list[ProcInfo]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def still_running(known: list[ProcInfo], sessions: set[int] = frozenset()) -> list[ProcInfo]:
    """Those of `known` that are still alive, plus any live process in one of `sessions`."""
    idents = {p.ident for p in known}
    return [p for p in processes().values()
            if p.alive and (p.ident in idents or p.sid in sessions)]


def kill_all(known: list[ProcInfo], sessions: set[int] = frozenset()) -> None:
    """Teardown: SIGKILL whichever of these exact processes (or members of these
    sessions) still run."""
    for p in still_running(known, sessions):
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Tree:
    """The processes under a started `Service` (a supervisor): recorded while it owns
    them, so teardown can still kill them after they are orphaned."""

    def __init__(self, root: Service):
        self.root = root
        self.seen: dict[tuple[int, int], ProcInfo] = {}

    def record(self) -> list[ProcInfo]:
        tree = descendants(self.root.pid)
        self.seen.update((p.ident, p) for p in tree)
        return tree

    @property
    def known(self) -> list[ProcInfo]:
        return list(self.seen.values())

    @property
    def sessions(self) -> set[int]:
        """Sessions led by the root's direct children (started with start_new_session)."""
        return {p.sid for p in self.seen.values() if p.ppid == self.root.pid and p.sid == p.pid}

    def kill(self) -> None:
        if self.root.proc.poll() is None:
            self.record()
        self.root.kill()
        kill_all(self.known, self.sessions)
