"""The import graph of every module of the package (traceinsight/, and collectors/ and dashboards/ as the wheel ships
them, traceinsight.collectors and traceinsight.dashboards), read from the source with `ast`: every import statement,
at module level or inside a function (a deferred import is a circle all the same).

- No circle: no module reaches itself through the modules it imports (imports under `if TYPE_CHECKING:` do not run
  and are left out).
- Stages import only leftward (docs/DESIGN.md): ingest -> labels -> model -> diagnose -> report; the CLI, the
  dashboards, the fleet, the collectors, the pipeline and the Python API on top. The modules of no stage
  (errors, units, components, queries, tuning) sit below them all. Imports for type checking count here.

One edge is left out of both: the package's root (`import traceinsight`, which the stages read `__version__`
from) forwards `traceinsight.open` and `traceinsight.Analysis` to traceinsight.api on first access (PEP 562), a
facade over the top of the stack that runs only when a user asks for the API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"traceinsight": "traceinsight", "collectors": "traceinsight.collectors",
           "dashboards": "traceinsight.dashboards"}
# Import names the source tree also uses for the folders mapped into the package (tests and `python -m collectors`).
ALIASES = {"collectors": "traceinsight.collectors", "dashboards": "traceinsight.dashboards"}
STAGES = ("ingest", "labels", "model", "diagnose", "report")
TOP = frozenset({"cli", "fleet", "collectors", "dashboards", "pipeline", "api", "__main__"})
TOP_RANK = len(STAGES) + 1


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return inside


def _target(name: str) -> str | None:
    """The module of the package that `name` names (an alias resolved), None for anything else."""
    head, _, rest = name.partition(".")
    if head in ALIASES:
        name = ALIASES[head] + ("." + rest if rest else "")
    return name if name in MODULES else None


def imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(module imported, only for type checking) for every import statement of `module`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _type_checking_nodes(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from pkg import name`, pkg itself.
            names = [f"{base}.{a.name}" if _target(f"{base}.{a.name}") else base for a in node.names]
        for name in names:
            target = _target(name)
            if target is not None and target != module:
                out.append((target, id(node) in typing_only))
    return out


# The root's forward to the Python API (see above).
FACADE = ("traceinsight", "traceinsight.api")
GRAPH = {m: [(t, typing_only) for t, typing_only in imports(m, p) if (m, t) != FACADE]
         for m, p in MODULES.items()}


def rank(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0
    if parts[1] in TOP:
        return TOP_RANK
    return STAGES.index(parts[1]) + 1 if parts[1] in STAGES else 0


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return found


def test_the_graph_is_read() -> None:
    """The walk sees the package: every stage, deferred imports, relative imports inside the collectors."""
    assert {m.split(".")[1] for m in MODULES if m.count(".")} >= {*STAGES, "cli", "collectors", "dashboards"}
    assert ("traceinsight.pipeline", False) in GRAPH["traceinsight.cli.sql"]  # a deferred import
    assert ("traceinsight.collectors.config", False) in GRAPH["traceinsight.collectors.cli"]  # a relative one


def test_the_facade_is_the_roots_only_import_of_a_later_stage() -> None:
    root = imports("traceinsight", MODULES["traceinsight"])
    assert {t for t, _ in root} == {FACADE[1]}


def test_cycles_are_found() -> None:
    """The detector itself, on a graph with one circle of three and a self-contained pair."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    runtime = {m: {t for t, typing_only in deps if not typing_only} for m, deps in GRAPH.items()}
    assert cycles(runtime) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_stages_import_only_leftward(module: str) -> None:
    wrong = sorted({t for t, _ in GRAPH[module] if rank(t) > rank(module)})
    assert wrong == [], f"{module} (stage {rank(module)}) imports a later stage: {wrong}"
