from __future__ import annotations

from pathlib import Path

import typer
import yaml
from pydantic import ValidationError

from cs_daemon import jsontext
from cs_daemon.errors import ValidationFailed
from cs_daemon.schemas import error_details
from cs_daemon.playbooks import service
from cs_daemon.playbooks.schemas import PlaybookCreate, PlaybookPublic
from cs_daemon.tenants import service as tenants

from . import tenant_option
from .context import runtime
from .output import Failure, print_json, success, table

app = typer.Typer(help="Playbooks: listing, audience previews and applying playbook files.", no_args_is_help=True)
STATUSES = ("draft", "active", "paused", "archived")


def _load(source: str) -> object:
    """JSON text, or a .json / .yaml / .yml file."""
    path = Path(source)
    if source.lstrip().startswith(("{", "[")):
        text, kind = source, "json"
    elif path.is_file():
        text, kind = path.read_bytes(), ("yaml" if path.suffix.lower() in (".yaml", ".yml") else "json")
    else:
        raise Failure(f"{source!r} is neither JSON nor a readable file", "validation_failed", 2)
    try:   # what the API would take: UTF-8, JSON read as its bodies are (jsontext: depth, NUL, ...)
        value = yaml.safe_load(text.decode() if isinstance(text, bytes) else text) if kind == "yaml" \
            else jsontext.loads(text)
        if jsontext.depth(value) > jsontext.MAX_DEPTH:
            raise ValueError(f"nested deeper than {jsontext.MAX_DEPTH} levels")
        return value
    except (ValueError, yaml.YAMLError, RecursionError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        if isinstance(exc, RecursionError):
            first = f"nested deeper than {jsontext.MAX_DEPTH} levels"
        raise Failure(f"cannot parse {source if kind == 'yaml' or path.is_file() else 'the JSON given'}: {first}",
                      "validation_failed", 2) from None


@app.command("list")
def list_(
    tenant: str = tenant_option.option(),
    status: str = typer.Option(None, "--status", help="Only this status (draft, active, paused, archived)."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """The tenant's playbooks, oldest first, with each one's observed success rate."""
    if status is not None and status not in STATUSES:
        raise Failure(f"--status must be one of {', '.join(STATUSES)}", "validation_failed", 2)
    rt = runtime()
    with rt.session(tenant) as s:
        rates = service.success_rates(s)
        rows = []
        for playbook in service.list_all(s):
            if status is None or playbook.status == status:
                public = PlaybookPublic.model_validate(playbook)
                public.success_rate = rates.get(playbook.id)
                rows.append(public)
    if json_:
        print_json({"playbooks": [r.model_dump(mode="json") for r in rows]})
        return
    table("Playbooks", ["name", "id", "status", "area", "success rate", "created"],
          [[r.name, r.id, r.status, r.lifecycle_area or "", "" if r.success_rate is None else f"{r.success_rate:.0%}",
            r.created_at] for r in rows])


@app.command("preview-count")
def preview_count(
    tenant: str = tenant_option.option(),
    conditions: str = typer.Option(..., "--conditions", help="An entry-condition tree: JSON text or a file."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """How many users an entry-condition tree matches now."""
    tree = _load(conditions)
    if not isinstance(tree, dict):
        raise Failure("the conditions must be a JSON object", "validation_failed", 2)
    rt = runtime()
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=rt.now())
        count = service.preview_count(s, tree, now=rt.now())
    if json_:
        print_json({"matching_users": count})
    else:
        success(f"{count} users match")


@app.command("apply")
def apply(
    file: str = typer.Argument(..., help="A .yaml/.yml or .json file: one playbook or a list of them."),
    tenant: str = tenant_option.option(),
    json_: bool = typer.Option(False, "--json", help="Print a JSON document."),
):
    """Create or update playbooks from a file, matched by name (safe to run again).
    A playbook may carry `status` (draft, active, paused, archived)."""
    data = _load(file)
    items = data if isinstance(data, list) else [data]
    specs = [_spec(i, item) for i, item in enumerate(items)]
    rt = runtime()
    results = []
    with rt.session(tenant) as s:
        tenants.get(s, tenant, now=rt.now())
        for fields, status in specs:
            existing = service.find_by_name(s, fields["name"])
            if existing:
                playbook, action = service.update(s, existing.id, fields, now=rt.now()), "updated"
            else:
                playbook, action = service.create(s, tenant, fields, now=rt.now()), "created"
            if status and status != playbook.status:
                service.set_status(s, playbook.id, status, now=rt.now())
            results.append({"id": playbook.id, "name": playbook.name, "status": playbook.status, "result": action})
    if json_:
        print_json({"playbooks": results})
        return
    table("Playbooks applied", ["name", "id", "status", "result"],
          [[r["name"], r["id"], r["status"], r["result"]] for r in results])


def _spec(index: int, item) -> tuple[dict, str | None]:
    if not isinstance(item, dict):
        raise Failure(f"playbook #{index + 1}: must be an object", "validation_failed", 2)
    unknown = sorted(set(item) - set(PlaybookCreate.model_fields) - {"status"})
    if unknown:   # a file is written by hand: a misspelt `entry_condition:` would apply a playbook without them
        raise Failure(f"playbook #{index + 1} ({item.get('name', '?')}): unknown key {unknown[0]!r}; the keys are "
                      f"{', '.join([*PlaybookCreate.model_fields, 'status'])}", "validation_failed", 2)
    status = item.get("status")
    if status is not None and status not in ("draft", "active", "paused", "archived"):
        raise Failure(f"playbook #{index + 1}: status must be draft, active, paused or archived", "validation_failed", 2)
    try:
        parsed = PlaybookCreate.model_validate(item)
    except ValidationError as exc:
        details = error_details(exc, "")
        first = details[0]
        raise ValidationFailed(f"playbook #{index + 1} ({item.get('name', '?')}): {first['field']}: {first['message']}",
                               details) from None
    return parsed.model_dump(exclude_unset=True), status
