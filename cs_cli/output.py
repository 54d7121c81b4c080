"""Rendering for the terminal: one JSON document with --json, rich tables otherwise;
errors are one red line on stderr and a non-zero exit."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any, Callable, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

class _Lazy:
    """A rich console made at use, so a redirected stream (a pipe, a test) is honoured;
    piped output is not squeezed into 80 columns."""

    def __init__(self, stderr: bool):
        self.stderr = stderr

    def print(self, *args, **kwargs) -> None:
        stream = sys.stderr if self.stderr else sys.stdout
        width = None if stream.isatty() else 160
        Console(file=stream, width=width).print(*args, **kwargs)


out = _Lazy(stderr=False)
err = _Lazy(stderr=True)


def _default(value: Any):
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=_default, indent=2) + "\n")
    sys.stdout.flush()


def styled(value: Any, style: str) -> Text:
    """A table cell or line part in a style; its text is never read as markup."""
    return Text(str(value), style=style)


def cell(value: Any) -> Text:
    """A table cell: a styled Text as it is, anything else as plain text. A stored value
    (a name, a user id, a label) may hold `[...]`, which rich would read as markup: a
    crash on `[/x]`, a lost word on `[red]`."""
    if isinstance(value, Text):
        return value
    return Text("" if value is None else value.isoformat(timespec="seconds") if isinstance(value, datetime)
                else str(value))


def table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> None:
    t = Table(title=escape(title), title_justify="left", header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold", no_wrap=col in ("id", "prefix", "tenant_id", "member_id"))
    for row in rows:
        t.add_row(*(cell(v) for v in row))
    out.print(t)


def listed(json_: bool, key: str, items: list, none: str, show: Callable[[list], None]) -> None:
    """A list command's answer: `{key: [...]}` with --json, else `none` (dimmed) when nothing
    matches, else `show(items)`."""
    if json_:
        print_json({key: [i.model_dump(mode="json") for i in items]})
    elif not items:
        out.print(f"[dim]{none}[/dim]")
    else:
        show(items)


def success(message: str) -> None:
    out.print(f"[green]✓[/green] {escape(message)}", highlight=False)


class Failure(Exception):
    """A command failed for a reason the user can fix; printed as one line."""

    def __init__(self, message: str, code: str = "error", exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.code = code
        self.exit_code = exit_code


def fail_line(message: str, code: str, json_mode: bool, extra: dict | None = None) -> None:
    """One `error:` line on stderr; with --json also the error body on stdout, with the
    fields the API's body has besides (`details`, a plan limit's `current`, `limit`,
    `upgrade_to`)."""
    if json_mode:
        print_json({"error": message, "code": code, **(extra or {})})
    err.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)
