"""Small records the engineer on call reads with `cs status` (docs/operations.md): each
process's heartbeat and each sweep's last run. In production they are hashes in Redis,
which every process and `cs status` share; in the embedded mode the daemon and `cs status`
are separate processes with no Redis between them, so they are JSON files in
CS_DATA_DIR/ops/, one a record, replaced whole."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

HEARTBEATS = "ops:heartbeats"
SWEEP_RUNS = "ops:sweep_runs"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def put(rt, name: str, field: str, value: dict) -> None:
    text = json.dumps(value, default=str)
    if rt.settings.redis_url:
        rt.cache.hset(name, field, text)
        return
    folder = _folder(rt, name)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, folder / (_SAFE.sub("_", field) + ".json"))


def read(rt, name: str) -> dict[str, dict]:
    if rt.settings.redis_url:
        raw = rt.cache.hgetall(name)
    else:
        folder = _folder(rt, name)
        raw = {p.stem: p.read_text() for p in folder.glob("*.json")} if folder.is_dir() else {}
    found = {}
    for field, text in raw.items():
        try:
            found[field] = json.loads(text)
        except ValueError:
            continue
    return found


def drop(rt, name: str, fields: list[str]) -> None:
    if not fields:
        return
    if rt.settings.redis_url:
        rt.cache.hdel(name, *fields)
        return
    for field in fields:
        (_folder(rt, name) / (_SAFE.sub("_", field) + ".json")).unlink(missing_ok=True)


def _folder(rt, name: str) -> Path:
    return Path(rt.settings.cs_data_dir) / "ops" / name.split(":", 1)[1]
