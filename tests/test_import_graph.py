"""The robustep modules import each other without circles.

The graph has an edge a -> b for every ``import`` of a robustep module b in module a, at
module level or inside a function (a lazy import is still a dependency);
``from robustep.p import name`` points to the submodule ``robustep.p.name`` when there is
one, else to the package ``robustep.p``.  The test fails on any cycle and names it.

``KNOWN_CYCLES`` lists the strongly connected groups that still exist, each as its exact
set of modules; the test also fails when one of them is gone or changes, so that the list
only shrinks.
"""

import ast
from pathlib import Path

import pytest

import robustep

ROOT = Path(robustep.__file__).resolve().parent

#: groups of modules that still import each other (lazy imports inside functions count too)
KNOWN_CYCLES: list[set[str]] = []


def _module_name(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(module, level, current, is_package):
    if level == 0:
        return module
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph():
    """{module: set of robustep modules it imports} over every module of the package."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", node.level, name, is_package)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def find_cycle(graph):
    """One cycle as a list of modules [a, b, ..., a], or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def strongly_connected_groups(graph):
    """The groups of two or more modules that reach each other (Tarjan), as sets."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"d"}}
    assert strongly_connected_groups(graph) == [{"a", "b"}]


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    # a function-level import in the sparse estimators' helpers
    assert "robustep.kernels.inducing" in graph["robustep.estimators._sparse"]
    assert "robustep.posterior.sparse" in graph["robustep.posterior._dask"]


def test_the_layers_below_the_estimators_have_no_cycles():
    graph = import_graph()
    for prefix in ("robustep.ep", "robustep.posterior", "robustep.kernels", "robustep.linalg"):
        sub = {a: {b for b in bs if b.startswith("robustep.")} for a, bs in graph.items()}
        sub = {a: bs for a, bs in sub.items() if a.startswith(prefix)}
        cycle = find_cycle(sub)
        assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycles_but_the_known_ones():
    graph = import_graph()
    known = set().union(*KNOWN_CYCLES)
    groups = strongly_connected_groups(graph)
    new = [g for g in groups if g not in KNOWN_CYCLES]
    if new:
        rest = {a: bs - known for a, bs in graph.items() if a not in known}
        cycle = find_cycle(rest) or sorted(new[0])
        pytest.fail("import cycle: " + " -> ".join(cycle))
    gone = [sorted(g) for g in KNOWN_CYCLES if g not in groups]
    assert not gone, f"no longer a cycle, remove it from KNOWN_CYCLES: {gone}"
