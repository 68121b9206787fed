"""The dependency direction orchestration -> assets -> broker_core is never reversed, and no module
imports itself back through others."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "assets"
PACKAGES = ("broker_core", "assets", "orchestration")


def test_assets_import_nothing_from_orchestration():
    """No assets module imports the orchestration package (at module level or inside a function)."""
    pattern = re.compile(r"^\s*(import|from)\s+orchestration\b", re.M)
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted(ROOT.rglob("*.py")) if pattern.search(p.read_text())]
    assert offenders == []


def _modules() -> dict[str, Path]:
    """Every module of our packages by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Which of our modules each module imports, wherever the import stands (a function too).

    ``from a.b import c`` counts as importing ``a.b.c`` when that is a module, else ``a.b``.
    """

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(ours(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets.update(ours(f"{base}.{alias.name}") for alias in node.names)
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_circles():
    """No module of broker_core, assets or orchestration imports itself back through other modules,
    counting the imports inside functions (a late import hides a circle, it does not break it)."""
    graph = _import_graph(_modules())
    circles = [", ".join(group) for group in _circles(graph)]
    assert circles == [], "import circles:\n" + "\n".join(circles)


def test_the_circle_finder_sees_a_circle():
    """The circle finder reports two modules that import each other and nothing else."""
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set()}
    assert _circles(graph) == [["a", "b"]]
