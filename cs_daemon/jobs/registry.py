"""The modules that declare actors. Imported by every process that sends or runs jobs."""

import importlib

ACTOR_MODULES: list[str] = []


def load_actors() -> None:
    for name in ACTOR_MODULES:
        importlib.import_module(name)
