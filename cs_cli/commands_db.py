from __future__ import annotations

import typer

from cs_daemon import migrate

from .context import runtime
from .output import print_json, success

app = typer.Typer(help="Database schema.", no_args_is_help=True)


@app.command("upgrade")
def upgrade(json_: bool = typer.Option(False, "--json", help="Print a JSON document.")):
    """Apply every pending migration (safe to run again)."""
    rt = runtime(migrate_embedded=False)
    migrate.upgrade(rt.settings)
    if json_:
        print_json({"upgraded": True, "database": rt.settings.db_url.split("@")[-1]})
    else:
        success("database schema is current")
