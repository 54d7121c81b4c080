"""Fixtures of the production-mode tests that run real `cs` processes: a fresh
PostgreSQL database, a unique Redis prefix, and `cs worker` started beside the test."""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager

import psycopg
import pytest
import redis

from cs_daemon import migrate
from cs_daemon.config import Settings
from cs_daemon.db import dispose_engines
from cs_daemon.jobs import broker as jobs_broker
from cs_daemon.jobs.heartbeat import last_beat_age
from cs_daemon.runtime import Runtime
from tests.conftest import PG, REDIS, _pg_conninfo
from tests.support.processes import CS, Deadline, Service, Tree, service_env
from tests.support.sse import AppServer
from webapp import create_app


@pytest.fixture
def database():
    name = f"cs_it_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG}/{name}"
    finally:
        dispose_engines()
        with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def prefix():
    value = f"csit-{uuid.uuid4().hex[:8]}"
    yield value
    client = redis.Redis.from_url(REDIS)
    keys = list(client.scan_iter(f"{value}:*"))
    if keys:
        client.delete(*keys)
    client.close()


SECRET = "cross-process-test-secret"


@pytest.fixture
def production_rt(database, prefix, tmp_path):
    """This process's runtime on the fresh database and Redis prefix, with the Redis broker
    installed (approvals enqueue on Redis at commit, as in gunicorn); the embedded broker
    is put back afterwards."""
    settings = Settings(cs_data_dir=tmp_path / "data", database_url=database, redis_url=REDIS,
                        cs_redis_prefix=prefix, cs_secret_key=SECRET)
    migrate.upgrade(settings)
    runtime = Runtime(settings)
    runtime.install_broker()
    yield runtime
    jobs_broker.install(Settings(cs_data_dir=tmp_path / "data", database_url=None, redis_url=None,
                                 cs_secret_key="t"))


@pytest.fixture
def api_here(production_rt):
    """The API on a real HTTP server in this process."""
    server = AppServer(create_app(runtime=production_rt))
    yield server
    server.close()


@contextmanager
def running_worker(rt: Runtime, tmp_path, **extra_env: str):
    """`cs worker` (1 process, 2 threads) on the runtime's database and Redis, in its own
    process tree, up once its heartbeat shows; killed on exit."""
    s = rt.settings
    env = service_env(DATABASE_URL=s.database_url, REDIS_URL=s.redis_url, CS_REDIS_PREFIX=s.cs_redis_prefix,
                      CS_SECRET_KEY=s.secret_key, CS_DATA_DIR=str(tmp_path / "data"), **extra_env)
    tree = Tree(Service([CS, "worker", "--processes", "1", "--threads", "2"], env=env, cwd=tmp_path,
                        log=tmp_path / "worker.err", new_session=True))
    try:
        deadline = Deadline(30)
        while last_beat_age(rt.cache) is None:
            tree.record()
            assert tree.root.proc.poll() is None and deadline, f"worker not up\n{tree.root.describe()}"
            time.sleep(0.05)
        yield tree
    finally:
        tree.kill()
