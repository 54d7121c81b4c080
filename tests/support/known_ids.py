"""Ids a service answered, kept so that generated requests (tests/api/test_fuzz.py) can
name things that exist as well as things that do not."""

from __future__ import annotations


class Known:
    """Ids the service answered so far (in 2xx bodies), by the name a path or a body field
    gives them, so generated requests can name things that exist as well as things that
    do not. An `id` is named after the object holding it (`{"playbook": {"id": …}}` or
    `{"deliveries": [{"id": …}]}` give playbook_id, delivery_id) and after the path
    parameter of the answering collection (POST /api/external/action-types: type_id)."""

    def __init__(self, item_params: dict[str, str]):
        self.item_params = item_params
        self.ids: dict[str, list[str]] = {}

    def harvest(self, path: str, body) -> None:
        top = self.item_params.get(path)
        self._walk(body, (top,), top)

    def _walk(self, node, names: tuple, top: str | None) -> None:
        if isinstance(node, list):
            for item in node:
                self._walk(item, names, top)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "id" or (key.endswith("_id") and isinstance(value, str)):
                    for name in names if key == "id" else (key,):
                        self._add(name, value)
                else:
                    self._walk(value, (_singular(key) + "_id", top) if top else (_singular(key) + "_id",), None)

    def _add(self, name: str | None, value) -> None:
        if name and isinstance(value, str) and value and value not in self.ids.setdefault(name, []):
            self.ids[name].append(value)

    def choose(self, case, pick: int) -> None:
        """Replace some path parameters and top-level body fields by known ids (which,
        and which id, follow `pick`, so a run is the same every time)."""
        fields = [(case.path_parameters, name) for name in sorted(case.path_parameters or {})]
        if isinstance(case.body, dict):
            fields += [(case.body, name) for name in sorted(case.body) if name in self.ids]
        for i, (where, name) in enumerate(fields):
            known = self.ids.get(name)
            if known and (pick >> 2 * i) & 3:      # three times in four
                where[name] = known[(pick >> 12) % len(known)]


def _singular(word: str) -> str:
    return word[:-3] + "y" if word.endswith("ies") else word.removesuffix("s")


def item_params(document: dict) -> dict[str, str]:
    """Each collection path and the parameter naming one of its items: /api/playbooks →
    playbook_id (from /api/playbooks/{playbook_id})."""
    found = {}
    for path in document["paths"]:
        head, _, last = path.rpartition("/")
        if last.startswith("{") and last.endswith("}") and "{" not in head:
            found[head] = last[1:-1]
    return found
