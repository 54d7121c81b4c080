"""Gunicorn hooks of the API processes: `cs serve` runs gunicorn with
`--config python:webapp.gunicorn_hooks`."""

from __future__ import annotations

import signal
import threading


def on_starting(server) -> None:
    """Check every setting in the master before it opens its port: a bad one is one line
    and exit code 2 (docs/configuration.md)."""
    from cs_daemon.config import load_settings_or_exit

    load_settings_or_exit()


def child_exit(server, worker) -> None:
    """A worker process is gone: its open-stream gauge stops counting (docs/operations.md)."""
    from cs_daemon import metrics

    metrics.process_exited(worker.pid)


def post_worker_init(worker) -> None:
    """On SIGTERM, end the process's open in-app streams at once, so that a graceful stop
    (a restart, a deploy) does not wait out the whole graceful timeout for them; their
    clients reconnect, with Last-Event-ID, to a process that is still serving."""
    from cs_daemon.channels import in_app_stream
    from cs_daemon.jobs.heartbeat import ProcessHeartbeat

    ProcessHeartbeat(worker.wsgi.extensions["cs"], "api").start()   # read by `cs status`
    graceful = worker.handle_exit

    def handle_exit(signum, frame) -> None:
        # not in the handler itself: waking the streams takes locks
        threading.Thread(target=in_app_stream.end_all, name="end in-app streams", daemon=True).start()
        graceful(signum, frame)

    signal.signal(signal.SIGTERM, handle_exit)
