"""The layout rules of DESIGN.md ("Layout"), read from the source with ``ast``.

No module imports a private name (``_x``) of another package, and no two modules import
each other, directly or round a circle, at run time, inside a function or under
``TYPE_CHECKING`` alike: each is a place where a bridge, the CLI or a store would depend
on what its owner may change at will, or where no reader can tell which part needs which.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import agent_adapter

ROOT = Path(agent_adapter.__file__).parent
TOP = ROOT.name


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def package_of(module: str) -> str:
    """The package a module belongs to: ``agent_adapter.engine``, one bridge
    (``agent_adapter.bridges.mcp``), or a top-level module such as ``agent_adapter.demo``."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "bridges" and not parts[2].startswith("_"):
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _private(dotted: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:])


def imports(module: str) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, imported module, names)`` for every import of the package in ``module``,
    wherever it stands (top level, a function, ``if TYPE_CHECKING:``)."""
    path = MODULES[module]
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == TOP or target.startswith(TOP + "."):
                yield node.lineno, target, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == TOP or alias.name.startswith(TOP + "."):
                    yield node.lineno, alias.name, []


def edges(module: str) -> set[str]:
    """The package's modules that ``module`` imports (a submodule named in a ``from``
    counts as that submodule, not as its package's ``__init__``)."""
    found: set[str] = set()
    for _line, target, names in imports(module):
        submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
        found.update(submodules)
        if target in MODULES and len(submodules) < max(len(names), 1):
            found.add(target)
    found.discard(module)
    return found


def private_imports() -> list[str]:
    """Every import of another package's private module or name, as ``module:line target``."""
    bad = []
    for module in MODULES:
        own = package_of(module)
        for line, target, names in imports(module):
            for dotted in [target, *(f"{target}.{n}" for n in names)]:
                if package_of(dotted) != own and _private(dotted):
                    bad.append(f"{module}:{line} imports {dotted}")
                    break
    return bad


def cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted;
    ``graph`` defaults to the package's import graph."""
    if graph is None:
        graph = {m: edges(m) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                groups.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return sorted(groups)


def test_no_module_imports_a_private_name_of_another_package() -> None:
    """Bridges, the CLI, hooks, the kit and the demo use only the public names of the
    engine and the ledger (the bridge contract), and the engine only the ledger's."""
    assert private_imports() == []


def test_no_import_cycles() -> None:
    """No module imports itself round a circle, at run time or under TYPE_CHECKING."""
    assert cycles() == []


def test_imports_point_one_way() -> None:
    """ledger -> errors only; engine -> ledger, never a bridge, the CLI or the kit;
    bridges never the CLI; the demo never the CLI (the CLI imports the demo)."""
    forbidden = {
        "agent_adapter.ledger": ("engine", "hooks", "bridges", "cli", "testing", "demo"),
        "agent_adapter.engine": ("hooks", "bridges", "cli", "testing", "demo", "integrations"),
        "agent_adapter.hooks": ("bridges", "cli", "testing", "demo"),
        "agent_adapter.demo": ("cli",),
    }
    wrong = []
    for module in MODULES:
        for package, names in forbidden.items():
            if package_of(module) != package:
                continue
            for line, target, _names in imports(module):
                if target.split(".")[1:2] and target.split(".")[1] in names:
                    wrong.append(f"{module}:{line} imports {target}")
    for module in MODULES:
        if package_of(module).startswith("agent_adapter.bridges."):
            wrong += [
                f"{module}:{line} imports {target}"
                for line, target, _ in imports(module)
                if target.split(".")[1:2] == ["cli"]
            ]
    assert wrong == []


def test_the_checks_see_what_they_look_for() -> None:
    """The walk finds imports where they stand (function-local, TYPE_CHECKING), and the
    cycle search finds a circle: the checks above could not pass by seeing nothing."""
    assert "agent_adapter.engine" in edges("agent_adapter.bridges.mcp._server")
    # cmd_demo imports the demo inside a function: it counts.
    assert "agent_adapter.demo" in edges("agent_adapter.cli._main")
    assert package_of("agent_adapter.bridges.mcp._server") == "agent_adapter.bridges.mcp"
    assert _private("agent_adapter.engine._run") and not _private("agent_adapter.engine")
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(circle) == [["a", "b", "c"]]


def test_the_architecture_page_names_what_exists() -> None:
    """docs/architecture.md traces a call file by file: every file it names exists, and a
    name written right after a file (`engine/_outcome.py` `write`) is defined in it."""
    import re

    page = (ROOT.parent / "docs" / "architecture.md").read_text()
    named = re.findall(
        r"`((?:engine|ledger|bridges|hooks|testing|cli)/[\w/]+\.py)`(?: `([\w.]+)`)?", page
    )
    missing = []
    for path, name in named:
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
            continue
        if name:
            tree = ast.parse(source.read_text())
            defined = {
                n.name
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            }
            if name.split(".")[-1] not in defined:
                missing.append(f"{path} {name}")
    assert (len(named) > 20, missing) == (True, [])
