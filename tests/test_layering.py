"""The house's import rules, read from the source with ``ast`` (no third-party tool).

Imports point one way, down: ground <- engines <- policies, scorers <- search <- api <- arith <-
the benchmark rooms <- prm, planner, conformance, serve, viewer, export, distill <- cli. The
benchmark rooms stack too: grading <- datasets <- sweeps, prm_eval (siblings) <- analysis <- the
``benchmarks`` package itself (its public API). Policies and scorers are siblings (neither
imports the other; what both need lives in ``engines``), so are the rooms of the top floor (the
checks for new parts, ``conformance``, are imported only by the command line). Strategies import
only the search core and the ground floor; the search core sees backends only through their
protocol modules. Every import counts, the lazy ones inside functions too: a lazy import still
points somewhere, and so does a registry's lazy ``"prmsearch.module:attr"`` target. Parts above the
backends (the embedded domain, the planner) register through the ``prmsearch.plugins`` entry point
instead, which points at nothing from inside the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
#: a lazy registry target, "prmsearch.module.path:attribute"
LAZY_TARGET = re.compile(r"^prmsearch(\.\w+)+:\w+$")
PACKAGE = SRC / "prmsearch"

#: Floor of each area; an area may import its own floor and those below, except the siblings
#: named in SIBLINGS, which share a floor but may not import each other. An area is a module's
#: longest dotted prefix listed here (``benchmarks.sweeps`` before ``benchmarks``).
FLOORS = {
    "ground": 0,
    "engines": 1,
    "policies": 2,
    "scorers": 2,
    "search": 3,
    "api": 4,
    "arith": 5,
    "benchmarks.grading": 6,
    "benchmarks.datasets": 7,
    "benchmarks.sweeps": 8,
    "benchmarks.prm_eval": 8,
    "benchmarks.analysis": 9,
    "benchmarks": 10,
    "prm": 11,
    "planner": 11,
    "conformance": 11,
    "serve": 11,
    "viewer": 11,
    "export": 11,
    "distill": 11,
    "cli": 12,
}
TOP_ROOMS = ("prm", "planner", "conformance", "serve", "viewer", "export", "distill")
SIBLINGS = {
    frozenset({"policies", "scorers"}),
    frozenset({"benchmarks.sweeps", "benchmarks.prm_eval"}),
    *(frozenset({a, b}) for a in TOP_ROOMS for b in TOP_ROOMS if a < b),
}
GROUND = {"tree", "tree_graph", "answers", "registry", "seeding", "costs", "steps", "backend_errors",
          "backend_hooks", "fixes", "text_lines"}
#: Backend protocol modules, the only parts of policies/scorers that the search core may import.
PROTOCOLS = {"prmsearch.policies.base", "prmsearch.scorers.base"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def area(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "api"  # the package's __init__: the public API
    head = parts[1]
    if head in GROUND:
        return "ground"
    if head in ("api", "__main__"):
        return "api" if head == "api" else "cli"
    for depth in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[1 : depth + 1])
        if name in FLOORS:
            return name
    raise AssertionError(
        f"{module}: not in any area of the house; add it to an area or to FLOORS in {__file__}"
    )


def imported_modules(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """prmsearch modules that ``module`` imports (resolved to files), with line numbers."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # ``from a import b`` imports the submodule a.b when there is one.
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY_TARGET.match(node.value):
            targets = [node.value.partition(":")[0]]  # a registry's lazy "module:attr" still points
        else:
            continue
        for target in dict.fromkeys(targets):
            if target == "prmsearch" or target.startswith("prmsearch."):
                while target not in known and "." in target:
                    target = target.rpartition(".")[0]
                if target != module:
                    found.append((target, node.lineno))
    return found


def import_graph() -> dict[str, list[tuple[str, int]]]:
    modules = all_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def allowed(importer: str, imported: str) -> str | None:
    """None when the import is allowed, else why not."""
    a, b = area(importer), area(imported)
    if a == b:
        return None
    if frozenset({a, b}) in SIBLINGS:
        return f"{a} and {b} are siblings and may not import each other (shared code goes down a floor)"
    if FLOORS[b] > FLOORS[a]:
        return f"{a} (floor {FLOORS[a]}) may not import {b} (floor {FLOORS[b]}): imports point down"
    if a == "search" and b in ("policies", "scorers") and imported not in PROTOCOLS:
        return "the search core sees backends only through policies.base and scorers.base"
    if a == "search" and b == "engines":
        return "the search core imports no model plumbing"
    return None


def test_every_module_is_in_an_area():
    for module in all_modules():
        area(module)


def test_imports_point_down():
    problems = [
        f"{all_modules()[importer].relative_to(SRC)}:{line}: imports {imported}: {why}"
        for importer, targets in import_graph().items()
        for imported, line in targets
        if (why := allowed(importer, imported))
    ]
    assert not problems, "upward or sideways imports:\n" + "\n".join(problems)


