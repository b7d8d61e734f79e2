"""The house: the import graph of ``pipeline/`` and ``schemas/`` has no circle, not even one made of imports that run
only for type checking or inside a function; no room imports a room that imports it back; the kernel
(``pipeline/kernel/``) imports nothing of badpoints but itself; and ARCHITECTURE.md's claims of which modules name
a stage hold."""

from __future__ import annotations

import ast
import re
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


def test_the_kernel_imports_nothing_of_badpoints_but_itself():
    graph = import_graph()
    kernel = {name for name in graph if name == "pipeline.kernel" or name.startswith("pipeline.kernel.")}
    assert len(kernel) > 5
    assert {module: graph[module] - kernel for module in kernel if graph[module] - kernel} == {}


def test_no_stage_imports_the_list():
    graph = import_graph()
    for module in (name for name in graph if name.startswith("pipeline.stages.")):
        assert "pipeline.stages" not in graph[module], module


def room_of(module: str) -> str:
    """A module's room: its package under ``pipeline/`` (``pipeline.engines``), itself at the top of ``pipeline/``
    (``pipeline.flow``), or ``schemas``."""
    parts = module.split(".")
    return "schemas" if parts[0] == "schemas" else ".".join(parts[:2])


def test_no_room_imports_a_room_that_imports_it_back():
    """The rooms (``pipeline/``'s packages and top-level modules, and ``schemas``) stand on floors: no import runs
    from a lower room to a higher one, which a circle of rooms would need."""
    graph = import_graph()
    rooms: dict[str, set[str]] = {}
    for module, imported in graph.items():
        rooms.setdefault(room_of(module), set()).update(room_of(name) for name in imported)
    assert cycles({room: imported - {room} for room, imported in rooms.items()}) == []


MAX_TOP_MODULES = 12


def test_the_top_of_pipeline_holds_the_flow_the_cli_and_few_more():
    top = sorted(path.name for path in (ROOT / "pipeline").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    assert {"__init__.py", "cli.py", "flow.py"} <= set(top)


# ARCHITECTURE.md's claims, each a line "- <what>: <modules>" under the heading "What names a stage"
CLAIMED = re.compile(r"^- (?P<what>[^:]+): (?P<modules>.+)$", flags=re.M)


def _claimed() -> dict[str, set[str]]:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## What names a stage", 1)[1].split("\n## ", 1)[0]
    return {match["what"]: set() if match["modules"].strip() == "none" else
            {name.strip(" `") for name in match["modules"].split(",")} for match in CLAIMED.finditer(section)}


def _as_module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def test_architecture_says_which_modules_name_a_stage_and_which_import_the_list():
    """Outside pipeline/stages/, the modules that import a stage's module, and those that import the list, are the
    ones ARCHITECTURE.md names (the kernel, the reports, the engines, builds and the CLI among the rest name none)."""
    graph = import_graph()
    stage_modules = {name for name in graph if name.startswith("pipeline.stages.")}
    outside = {name for name in graph if not name.startswith("pipeline.stages")}
    naming = {name for name in outside if graph[name] & stage_modules}
    listing = {name for name in outside if "pipeline.stages" in graph[name]}
    claims = _claimed()
    assert {_as_module(path) for path in claims["modules outside pipeline/stages/ that import a stage"]} == naming
    assert {_as_module(path) for path in claims["modules that import the list"]} == listing


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
