"""The import graph of cs_daemon, webapp and cs_cli: no cycle between modules, counting
imports at the top, inside functions and under TYPE_CHECKING; and no import inside a
function without a comment (on its line or the one before) saying why it is there
(an optional dependency, start-up cost)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cs_daemon", "webapp", "cs_cli")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for top in PACKAGES for p in sorted((ROOT / top).rglob("*.py"))}


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, path: Path, node: ast.AST, known: dict[str, Path]) -> set[str]:
    """The project modules an import statement loads (a package's `__init__` included)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = _absolute(module, path, node)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                 for alias in node.names]
    found = set()
    for name in names:
        while name and name not in known:        # `import a.b.c` of a symbol: its module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def _function_imports(tree: ast.AST) -> list[ast.stmt]:
    """Import statements inside a function body (at any depth), each once."""
    found = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found[node.lineno] = node
    return [found[n] for n in sorted(found)]


def _graph() -> dict[str, set[str]]:
    known = _modules()
    graph = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(module, path, node, known)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each with one
    cycle through it to print."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    import sys  # the graph is deep enough to pass the default limit
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    members, start = set(component), component[0]
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & members):
            if w == start:
                return path + [start]
            if w not in seen:
                seen.add(w)
                paths.append(path + [w])
    return component


def test_no_import_cycle_between_modules():
    graph = _graph()
    cycles = _cycles(graph)
    report = [f"{len(c)} modules: {', '.join(c)}\n  e.g. {' -> '.join(_one_cycle(graph, c))}"
              for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(report)


def _explained(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or on the line before it or before the run of
    imports it belongs to."""
    if "#" in lines[lineno - 1]:
        return True
    n = lineno - 1
    while n > 0 and lines[n - 1].strip().startswith(("from ", "import ")):
        n -= 1
    return n > 0 and lines[n - 1].strip().startswith("#")


def test_every_import_inside_a_function_says_why():
    unexplained = []
    for module, path in _modules().items():
        lines = path.read_text().splitlines()
        for node in _function_imports(ast.parse("\n".join(lines), str(path))):
            if not _explained(lines, node.lineno):
                unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not unexplained, ("an import inside a function needs a comment saying why "
                             "(optional dependency, start-up cost):\n" + "\n".join(unexplained))
