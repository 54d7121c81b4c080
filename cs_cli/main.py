"""`cs`: operate the service from a terminal. Every command reads the same settings as
the daemon, so it acts on the same data; `--json` prints one JSON document on stdout."""

from __future__ import annotations

import logging
import os
import sys

import click
import typer
from typer import _click as typer_click

from cs_daemon.config import SettingsError, load_settings
from cs_daemon.errors import ServiceError

from . import (
    commands_actions,
    commands_analytics,
    commands_customers,
    commands_db,
    commands_decide,
    commands_doctor,
    commands_events,
    commands_flags,
    commands_interventions,
    commands_keys,
    commands_partner,
    commands_playbooks,
    commands_serve,
    commands_status,
    commands_team,
    commands_tenant,
    commands_webhooks,
)
from .output import Failure, fail_line

app = typer.Typer(
    name="cs",
    help="Customer-success automation service: run the daemon, and manage tenants, keys, playbooks, "
         "interventions, webhooks and the kill switch and shadow mode.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
commands_serve.register(app)
app.add_typer(commands_db.app, name="db")
app.add_typer(commands_tenant.app, name="tenant")
app.add_typer(commands_partner.app, name="partner")
app.add_typer(commands_keys.app, name="keys")
app.add_typer(commands_events.app, name="events")
app.add_typer(commands_customers.app, name="customers")
app.add_typer(commands_playbooks.app, name="playbooks")
app.add_typer(commands_decide.app, name="decide")
app.add_typer(commands_interventions.app, name="interventions")
app.add_typer(commands_interventions.escalations, name="escalations")
app.add_typer(commands_team.app, name="team")
commands_analytics.register(app)
app.add_typer(commands_webhooks.app, name="webhooks")
app.add_typer(commands_actions.app, name="actions")
commands_flags.register(app)
commands_doctor.register(app)
commands_status.register(app)

log = logging.getLogger("cs")


def run(argv: list[str]) -> int:
    """Run one command; return its exit code. Errors become one line, never a traceback."""
    json_mode = "--json" in argv
    command = typer.main.get_command(app)
    try:
        # Every setting is checked once, before any command runs (docs/configuration.md);
        # help is shown whatever the environment holds.
        settings = None if _asks_for_help(argv) else load_settings()
        result = command.main(args=argv, prog_name="cs", standalone_mode=False, obj=settings)
        return result if isinstance(result, int) else 0
    except (click.exceptions.Exit, typer.Exit) as exc:
        return exc.exit_code
    except (click.exceptions.Abort, typer.Abort):
        fail_line("aborted", "aborted", json_mode)
        return 130
    except typer_click.exceptions.NoArgsIsHelpError as exc:
        sys.stderr.write(exc.format_message() + "\n")
        return 2
    except (click.ClickException, typer_click.exceptions.ClickException) as exc:
        fail_line(" ".join(exc.format_message().split()), "usage", json_mode)   # click words some on lines
        return exc.exit_code
    except SettingsError as exc:
        fail_line(str(exc), "bad_setting", json_mode)
        return 2
    except ServiceError as exc:
        detail = "; ".join(f"{d['field']}: {d['message']}" for d in exc.extra.get("details", []))
        fail_line(f"{exc.message}" + (f" ({detail})" if detail and detail not in exc.message else ""),
                  exc.code, json_mode, exc.extra)
        return 1
    except Failure as exc:
        fail_line(exc.message, exc.code, json_mode)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("CS_LOG_LEVEL", "").upper() == "DEBUG":
            log.exception("unexpected error")
        first = (str(exc).strip().splitlines() or [""])[0]
        fail_line(f"unexpected error: {type(exc).__name__}: {first}", "internal", json_mode)
        return 1


def _asks_for_help(argv: list[str]) -> bool:
    return not argv or "--help" in argv


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
