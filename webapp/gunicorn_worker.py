"""The gunicorn worker class of the API processes (`cs serve` passes
`--worker-class webapp.gunicorn_worker.StreamWorker`): gunicorn's gthread worker, which
forgets a connection whose socket was handed to the in-app stream loop
(webapp/stream_handoff.py) instead of closing it."""

from __future__ import annotations

from gunicorn.workers.gthread import ThreadWorker


class StreamWorker(ThreadWorker):
    def finish_request(self, conn, fs) -> None:
        if conn.sock.fileno() < 0:      # detached: the stream loop holds the connection now
            self.nr_conns -= 1
            return
        super().finish_request(conn, fs)
