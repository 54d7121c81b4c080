"""A `cs serve` daemon on loopback for tests that talk to the real service over HTTP: the
embedded mode (SQLite in a temporary folder, in-process worker) or the production mode
(a fresh PostgreSQL database, a private Redis key prefix, gunicorn + Dramatiq), with a
tenant made through the service on the same data."""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psycopg
import redis

from cs_daemon import migrate
from cs_daemon.auth import service as auth
from cs_daemon.config import Settings
from cs_daemon.db import dispose_engines
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from tests.conftest import PG, REDIS, _pg_conninfo
from tests.support.processes import CS, Service, Tree, free_port, poll_http, service_env

SERVING = r"serving on (http://127\.0\.0\.1:\d+)(?:\s|$)"


@dataclass
class Daemon:
    url: str
    settings: Settings
    tree: Tree

    def cpu_seconds(self) -> float:
        """CPU time the daemon's processes have used so far (user + system)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in [self.tree.root.pid, *(p.pid for p in self.tree.record())]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        return total / tick

    def tenant(self, name: str, *, plan_tier: str, partner: bool = False) -> tuple[str, str]:
        """A new tenant (made here, on the daemon's database): its id and admin `full` key."""
        rt = Runtime(self.settings)
        with rt.session() as s:
            made = tenants.create(s, name=name, owner_email=f"owner@{name.lower()}.example",
                                  now=rt.now(), plan_tier=plan_tier, partner=partner)
            return made.tenant.id, made.key.secret

    def key(self, tenant_id: str, *, role: str, permissions: list[str]) -> str:
        rt = Runtime(self.settings)
        with rt.session(tenant_id) as s:
            return auth.issue(s, tenant_id, role=role, permissions=permissions, now=rt.now()).secret


@contextmanager
def _postgres_database() -> Iterator[str]:
    name = f"cs_fuzz_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG}/{name}"
    finally:
        with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_redis_keys(prefix: str) -> None:
    """Remove every Redis key a test daemon wrote under its prefix."""
    client = redis.Redis.from_url(REDIS)
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@contextmanager
def backend_env(backend: str, tmp: Path, **extra: str) -> Iterator[dict[str, str]]:
    """The environment of a daemon on `backend` ("embedded" or "postgres")."""
    data = str(tmp / "data")
    if backend == "embedded":
        yield service_env(CS_DATA_DIR=data, **extra)
        return
    prefix = f"csfuzz-{uuid.uuid4().hex[:8]}"
    with _postgres_database() as url:
        try:
            yield service_env(DATABASE_URL=url, REDIS_URL=REDIS, CS_REDIS_PREFIX=prefix,
                              CS_SECRET_KEY="fuzz-test-secret", CS_DATA_DIR=data,
                              CS_WEB_PROCESSES="1", CS_WORKER_PROCESSES="1", **extra)
        finally:
            drop_redis_keys(prefix)


def _settings(env: dict[str, str]) -> Settings:
    """This process's view of the daemon's data."""
    return Settings(cs_data_dir=Path(env["CS_DATA_DIR"]), database_url=env.get("DATABASE_URL"),
                    redis_url=env.get("REDIS_URL"), cs_redis_prefix=env.get("CS_REDIS_PREFIX", "cs"),
                    cs_secret_key=env.get("CS_SECRET_KEY"))


@contextmanager
def running_daemon(backend: str, tmp: Path, **extra: str) -> Iterator[Daemon]:
    """The database migrated, then `cs serve` on a free port, up once health answers;
    every process it started is killed on exit."""
    with backend_env(backend, tmp, **extra) as env:
        settings = _settings(env)
        migrate.upgrade(settings)
        tree = Tree(Service([CS, "serve", "--port", str(free_port())], env=env, cwd=tmp,
                            log=tmp / "serve.err", new_session=True))
        try:
            url = tree.root.wait_for_line(SERVING, timeout=60).group(1)
            poll_http(f"{url}/api/health", until=lambda r: tree.record() is not None and r.status_code == 200,
                      timeout=60, service=tree.root)
            yield Daemon(url=url, settings=settings, tree=tree)
        finally:
            tree.kill()
            dispose_engines()
