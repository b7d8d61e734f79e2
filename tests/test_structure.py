"""The house: the import graph of ``pipeline/`` and ``schemas/`` has no circle, not even one made of imports that run
only for type checking or inside a function (what the kernel, ``pipeline/kernel/stage.py``, is there to keep)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "schemas")


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_of(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports anywhere in it: ``from a.b import c`` is ``a.b.c`` when that is a
    module, else ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            named = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= (named & set(modules)) or {node.module}
            found |= {node.module} if named - set(modules) else set()
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle():
    assert cycles(import_graph()) == []


def test_a_cycle_is_found():
    """The check itself: a made-up graph with a circle through three modules is caught."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_kernel_names_no_stage_and_no_stage_imports_the_list():
    graph = import_graph()
    stage_modules = {name for name in graph if name.startswith("pipeline.stages.")}
    for kernel in ("pipeline.kernel.stage", "pipeline.kernel.calls"):
        assert not graph[kernel] & (stage_modules | {"pipeline.stages"}), kernel
    for module in stage_modules:
        assert "pipeline.stages" not in graph[module], module


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
SIZED = ("pipeline", "schemas", "bench")  # everything outside the tests


def _sources() -> list[Path]:
    return [path for folder in SIZED for path in sorted((ROOT / folder).rglob("*.py"))]


def test_no_module_is_over_600_lines():
    long = {str(path.relative_to(ROOT)): n for path in _sources()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_60_lines():
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}
