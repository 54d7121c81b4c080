"""The API worker's close of a finished connection (webapp/gunicorn_worker.py): half-closed
at once, drained from the worker's poller, closed at the client's close, at the drain cap
or past the deadline; never a wait on the thread that serves. On real socket pairs, the
worker's own poller driven by hand."""

from __future__ import annotations

import errno
import selectors
import socket
from collections import deque

import pytest

from webapp import gunicorn_worker
from webapp.client_reads import ClientTooSlow, PatientReads
from webapp.gunicorn_worker import StreamWorker


@pytest.fixture
def worker():
    w = object.__new__(StreamWorker)      # the parts _close and murder_pending use, not a process
    w.poller = selectors.DefaultSelector()
    w.lingering = deque()
    w.pending_conns = deque()
    yield w
    w.poller.close()


def _turn(worker: StreamWorker) -> None:
    """One turn of gthread's loop: the poller's callbacks, then the expiries."""
    for key, _ in worker.poller.select(0):
        key.data(key.fileobj)
    worker.murder_pending()


def test_a_closing_connection_is_half_closed_at_once_and_closed_when_the_client_closes(worker):
    ours, client = socket.socketpair()
    worker._close(ours, graceful=True)
    client.settimeout(1)
    assert client.recv(10) == b""            # the end of our stream arrived without a wait
    client.sendall(b"late request bytes")    # what a client may still send is read, not reset
    _turn(worker)
    assert ours.fileno() >= 0 and worker.lingering[0].drained == len(b"late request bytes")
    client.close()
    _turn(worker)
    assert ours.fileno() < 0 and not worker.lingering


def test_a_client_that_never_closes_is_closed_past_the_deadline(worker):
    ours, client = socket.socketpair()
    worker._close(ours, graceful=True)
    _turn(worker)
    assert ours.fileno() >= 0                # within the deadline: still draining
    worker.lingering[0].deadline = 0.0       # the deadline passed
    _turn(worker)
    assert ours.fileno() < 0 and not worker.lingering
    client.close()


def test_a_client_that_keeps_sending_is_closed_at_the_drain_cap(worker, monkeypatch):
    monkeypatch.setattr(gunicorn_worker, "LINGER_MAX_BYTES", 8192)
    ours, client = socket.socketpair()
    worker._close(ours, graceful=True)
    client.sendall(b"x" * 9000)
    _turn(worker)
    assert ours.fileno() < 0 and not worker.lingering
    client.close()


def test_closes_without_grace_are_immediate(worker):
    ours, client = socket.socketpair()
    worker._close(ours)
    assert ours.fileno() < 0 and not worker.lingering
    client.close()


def test_a_read_that_times_out_is_a_connection_reset_to_gunicorn():
    """gunicorn logs a socket error with its traceback, except a reset (debug level): a
    client that stops sending is reset for it (webapp/client_reads.py)."""
    ours, client = socket.socketpair()
    reads = PatientReads(ours, 0.05)
    reads.settimeout(0.05)                   # the socket's own methods pass through
    assert reads.gettimeout() == 0.05
    client.sendall(b"GET / HTTP/1.1\r\n")
    assert reads.recv(100) == b"GET / HTTP/1.1\r\n"
    with pytest.raises(ClientTooSlow) as raised:
        reads.recv(100)
    assert raised.value.errno == errno.ECONNRESET and "0.05 s" in str(raised.value)
    ours.close()
    client.close()
