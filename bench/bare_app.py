"""The baseline of bench/api_overhead.py: a bare Flask app whose one route runs one raw
psycopg query over a per-process connection and returns JSON. Served by gunicorn exactly
like the real app (`gunicorn bare_app:app --pythonpath bench`); BENCH_PG_CONNINFO says
which database to read (a libpq conninfo or postgresql:// URL)."""

from __future__ import annotations

import json
import os

import psycopg
from flask import Flask, Response

app = Flask(__name__, static_folder=None)
_conn: psycopg.Connection | None = None
_pid: int | None = None


def _connection() -> psycopg.Connection:
    """One connection per process, opened lazily in the worker (after gunicorn's fork)."""
    global _conn, _pid
    if _conn is None or _conn.closed or _pid != os.getpid():
        _conn = psycopg.connect(os.environ["BENCH_PG_CONNINFO"], autocommit=True, connect_timeout=3)
        _pid = os.getpid()
    return _conn


@app.get("/bare")
def bare() -> Response:
    row = _connection().execute("SELECT id, name FROM tenants LIMIT 1").fetchone()
    body = {"id": row[0], "name": row[1]} if row else None
    return Response(json.dumps(body), status=200, mimetype="application/json")
