from __future__ import annotations

import errno
import json
import logging
import signal
import socket
import threading

import typer

from cs_daemon.jobs.heartbeat import ProcessHeartbeat
from cs_daemon.runtime import Runtime
from cs_daemon.tenants import service as tenants

from .context import require_current_schema, runtime
from .output import Failure, out

log = logging.getLogger("cs.serve")


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port (0 picks a free one)."),
        demo: bool = typer.Option(False, "--demo", help="Embedded mode: create a demo tenant on first run and "
                                                        "print a working curl."),
    ):
        """Run the daemon. Embedded (no REDIS_URL): API and worker in this one process.
        Production (REDIS_URL set): supervise gunicorn API processes and Dramatiq workers."""
        if not host.strip():
            raise typer.BadParameter("must name an address (127.0.0.1, 0.0.0.0, a host name)", param_hint="--host")
        rt = runtime()
        if demo and rt.settings.production:
            raise typer.BadParameter("is for a trial in the embedded mode; in production make tenants with "
                                     "`cs tenant create`", param_hint="--demo")
        require_current_schema(rt)
        if rt.settings.production:
            # start-up cost: the supervisor is loaded only by a command that runs it
            from .supervisor import supervise

            raise typer.Exit(supervise(rt.settings, host, port))
        serve_embedded(rt, host, port, demo)

    @app.command("worker")
    def worker(
        processes: int = typer.Option(None, "--processes", min=1, help="Worker processes (default CS_WORKER_PROCESSES)."),
        threads: int = typer.Option(None, "--threads", min=1, help="Threads per process (default CS_WORKER_THREADS)."),
    ):
        """Run Dramatiq worker processes for this deployment (production mode)."""
        rt = runtime(migrate_embedded=False)
        if not rt.settings.production:
            raise Failure("cs worker needs REDIS_URL (in the embedded mode `cs serve` runs the worker itself)", "usage", 2)
        require_current_schema(rt)
        from .supervisor import run_workers   # start-up cost: loaded only by the command that runs it

        raise typer.Exit(run_workers(rt.settings, processes, threads))


def _port_free(host: str, port: int) -> None:
    """One clear line when the port is taken (werkzeug prints two and exits), before the
    worker or anything else starts."""
    try:
        socket.create_server((host, port)).close()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise Failure(f"{host}:{port} is in use by another program: stop it, or choose another --port",
                          "usage") from None
        raise Failure(f"{host}:{port} cannot be opened ({exc.strerror}): choose another --host or --port",
                      "usage") from None


def serve_embedded(rt: Runtime, host: str, port: int, demo: bool) -> None:
    # start-up cost: the web app (Flask and every route) is loaded only by the command that serves
    from werkzeug.serving import make_server
    from webapp import create_app
    from webapp.stream_handoff import RequestHandler

    _port_free(host, port)
    demo_key = _demo_tenant(rt) if demo else None
    app = create_app(runtime=rt)
    rt.start_worker()
    heartbeat = ProcessHeartbeat(rt, "api").start()   # read by `cs status`
    server = make_server(host, port, app, threaded=True,   # streams: the event loop
                         request_handler=RequestHandler.bounded(rt.settings.cs_client_timeout_seconds))
    url = f"http://{host}:{server.server_port}"
    out.print(f"[bold green]cs[/bold green] serving on [bold]{url}[/bold] (embedded: {rt.settings.db_url.split('///')[-1]}, in-process worker)")
    if demo_key:
        out.print("  demo tenant key: " + demo_key)
        out.print(f"  try: curl -H 'Authorization: Bearer {demo_key}' {url}/api/settings")
    out.print(f"  health: curl {url}/api/health   ·   stop: Ctrl-C", highlight=False)

    def _stop(signum, _frame):
        log.info("signal %s: stopping", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        heartbeat.stop()
        rt.stop_worker()
        out.print("stopped")


def _demo_tenant(rt: Runtime) -> str | None:
    """Create the demo tenant once; its key is kept in the data directory (local use only)."""
    path = rt.settings.cs_data_dir / "demo.json"
    if path.exists():
        return json.loads(path.read_text()).get("api_key")
    with rt.session() as s:
        if tenants.count(s):
            return None
        made = tenants.create(s, name="Demo", owner_email="owner@demo.example", now=rt.now())
    path.write_text(json.dumps({"tenant_id": made.tenant.id, "api_key": made.key.secret}))
    path.chmod(0o600)
    return made.key.secret


