"""A private PostgreSQL cluster (initdb in a temporary folder) and a private redis-server,
each on a free loopback port, that a test may stop, crash and restart without touching
the machine's own services. PostgreSQL refuses to run as root: as root, the cluster is
made and run as the `postgres` user (or `nobody`) through runuser, in a folder it owns."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.processes import Deadline, free_port


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found (PostgreSQL server binaries)")
    return path


def _run_as() -> str | None:
    """The user to run PostgreSQL as when we are root (None: as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a postgres nor a nobody user exists")


class PrivatePostgres:
    """`initdb` into `root/pgdata`; `start`, `stop(mode)` (fast, or immediate: a crash) and
    `restart`. Trust authentication for user `postgres` on 127.0.0.1 only."""

    def __init__(self):
        # a folder of its own under the system's temp dir: the user must be able to reach it
        self.root = Path(tempfile.mkdtemp(prefix="cs-private-pg-"))
        self.data = self.root / "pgdata"
        self.port = free_port()
        self.user = _run_as()
        if self.user:
            info = pwd.getpwnam(self.user)
            os.chmod(self.root, 0o700)
            os.chown(self.root, info.pw_uid, info.pw_gid)
        self._as([_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--locale=C"])
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.root}'\nfsync = off\n"
                       "full_page_writes = off\nmax_connections = 200\nshared_buffers = 32MB\n")

    def _as(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.root, **kw)
        if done.returncode:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode(errors='replace')}")
        return done

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self._as([_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-w", "-t", "60", "start"])

    def stop(self, mode: str = "fast") -> None:
        self._as([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"])

    def restart(self, mode: str = "immediate", down: float = 0.0) -> None:
        self.stop(mode)
        time.sleep(down)
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def close(self) -> None:
        if self.running():
            try:
                self.stop("immediate")
            except RuntimeError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A redis-server without persistence: a restart loses every key (queued job
    messages among them), as a crashed cache would."""

    def __init__(self, root: Path):
        self.dir = root / "redis"
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(argv, stdout=open(self.dir / "server.log", "ab"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = Deadline(20)
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                assert self.proc.poll() is None and deadline, "redis-server did not start"
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, down: float = 0.0) -> None:
        self.stop()
        time.sleep(down)
        self.start()

    def close(self) -> None:
        self.stop()
