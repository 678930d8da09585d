"""The house rules of ``firefly_orm/``, read from its source (CONTRIBUTING.md, "Layout rules").

Each rule is one test, so a failure names the rule it breaks:

1. **Floors.** Every package module sits on one floor; an import (at module level,
   under ``TYPE_CHECKING`` or inside a function) may point to its own floor or
   below, never up.  A store never imports a layer.
2. **No cycles** between modules, counting every import.
3. **Every capability declared**: no ``getattr``/``hasattr`` probing for an optional
   method of a store, repository or unit of work.
4. **Three bridges**: only ``firefly_orm/bridges/`` hops between sync and async code.
5. **Size**: at most 700 lines a module, at most 18 modules at the top level.
6. **Public modules**: a module whose path has no ``_name`` part is public, and the
   public modules are exactly those in ``docs/index.md``'s table.

The import graph is built with :mod:`ast`, as import-linter would, without
importing anything.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "firefly_orm"
DOCS_INDEX = ROOT / "docs" / "index.md"

#: The floors, lowest first: the first part of a module's path below ``firefly_orm``.
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    ("core", frozenset({"errors", "envnames", "tokens", "layout", "entry", "search", "vector"})),
    ("contracts", frozenset({"protocols"})),
    # uow picks a bridge (a sync unit of work's async face) and the step driver
    # runs layers' work in units of work: one floor, no cycle between them.
    ("bridges", frozenset({"bridges", "uow"})),
    # privacy wraps any store (and reads the SQL table to rotate keys): a store itself.
    (
        "stores",
        frozenset({"store", "file_store", "sql", "mongo", "redis", "migrate", "privacy"}),
    ),
    (
        "layers",
        frozenset(
            {
                "conversation",
                "working",
                "long_term",
                "artifacts",
                "summarization",
                "maintenance",
                "knowledge",
            }
        ),
    ),
    # config builds stores and layers from settings, and manager.from_config is public API.
    (
        "facade",
        frozenset(
            {"manager", "manager_conversations", "assemble", "pydantic_ai", "config", "unified"}
        ),
    ),
    (
        "apps",
        frozenset(
            {
                "cli",
                "interop",
                "upstream_import",
                "compat",
                "demo",
                "testing",
                "integrations",
                "mcp",
            }
        ),
    ),
)
MAX_LINES = 700
MAX_TOP_LEVEL = 18
#: Calls that hop between sync and async code (rule 4).
BRIDGE_CALLS = re.compile(
    r"\basyncio\.to_thread\b|\brun_coroutine_threadsafe\b|\basyncio\.run\("
    r"|\bget_running_loop\b|\brun_in_executor\b"
)
#: ``getattr(store, "name", ...)`` / ``hasattr(uow.entries, "name")``: a literal name
#: looked up on a store, a unit of work or a repository (rule 3).
PROBE = re.compile(
    r"\b(?:getattr|hasattr)\(\s*(?:[\w.]*\.)?_?(?:store|stores|uow|entries|repository|repo)"
    r"\s*,\s*[\"'](\w+)[\"']"
)


@dataclass(frozen=True)
class Import:
    """One import of a package module by another."""

    source: str
    target: str
    line: int
    inside_function: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imports_of(name: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    nested = {id(n) for f in functions for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules()]
            targets = subs + ([module] if len(subs) < len(node.names) else [])
        else:
            continue
        for target in targets:
            if not target.startswith("firefly_orm"):
                continue
            resolved = _resolve(target)
            if resolved is not None and resolved != name:
                yield Import(name, resolved, node.lineno, id(node) in nested)


@cache
def imports() -> tuple[Import, ...]:
    """Every import between package modules (module level, type-only and in functions)."""
    return tuple(i for name, path in modules().items() for i in _imports_of(name, path))


def floor_of(module: str) -> int | None:
    """The floor of ``module`` (``None``: the package itself, above every floor)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    for level, (_, members) in enumerate(FLOORS):
        if parts[1].lstrip("_") in members:
            return level
    raise AssertionError(
        f"{module}: on no floor; add {parts[1]!r} to FLOORS in tests/unit/test_architecture.py "
        "and to CONTRIBUTING.md's layout rules"
    )


def _where(imp: Import) -> str:
    path = modules()[imp.source].relative_to(ROOT)
    inside = " (inside a function)" if imp.inside_function else ""
    return f"{path}:{imp.line}: {imp.source} imports {imp.target}{inside}"


def upward_imports() -> list[str]:
    """Imports that point to a higher floor."""
    found = []
    for imp in imports():
        source, target = floor_of(imp.source), floor_of(imp.target)
        if source is not None and target is not None and target > source:
            found.append(f"{_where(imp)}: {FLOORS[source][0]} -> {FLOORS[target][0]}")
    return found


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for imp in imports():
        graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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