def test_strategies_import_only_the_search_core():
    for importer, targets in import_graph().items():
        if not importer.startswith("prmsearch.search.strategies"):
            continue
        for imported, line in targets:
            assert area(imported) in ("ground", "search"), (
                f"{importer}:{line} imports {imported}; strategies stay pure (no backend, no I/O)"
            )


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative; only those with a circle are returned."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return circles


def test_no_import_circles():
    graph = {m: sorted({t for t, _ in targets}) for m, targets in import_graph().items()}
    circles = strongly_connected(graph)
    assert not circles, "modules that import each other in a circle: " + "; ".join(map(str, circles))


def test_checks_catch_what_they_should():
    """The rules are not vacuous: an upward import and a circle are both reported."""
    assert allowed("prmsearch.policies.hf", "prmsearch.search.driver")
    assert allowed("prmsearch.scorers.hf", "prmsearch.policies.hf")
    assert allowed("prmsearch.search.driver", "prmsearch.policies.hf")
    assert allowed("prmsearch.serve.app", "prmsearch.cli")
    assert allowed("prmsearch.prm.labelling", "prmsearch.conformance")
    assert allowed("prmsearch.benchmarks.sweeps.sweep", "prmsearch.conformance")
    assert allowed("prmsearch.conformance", "prmsearch.benchmarks.datasets") is None
    assert allowed("prmsearch.cli", "prmsearch.conformance") is None
    assert allowed("prmsearch.cli", "prmsearch.benchmarks.sweeps.sweep") is None
    assert allowed("prmsearch.benchmarks.grading.grader", "prmsearch.benchmarks.datasets")
    assert allowed("prmsearch.benchmarks.sweeps.recipes", "prmsearch.planner.fit")
    assert allowed("prmsearch.benchmarks.sweeps.sweep", "prmsearch.benchmarks.prm_eval.processbench")
    assert allowed("prmsearch.planner.fit", "prmsearch.benchmarks.sweeps.results") is None
    assert allowed("prmsearch.prm.labelling", "prmsearch.cli.prm_kit")
    assert allowed("prmsearch.cli.prm_kit", "prmsearch.prm.labelling") is None
    assert area("prmsearch.benchmarks") == "benchmarks"
    assert area("prmsearch.benchmarks.sweeps.sweep") == "benchmarks.sweeps"
    assert strongly_connected({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert strongly_connected({"a": ["b"], "b": []}) == []


def test_registry_strings_count_as_imports():
    """A lazy "module:attr" target is read as an import of that module (so an upward registry
    string, like the policies package naming the embedded domain, is caught)."""
    graph = import_graph()
    assert any(target == "prmsearch.policies.hf" for target, _ in graph["prmsearch.policies"])
    assert any(target == "prmsearch.arith.defaults" for target, _ in graph["prmsearch.arith.plugin"])
    assert allowed("prmsearch.policies", "prmsearch.arith.defaults")  # what the rule now forbids


def test_entry_points_name_plugin_modules_that_exist():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    plugins = project.get("entry-points", {}).get("prmsearch.plugins", {})
    assert plugins, "the embedded domain registers through the prmsearch.plugins entry point"
    modules = all_modules()
    for name, target in plugins.items():
        assert target in modules, f"entry point {name} = {target!r}: no such module"


@pytest.mark.parametrize("module", ["prmsearch.api", "prmsearch.search.driver", "prmsearch.scorers.hf"])
def test_graph_reads_real_imports(module):
    """The reader sees the imports that are there (guards against a graph that is always empty)."""
    assert import_graph()[module], f"no imports read for {module}"


#: Lines a module may have before its docstring must say why it is one module.
LONG_MODULE = 500


def test_a_module_over_500_lines_says_why_in_its_docstring():
    unexplained = []
    for path in all_modules().values():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= LONG_MODULE:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if f"Why one module over {LONG_MODULE} lines:" not in doc:
            unexplained.append(f"{path.relative_to(SRC)} ({text.count(chr(10))} lines)")
    assert not unexplained, ("split these, or say in the docstring 'Why one module over 500 lines: ...': "
                             + ", ".join(unexplained))


#: The lab beside the package: what made our figures and the embedded models. The wheel holds
#: none of it, so the package may never import it.
LAB_FOLDERS = ("benchmarks", "training")


def lab_imports(path: Path) -> list[tuple[str, int]]:
    """Absolute imports of a lab folder's modules in one file, with line numbers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [(name, node.lineno) for name in names if name.split(".")[0] in LAB_FOLDERS]
    return found


def test_the_package_never_imports_the_lab():
    problems = [f"{path.relative_to(ROOT)}:{line}: imports {name}, which the wheel does not hold"
                for path in all_modules().values() for name, line in lab_imports(path)]
    assert not problems, "\n".join(problems)
    lab = [p for folder in LAB_FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    assert lab and any(lab_imports(p) for p in lab)  # the rule reads real imports
