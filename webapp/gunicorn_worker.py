"""The gunicorn worker class of the API processes (`cs serve` passes
`--worker-class webapp.gunicorn_worker.StreamWorker`): gunicorn's gthread worker, which
forgets a connection whose socket was handed to the in-app stream loop
(webapp/stream_handoff.py) instead of closing it, and which, once it has stopped serving,
ends those streams properly before the process exits (in_app_loop.finish)."""

from __future__ import annotations

from gunicorn.workers.gthread import ThreadWorker

# the part of gunicorn's graceful timeout the held streams may take to end (the rest is
# for the process's own exit)
STREAMS_SHARE = 0.25


class StreamWorker(ThreadWorker):
    def finish_request(self, conn, fs) -> None:
        if conn.sock.fileno() < 0:      # detached: the stream loop holds the connection now
            self.nr_conns -= 1
            return
        super().finish_request(conn, fs)

    def run(self) -> None:
        # start-up cost: gunicorn's master loads this class; only its workers hold streams
        from cs_daemon.channels import in_app_loop

        super().run()
        # gunicorn has let go of the streams' connections: without this the process's exit
        # would cut them off mid-body
        in_app_loop.finish(self.cfg.graceful_timeout * STREAMS_SHARE)