def _code_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` with comments and docstrings blanked (code only)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node.end_lineno is not None
        ):
            for number in range(node.lineno - 1, node.end_lineno):
                lines[number] = ""
    for number, line in enumerate(lines, start=1):
        yield number, line.split("#", 1)[0]


def probing_sites() -> list[str]:
    """``getattr``/``hasattr`` of a literal name on a store, unit of work or repository."""
    found = []
    for path in modules().values():
        for number, line in _code_lines(path):
            for match in PROBE.finditer(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: probes {match.group(1)!r}")
    return found


def bridge_calls_outside_bridges() -> list[str]:
    """Sync/async hops written outside ``firefly_orm/bridges/``."""
    found = []
    for name, path in modules().items():
        if name.startswith("firefly_orm.bridges"):
            continue
        for number, line in _code_lines(path):
            if BRIDGE_CALLS.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def documented_public_modules() -> set[str]:
    """The modules of ``docs/index.md``'s table of public modules."""
    table = DOCS_INDEX.read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(firefly_orm[\w.]*)` \|", table, re.M))


#: Public by their own rule, not the reference's: compat.firefly keeps the module
#: paths of the Firefly framework's memory module (a drop-in), and the demo is run
#: as ``python -m firefly_orm.demo`` (``make demo``), not imported.  The other
#: compat modules (flybrowser, definable) are in the reference.
NOT_IN_THE_REFERENCE = ("firefly_orm.compat.firefly", "firefly_orm.demo")


def public_modules() -> set[str]:
    """Modules with no ``_name`` part in their path, but the packages of public modules."""
    documented = documented_public_modules()
    return {
        name
        for name in modules()
        if not any(part.startswith("_") for part in name.split(".")[1:])
        and not name.startswith(NOT_IN_THE_REFERENCE)
        and (name in documented or not any(d.startswith(name + ".") for d in documented))
    }


# --------------------------------------------------------------------------- the rules


def test_every_module_is_on_a_floor() -> None:
    for name in modules():
        floor_of(name)  # raises for a module on no floor


def test_no_import_points_up() -> None:
    found = upward_imports()
    assert not found, "imports that point up a floor:\n" + "\n".join(found)


def test_no_import_cycles() -> None:
    found = cycles()
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_capabilities_are_declared_not_probed() -> None:
    found = probing_sites()
    assert not found, "probing instead of a declared capability:\n" + "\n".join(found)


def test_only_the_bridges_hop_between_sync_and_async() -> None:
    found = bridge_calls_outside_bridges()
    assert not found, "sync/async hops outside firefly_orm/bridges/:\n" + "\n".join(found)


def test_modules_are_at_most_700_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for path in modules().values()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them along their seams): {long}"


def test_at_most_18_top_level_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} top-level modules: {top}"


def test_public_modules_are_the_documented_ones() -> None:
    public, documented = public_modules(), documented_public_modules()
    assert public - documented == set(), (
        "public by name but not in docs/index.md (document it, or name it _internal): "
        f"{sorted(public - documented)}"
    )
    assert documented - public == set(), f"documented but internal: {sorted(documented - public)}"


# --------------------------------------------------------------------------- the checks check


@pytest.mark.parametrize(
    ("source", "target", "inside", "broken"),
    [
        ("sql/_bad.py", "from firefly_orm.conversation import ConversationMemory\n", False, True),
        ("sql/_bad.py", "def f() -> None:\n    from firefly_orm import manager\n", True, True),
        ("conversation/_bad.py", "from firefly_orm.sql import SQLiteStore\n", False, False),
    ],
)
def test_the_floor_rule_sees_an_upward_import(
    tmp_path: Path, source: str, target: str, inside: bool, broken: bool
) -> None:
    """A made-up module importing up (at module level or in a function) is found."""
    path = PACKAGE / source
    found = list(_imports_of(_module_name(path), _write(tmp_path, target)))
    assert found and found[0].inside_function is inside
    source_floor = floor_of(_module_name(path))
    target_floor = floor_of(found[0].target)
    assert source_floor is not None and target_floor is not None
    assert (target_floor > source_floor) is broken


def test_the_probe_and_bridge_patterns_match() -> None:
    assert PROBE.search('fast = getattr(store, "append_turn", None)')
    assert PROBE.search("hasattr(uow.entries, 'delete_key')")
    assert PROBE.search('getattr(self._store, "locks_rows", False)')
    assert not PROBE.search("getattr(store, name)")
    assert not PROBE.search('getattr(exc, "sqlstate", None)')
    assert BRIDGE_CALLS.search("await asyncio.to_thread(fn)")
    assert BRIDGE_CALLS.search("loop = asyncio.get_running_loop()")
    assert not BRIDGE_CALLS.search("await store.async_load(ns)")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "module.py"
    path.write_text(text, encoding="utf-8")
    return path
