"""The package's import graph: no circles, and rooms that lean one way.

Read from the source (every import statement, those inside functions too,
except under ``if TYPE_CHECKING:``), so a circle hidden in a function body
counts as much as one at the top of a module. ``from pkg import name``
imports the module ``pkg.name`` when there is one, else ``pkg``.
"""

from __future__ import annotations

import ast
import pathlib

import nova_sched

PACKAGE = pathlib.Path(nova_sched.__file__).resolve().parent


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("nova_sched",) + path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _project_module(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    type_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(inner) for inner in ast.walk(node))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in MODULES else base)
    return {m for m in map(_project_module, targets) if m and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(GRAPH[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle_anywhere_in_the_package():
    assert _circles() == []


def test_the_graph_sees_imports_inside_functions():
    # host_manager loads a host source by name inside a function: the
    # graph must still see which module it reaches.
    assert "nova_sched.scheduler.cloud.sources" in GRAPH["nova_sched.scheduler.host_manager"] \
        or any(m.startswith("nova_sched.scheduler.cloud.sources")
               for m in GRAPH["nova_sched.scheduler.host_manager"])
    assert "nova_sched.scheduler.cloud.sources.nova_cells" in \
        GRAPH["nova_sched.scheduler.cloud.sources"]


def _room_imports(room: str) -> dict[str, list[str]]:
    prefix = f"nova_sched.scheduler.{room}"
    return {name: sorted(targets) for name, targets in GRAPH.items()
            if name.startswith(prefix) and targets}


def test_the_cloud_knows_nothing_of_the_wire_or_the_decision():
    # What the scheduler knows of the cloud stands below what reads it.
    offenders = {
        name: [t for t in targets
               if t.startswith(("nova_sched.scheduler.wire", "nova_sched.scheduler.decision",
                                "nova_sched.scheduler.manager", "nova_sched.scheduler.filter"))]
        for name, targets in _room_imports("cloud").items()}
    assert {n: t for n, t in offenders.items() if t} == {}


def test_the_wire_does_not_reach_into_the_decision():
    offenders = {
        name: [t for t in targets if t.startswith("nova_sched.scheduler.decision")]
        for name, targets in _room_imports("wire").items()}
    assert {n: t for n, t in offenders.items() if t} == {}


def test_placements_model_is_a_room_of_its_own():
    # The cycle uses it through one step (decision/provider_candidates);
    # the model reads requests and aggregates, never the decision, the
    # host table, the claim stores or a source.
    offenders = {
        name: [t for t in targets
               if t.startswith(("nova_sched.scheduler.decision", "nova_sched.scheduler.cloud",
                                "nova_sched.scheduler.claim_stores",
                                "nova_sched.scheduler.manager",
                                "nova_sched.scheduler.filter", "nova_sched.scheduler.host"))]
        for name, targets in _room_imports("placement_model").items()}
    assert {n: t for n, t in offenders.items() if t} == {}
