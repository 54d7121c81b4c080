"""The processes of the fault campaign: API processes (gunicorn, as `cs serve` runs it)
and Dramatiq worker processes, each in its own session so that a kill -9 takes the whole
process group (master and workers) at once, and each restarted on the same port."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from cs_cli.supervisor import dramatiq_argv, gunicorn_argv
from cs_daemon.config import Settings
from tests.support.processes import Deadline, Service, free_port


@dataclass
class Member:
    kind: str                     # api | worker
    name: str
    argv: list[str]
    env: dict
    cwd: Path
    port: int = 0
    service: Service | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        self.service = Service(self.argv, env=self.env, cwd=self.cwd,
                               log=self.cwd / f"{self.name}.{self.starts}.err", new_session=True)

    def kill9(self) -> None:
        """SIGKILL the process group: no handler runs, nothing is recorded on the way out."""
        assert self.service is not None
        try:
            os.killpg(self.service.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.service.kill()

    def alive(self) -> bool:
        return self.service is not None and self.service.proc.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> None:
        """An API process answers HTTP; a worker is simply running."""
        deadline = Deadline(timeout)
        while self.kind == "api":
            try:   # an answer, whatever its status: the master binds long before its worker serves
                requests.get(f"http://127.0.0.1:{self.port}/api/health", timeout=2)
                return
            except requests.RequestException:
                assert self.alive() and deadline, f"{self.name} not serving\n{self.service.describe()}"
                time.sleep(0.1)


@dataclass
class Fleet:
    members: list[Member] = field(default_factory=list)

    @classmethod
    def make(cls, settings: Settings, env: dict, cwd: Path, apis: int, workers: int, threads: int) -> "Fleet":
        fleet = cls()
        for i in range(apis):
            port = free_port()
            fleet.members.append(Member("api", f"api{i}", gunicorn_argv(settings, "127.0.0.1", port), env, cwd, port))
        for i in range(workers):
            fleet.members.append(Member("worker", f"worker{i}", dramatiq_argv(settings, 1, threads), env, cwd))
        return fleet

    @property
    def bases(self) -> list[str]:
        return [f"http://127.0.0.1:{m.port}" for m in self.members if m.kind == "api"]

    def start(self) -> None:
        for m in self.members:
            m.start()
        for m in self.members:
            m.wait_ready()

    def close(self) -> None:
        for m in self.members:
            if m.service is not None:
                m.kill9()
