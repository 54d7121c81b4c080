"""After a PostgreSQL restart the first request succeeds (found by the fault campaign,
tests/chaos/): the pool does not hand out a connection the server closed, so no request
fails with a 500 on a dead connection once the database is back."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import func, select

from cs_daemon import migrate
from cs_daemon.config import Settings
from cs_daemon.db import dispose_engines
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants
from cs_daemon.tenants.models import Tenant
from tests.support.sql import engines
from tests.support.stores import PrivatePostgres


@pytest.fixture(scope="module")
def cluster():
    made = PrivatePostgres()
    try:
        made.start()
        yield made
    finally:
        dispose_engines()
        made.close()


@pytest.fixture
def pg(cluster):
    """The module's cluster, running, with a fresh database `cs` for this test."""
    if not cluster.running():
        cluster.start()
    with psycopg.connect(cluster.url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS cs WITH (FORCE)")
        conn.execute("CREATE DATABASE cs")
    yield cluster
    dispose_engines()


@pytest.mark.parametrize("mode", ["immediate", "fast"])
def test_the_first_query_after_a_restart_gets_a_live_connection(pg, tmp_path, mode):
    settings = Settings(database_url=pg.url.rsplit("/", 1)[0] + "/cs", redis_url=None, cs_secret_key="t",
                        cs_data_dir=tmp_path)
    migrate.upgrade(settings)
    rt = Runtime(settings)
    with rt.session() as s:
        tenants.create(s, name="Restart", owner_email="o@restart.example", now=rt.now())
    for atomic in (True, False):      # each kind of session has its pool (docs/deploy.md)
        with rt.session(atomic=atomic) as s:
            assert s.scalar(select(func.count()).select_from(Tenant)) == 1
    assert all(engine.pool.checkedin() >= 1 for engine in engines(settings))   # idle connections wait in each

    pg.restart(mode)

    for atomic in (True, False):
        with rt.session(atomic=atomic) as s:
            assert s.scalar(select(func.count()).select_from(Tenant)) == 1


def test_requests_while_the_database_is_down_answer_503_and_succeed_once_it_is_back(pg, tmp_path):
    from webapp import create_app

    settings = Settings(database_url=pg.url.rsplit("/", 1)[0] + "/cs", redis_url=None, cs_secret_key="t",
                        cs_data_dir=tmp_path)
    migrate.upgrade(settings)
    rt = Runtime(settings)
    with rt.session() as s:
        key = tenants.create(s, name="Outage", owner_email="o@outage.example", now=rt.now()).key.secret
    client = create_app(runtime=rt).test_client()
    headers = {"Authorization": f"Bearer {key}"}
    track = {"events": [{"user_id": "u1", "event": "login", "idempotency_key": "k1"}]}
    assert client.post("/api/track", headers=headers, json=track).status_code == 200

    pg.stop("immediate")
    for method, path, body in (("GET", "/api/settings", None), ("POST", "/api/track", track)):
        resp = client.open(path, method=method, headers=headers, json=body)
        assert resp.status_code == 503, (path, resp.status_code, resp.json)
        assert resp.json == {"error": "the database cannot be reached for the moment; retry shortly",
                             "code": "database_unavailable"}
        assert resp.headers["Retry-After"] == "5"

    pg.start()
    assert client.get("/api/settings", headers=headers).status_code == 200
    again = client.post("/api/track", headers=headers, json=track)
    assert again.status_code == 200 and again.json["duplicates"] == 1
