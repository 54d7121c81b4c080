"""The gunicorn worker class of the API processes (`cs serve` passes
`--worker-class webapp.gunicorn_worker.StreamWorker`): gunicorn's gthread worker, which
forgets a connection whose socket was handed to the in-app stream loop
(webapp/stream_handoff.py) instead of closing it, which lets a new connection wait for
its first bytes without a thread and bounds every read and write of a request by
CS_CLIENT_TIMEOUT_SECONDS (webapp/client_reads.py), which closes a finished
connection without its main thread waiting on the client (below), and which, once it has
stopped serving, ends those streams properly before the process exits
(in_app_loop.finish).

Closing a connection after its last response, gunicorn half-closes it and reads what
the client still sends until the client closes too (at most 2 s and 64 KiB), so that
unread request bytes do not make the kernel reset the connection and cut off the
response (RFC 9112, 9.6). gthread does that on the thread that accepts connections and
finishes every request, so a client that leaves such a connection open held the whole
process for 2 s: three of them, six seconds without an answer to anyone. Here the
socket goes to the worker's own poller instead, drained as data comes and closed at
the client's close, at 64 KiB, or past its deadline (docs/deploy.md, "Slow clients")."""

from __future__ import annotations

import selectors
import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass
from functools import partial

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from .client_reads import PatientReads

# the part of gunicorn's graceful timeout the held streams may take to end (the rest is
# for the process's own exit)
STREAMS_SHARE = 0.25
LINGER_SECONDS = 2.0        # as gunicorn's own graceful close
LINGER_MAX_BYTES = 65536


@dataclass(eq=False)
class _Lingering:
    sock: socket.socket
    deadline: float
    drained: int = 0
    closed: bool = False


class StreamWorker(ThreadWorker):
    def init_process(self) -> None:
        self.lingering: deque[_Lingering] = deque()   # in deadline order
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.client_timeout = self.wsgi.extensions["cs"].settings.cs_client_timeout_seconds

    def enqueue_req(self, conn) -> None:
        """A new connection waits for its first bytes in the poller, not on a thread (gthread
        gave it a thread for up to 5 s: a few connections that sent nothing held every
        thread), for CS_CLIENT_TIMEOUT_SECONDS at the most."""
        if conn.initialized or conn.data_ready:
            super().enqueue_req(conn)
            return
        conn.sock.setblocking(False)
        conn.timeout = time.monotonic() + self.client_timeout
        self.pending_conns.append(conn)    # in timeout order: every entry waits as long
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def handle(self, conn):
        if "init" not in vars(conn):
            conn.init = partial(self._begin, conn, conn.init)
        return super().handle(conn)

    def _begin(self, conn, init) -> None:
        """Before each request of a connection: gthread calls init just after making the
        socket blocking, which leaves its reads and writes without a bound."""
        init()
        conn.sock.settimeout(self.client_timeout)
        unreader = getattr(conn.parser, "unreader", None)
        if unreader is not None and not isinstance(unreader.sock, PatientReads):
            unreader.sock = PatientReads(unreader.sock, self.client_timeout)

    def finish_request(self, conn, fs) -> None:
        if conn.sock.fileno() < 0:      # detached: the stream loop holds the connection now
            self.nr_conns -= 1
            return
        if "close" not in vars(conn):   # gthread closes on this (main) thread: see the module's doc
            conn.close = partial(self._close, conn.sock)
        super().finish_request(conn, fs)

    def _close(self, sock: socket.socket, graceful: bool = False) -> None:
        if not graceful:
            util.close(sock)
            return
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
        except OSError:
            util.close(sock)
            return
        entry = _Lingering(sock, time.monotonic() + LINGER_SECONDS)
        self.lingering.append(entry)
        self.poller.register(sock, selectors.EVENT_READ, partial(self._drain, entry))

    def _drain(self, entry: _Lingering, _sock) -> None:
        try:
            while entry.drained < LINGER_MAX_BYTES:
                data = entry.sock.recv(4096)
                if not data:
                    break
                entry.drained += len(data)
        except (BlockingIOError, ssl.SSLWantReadError):
            return              # the client has not closed yet: wait for more
        except OSError:
            pass
        self._end(entry)

    def _end(self, entry: _Lingering) -> None:
        if entry.closed:
            return
        entry.closed = True
        try:
            self.poller.unregister(entry.sock)
        except (KeyError, ValueError, OSError):
            pass
        util.close(entry.sock)

    def murder_pending(self) -> None:
        # gthread calls this on every turn of its loop, serving or stopping
        super().murder_pending()
        now = time.monotonic()
        while self.lingering and (self.lingering[0].closed or self.lingering[0].deadline <= now):
            self._end(self.lingering.popleft())

    def run(self) -> None:
        # start-up cost: gunicorn's master loads this class; only its workers hold streams
        from cs_daemon.channels import in_app_loop

        super().run()
        for entry in self.lingering:    # gthread has closed its poller: just close them
            if not entry.closed:
                entry.closed = True
                util.close(entry.sock)
        # gunicorn has let go of the streams' connections: without this the process's exit
        # would cut them off mid-body
        in_app_loop.finish(self.cfg.graceful_timeout * STREAMS_SHARE)
