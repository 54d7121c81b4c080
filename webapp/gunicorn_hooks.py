"""Gunicorn hooks of the API processes: `cs serve` runs gunicorn with
`--config python:webapp.gunicorn_hooks`."""

from __future__ import annotations

import json
import signal
import threading

from gunicorn import util


def write_error(sock, status: int, reason: str, message: str) -> None:
    """gunicorn's own refusals, made before the app sees the request (a request line over
    4094 bytes: 414, too many or too long headers: 431, a malformed request: 400), in
    the API's error shape instead of gunicorn's HTML page (docs/api.md, Errors)."""
    from webapp import HTTP_CODES   # start-up cost: the master answers with the app's codes without loading the app

    code = HTTP_CODES.get(status, "internal" if status >= 500 else "validation_failed")
    text = f"{reason.lower()}: {message}" if message else reason.lower()
    body = json.dumps({"error": text, "code": code}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin1") + body)


util.write_error = write_error   # gunicorn's workers answer their refusals through util.write_error


def on_starting(server) -> None:
    """Check every setting in the master before it opens its port: a bad one is one line
    and exit code 2 (docs/configuration.md)."""
    # start-up cost: gunicorn's master loads this module; it imports what each hook needs
    from cs_daemon.config import load_settings_or_exit

    load_settings_or_exit()


def child_exit(server, worker) -> None:
    """A worker process is gone: its open-stream gauge stops counting (docs/operations.md)."""
    from cs_daemon import metrics   # start-up cost: loaded in the master only when a worker exits

    metrics.process_exited(worker.pid)


def post_worker_init(worker) -> None:
    """On SIGTERM, end the process's open in-app streams at once, so that a graceful stop
    (a restart, a deploy) does not wait out the whole graceful timeout for them; their
    clients reconnect, with Last-Event-ID, to a process that is still serving."""
    # start-up cost: only the API worker processes hold streams, not gunicorn's master
    from cs_daemon.channels import in_app_stream
    from cs_daemon.jobs.heartbeat import ProcessHeartbeat

    ProcessHeartbeat(worker.wsgi.extensions["cs"], "api").start()   # read by `cs status`
    graceful = worker.handle_exit

    def handle_exit(signum, frame) -> None:
        # not in the handler itself: waking the streams takes locks
        threading.Thread(target=in_app_stream.end_all, name="end in-app streams", daemon=True).start()
        graceful(signum, frame)

    signal.signal(signal.SIGTERM, handle_exit)
