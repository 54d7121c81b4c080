"""The `cs` fixture: run a command in-process with the test's settings in the environment."""

from __future__ import annotations

import pytest

from cs_cli.main import run


@pytest.fixture
def cs(settings, monkeypatch, capsys):
    env = {"CS_DATA_DIR": str(settings.cs_data_dir), "CS_SECRET_KEY": "test-secret",
           "DATABASE_URL": settings.database_url or "", "REDIS_URL": settings.redis_url or "",
           "CS_REDIS_PREFIX": settings.cs_redis_prefix}
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def invoke(*argv: str):
        capsys.readouterr()
        code = run(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke
