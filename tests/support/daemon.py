"""A `cs serve` daemon on loopback for tests that talk to the real service over HTTP: the
embedded mode (SQLite in a temporary folder, in-process worker) or the production mode
(a fresh PostgreSQL database, a private Redis key prefix, gunicorn + Dramatiq), with a
tenant made by `cs tenant create`."""

from __future__ import annotations

import json
import subprocess
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psycopg
import redis

from tests.conftest import PG, REDIS, _pg_conninfo
from tests.support.processes import CS, Service, Tree, free_port, poll_http, service_env

SERVING = r"serving on (http://127\.0\.0\.1:\d+)(?:\s|$)"


@dataclass
class Daemon:
    url: str
    env: dict[str, str]
    cwd: Path
    tree: Tree

    def cs(self, *argv: str) -> dict:
        """A `cs … --json` command on the daemon's data; its JSON document."""
        done = subprocess.run([CS, *argv, "--json"], env=self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"cs {' '.join(argv)}: {done.stderr}"
        return json.loads(done.stdout)


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


def _drop_redis_keys(prefix: str) -> None:
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
            _drop_redis_keys(prefix)


@contextmanager
def running_daemon(backend: str, tmp: Path, **extra: str) -> Iterator[Daemon]:
    """`cs db upgrade` then `cs serve` on a free port, up once health answers; every
    process it started is killed on exit."""
    with backend_env(backend, tmp, **extra) as env:
        done = subprocess.run([CS, "db", "upgrade"], env=env, cwd=tmp, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        tree = Tree(Service([CS, "serve", "--port", str(free_port())], env=env, cwd=tmp,
                            log=tmp / "serve.err", new_session=True))
        try:
            url = tree.root.wait_for_line(SERVING, timeout=60).group(1)
            poll_http(f"{url}/api/health", until=lambda r: tree.record() is not None and r.status_code == 200,
                      timeout=60, service=tree.root)
            yield Daemon(url=url, env=env, cwd=tmp, tree=tree)
        finally:
            tree.kill()
