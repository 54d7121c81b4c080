"""Start-up fails fast (docs/configuration.md): a missing CS_SECRET_KEY in production, or
any setting with a bad value, stops `cs serve`, `cs worker` and an ordinary command at
start, with one line naming the setting and exit code 2, before any port is opened; so
do the gunicorn and dramatiq processes `cs serve` starts, run on their own.

Real processes on a real, migrated PostgreSQL database and Redis: the environment
without the bad setting is shown to work, so each refusal is the setting's own. The port
`cs serve` is given is held by this test while it runs: a process that opened it before
checking its settings would fail on the port instead of naming the setting."""

from __future__ import annotations

import socket
import subprocess
import uuid

import psycopg
import pytest

from cs_daemon import migrate
from cs_daemon.config import Settings
from cs_daemon.db import dispose_engines
from tests.conftest import PG, REDIS, _pg_conninfo
from tests.support.processes import CS, PYTHON, ROOT, Service, free_port, service_env

TIMEOUT = 30


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    name = f"cs_startup_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{PG}/{name}"
    try:
        migrate.upgrade(Settings(database_url=url, redis_url=None, cs_secret_key="t",
                                 cs_data_dir=tmp_path_factory.mktemp("startup")))
        dispose_engines()
        yield url
    finally:
        dispose_engines()
        with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def production(database: str, tmp_path, **change: str | None) -> dict[str, str]:
    values = {"DATABASE_URL": database, "REDIS_URL": REDIS, "CS_REDIS_PREFIX": f"csstart-{uuid.uuid4().hex[:8]}",
              "CS_SECRET_KEY": "startup-test-secret", "CS_DATA_DIR": str(tmp_path / "data")}
    values.update(change)
    return service_env(**{k: v for k, v in values.items() if v is not None})


def embedded(tmp_path, **change: str | None) -> dict[str, str]:
    values = {"CS_DATA_DIR": str(tmp_path / "data"), **change}
    return service_env(**{k: v for k, v in values.items() if v is not None})


def a_file(tmp_path) -> str:
    path = tmp_path / "not-a-directory"
    path.write_text("a file where the data directory should be\n")
    return str(path)


# (the setting named in the refusal, the changes that make it bad)
BAD = {
    "missing secret": ("CS_SECRET_KEY", lambda tmp: {"CS_SECRET_KEY": None}),
    "stripe base": ("STRIPE_API_BASE", lambda tmp: {"STRIPE_API_BASE": "not a url"}),
    "data dir is a file": ("CS_DATA_DIR", lambda tmp: {"CS_DATA_DIR": a_file(tmp)}),
    "bad int": ("CS_WORKER_THREADS", lambda tmp: {"CS_WORKER_THREADS": "four"}),
}
COMMANDS = {"serve": ["serve", "--port"], "worker": ["worker"], "tenant list": ["tenant", "list"]}


class HeldPort:
    """A port this test listens on: nobody else can open it meanwhile."""

    def __init__(self):
        self.port = free_port()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen()

    def close(self) -> None:
        self.sock.close()


def run_refused(argv: list[str], env: dict[str, str], tmp_path) -> tuple[int, list[str], str]:
    """Run a command that should refuse to start; its exit code, stderr lines and stdout."""
    service = Service(argv, env=env, cwd=tmp_path, log=tmp_path / f"{uuid.uuid4().hex[:6]}.err")
    try:
        code = service.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{argv[:3]} did not stop at start\n{service.describe()}") from None
    finally:
        service.kill()
    lines = [line for line in service.log.read_text(errors="replace").splitlines() if line.strip()]
    return code, lines, service.stdout()


def test_the_production_environment_of_these_tests_is_good(migrated, tmp_path):
    done = subprocess.run([CS, "tenant", "list", "--json"], env=production(migrated, tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_setting_stops_cs_at_start_with_one_line(migrated, tmp_path, case, command):
    name, change = BAD[case]
    held = HeldPort()
    argv = [CS, *COMMANDS[command]] + ([str(held.port)] if command == "serve" else [])
    try:
        code, lines, stdout = run_refused(argv, production(migrated, tmp_path, **change(tmp_path)), tmp_path)
    finally:
        held.close()
    assert code == 2, (lines, stdout)
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}: "), lines
    assert stdout == ""   # nothing started, nothing printed as serving


@pytest.mark.parametrize("command", ["serve", "tenant list"])
@pytest.mark.parametrize("case", ["stripe base", "data dir is a file", "bad int"])
def test_a_bad_setting_stops_the_embedded_mode_too(tmp_path, case, command):
    name, change = BAD[case]
    held = HeldPort()
    argv = [CS, *COMMANDS[command]] + ([str(held.port)] if command == "serve" else [])
    try:
        code, lines, stdout = run_refused(argv, embedded(tmp_path, **change(tmp_path)), tmp_path)
    finally:
        held.close()
    assert code == 2, (lines, stdout)
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}: "), lines
    assert stdout == ""


def test_gunicorn_on_its_own_refuses_before_opening_its_port(migrated, tmp_path):
    held = HeldPort()
    argv = [PYTHON, "-m", "gunicorn", "webapp.wsgi:app", "--bind", f"127.0.0.1:{held.port}",
            "--config", "python:webapp.gunicorn_hooks", "--no-control-socket"]
    env = production(migrated, tmp_path, CS_SECRET_KEY=None)
    try:
        code, lines, _ = run_refused(argv, {**env, "PYTHONPATH": str(ROOT)}, tmp_path)
    finally:
        held.close()
    assert code == 2, lines
    assert [line for line in lines if line.startswith("error:")] == [
        "error: CS_SECRET_KEY: required when REDIS_URL is set (every process must share it)"]
    assert not any("Listening at" in line or "in use" in line for line in lines), lines


def test_dramatiq_on_its_own_refuses_with_one_line(migrated, tmp_path):
    argv = [PYTHON, "-m", "dramatiq", "cs_daemon.jobs.entry", "--processes", "1", "--threads", "1"]
    env = production(migrated, tmp_path, STRIPE_API_BASE="not a url")
    code, lines, _ = run_refused(argv, {**env, "PYTHONPATH": str(ROOT)}, tmp_path)
    assert code == 2, lines
    assert [line for line in lines if line.startswith("error:")] == [
        "error: STRIPE_API_BASE: must be an http:// or https:// URL with a host"]
