"""bench/ingest.py's lean sender against a real HTTP server on loopback: what it writes is
read as the POST it stands for, and what it reads back is the server's answer."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

BENCH = Path(__file__).parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # ingest.py imports harness by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ingest():
    saved = {k: sys.modules.get(k) for k in ("harness", "ingest")}
    _load("harness")
    yield _load("ingest")
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v


@pytest.fixture
def receiver():
    seen = []

    @Request.application
    def app(request: Request) -> Response:
        body = request.get_data()
        seen.append((request.method, request.path, request.headers.get("Authorization"), body))
        if request.headers.get("Authorization") == "Bearer refused":
            return Response('{"error": "no"}', status=401, content_type="application/json")
        events = json.loads(body)["events"]
        return Response(json.dumps({"accepted": len(events) - 1, "duplicates": 1}), content_type="application/json")

    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port, seen
    server.shutdown()
    server.server_close()


def _job(ingest, port: int, key: str):
    corpus = ingest.make_corpus(3 * ingest.BATCH, 5, 7)
    return {"corpus": corpus, "port": port, "headers": [ingest.headers(key)]}


def test_the_sender_posts_each_batch_and_tallies_the_answers(ingest, receiver):
    port, seen = receiver
    job, start, res = _job(ingest, port, "k1"), threading.Event(), ingest.Tally()
    start.set()
    ingest.service_client(job, [0, 2], start, res)
    bodies = job["corpus"].bodies
    assert seen == [("POST", "/api/track", "Bearer k1", bodies[0]), ("POST", "/api/track", "Bearer k1", bodies[2])]
    assert (res.batches, res.events, res.accepted) == (2, 2 * ingest.BATCH, 2 * (ingest.BATCH - 1))


def test_a_refused_batch_stops_the_sender(ingest, receiver):
    port, _ = receiver
    job, start = _job(ingest, port, "refused"), threading.Event()
    start.set()
    with pytest.raises(ingest.h.BenchError, match="batch 1: HTTP 401"):
        ingest.service_client(job, [1], start, ingest.Tally())
