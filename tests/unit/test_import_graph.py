"""k3ops's packages import one another in one direction only: no two of them, directly or through others,
import each other (a circle makes a reader hold both at once and breaks imports in some orders); and none
imports the lab (k3ops_lab, a distribution of its own above production, which an installed k3ops lacks).
Read from the source itself."""

from __future__ import annotations

import ast
from collections import defaultdict

from ..conftest import REPO_ROOT

SOURCE = REPO_ROOT / "src" / "k3ops"


def package_of(parts: tuple[str, ...]) -> str:
    """k3ops.deploys.serving -> deploys; k3ops.escape -> escape."""
    return parts[1] if len(parts) > 1 else parts[0]


def imports() -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """Module -> the modules it imports (absolute names, relative imports resolved)."""
    found: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
    for path in SOURCE.rglob("*.py"):
        module = ("k3ops", *path.relative_to(SOURCE).with_suffix("").parts)
        package = module[:-1]  # what a relative import is relative to
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else ()
                names = [(*base, *node.module.split("."))] if node.module else [(*base, alias.name)
                                                                               for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [tuple(alias.name.split(".")) for alias in node.names]
            else:
                continue
            found[module].update(names)
    return found


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, names in imports().items():
        here = package_of(module)
        for name in names:
            if name[:1] == ("k3ops",) and len(name) > 1 and package_of(name) != here:
                graph[here].add(package_of(name))
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_reader_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_reader_finds_the_imports_it_must():
    graph = import_graph()
    assert {"settings", "facts", "operations"} <= graph["deploys"] and "settings" in graph["inventory"]


def test_no_packages_import_each_other():
    assert circles(import_graph()) == []


def test_production_never_imports_the_lab():
    found = imports()
    assert ("k3ops", "cli", "__init__") in found and not any(module[:2] == ("k3ops", "lab") for module in found)
    lab = {".".join(module): [".".join(name) for name in names if name[0] == "k3ops_lab" or name[:2] == ("k3ops", "lab")]
           for module, names in found.items()}
    assert {module: names for module, names in lab.items() if names} == {}
