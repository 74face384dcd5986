"""No import cycles: not between first-party modules, not between the top-level packages.

Every module of the project's packages is parsed with `ast` (nothing is imported). Every import
of a first-party module counts, at module level or inside a function, except those under
`if TYPE_CHECKING:`. `from a.b import c` depends on the module `a.b.c` when that is a module,
else on `a.b`; parent packages (`__init__`) run on import too but are not counted, so a package
that re-exports its submodules is not a cycle by itself.

The packages are layered: capsem is the base; pricing may import capsem; addons may import
capsem and pricing; assembler may import addons, capsem and pricing; benchmarks may import any.

Inside addons, the two sides of the process boundary import only their own side and what they
share: `addons.proxy` (mitmdump) never imports `addons.recorder`; `addons.recorder` imports
`addons.proxy` only in `thread.py`, the in-process stand-in for the recorder process; the shared
modules (messages, spec, the parsers, budgets) import neither. Loading the addon in mitmdump loads
no writer, no builder and no protocol parser (checked in a fresh interpreter).

`capsem run`'s watcher, sampler and feed import nothing of `addons.recorder`: they send their rows
to the recorder, session.db's one writer.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("addons", "assembler", "benchmarks", "capsem", "pricing")
ALLOWED = {
    "capsem": set(),
    "pricing": {"capsem"},
    "addons": {"capsem", "pricing"},
    "assembler": {"addons", "capsem", "pricing"},
    "benchmarks": {"addons", "assembler", "capsem", "pricing"},
}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({module_path(self.source)}:{self.line})"


def module_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = module_files()


def module_path(name: str) -> str:
    return str(MODULES[name].relative_to(ROOT))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST):
    """Every node, skipping the bodies of `if TYPE_CHECKING:` (their `else` still counts)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _first_party(name: str) -> str | None:
    """The module `name` names, or its closest first-party parent (for `import a.b.attr`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str) -> list[Import]:
    path = MODULES[name]
    return imports_in(name, path.read_text(), is_package=path.name == "__init__.py")


def imports_in(name: str, source: str, is_package: bool = False) -> list[Import]:
    """The first-party modules that the code `source` of module `name` imports."""
    out = []
    for node in _nodes(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names
            ]
        for target in targets:
            module = _first_party(target)
            if module and module != name:
                out.append(Import(name, module, node.lineno))
    return out


def import_graph() -> dict[str, dict[str, Import]]:
    """module -> {imported module: its first import}."""
    graph: dict[str, dict[str, Import]] = {name: {} for name in MODULES}
    for name in MODULES:
        for imp in imports_of(name):
            graph[name].setdefault(imp.target, imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, Import]]) -> list[set[str]]:
    """Tarjan's algorithm (iterative); components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def a_cycle(graph: dict[str, dict[str, Import]], component: set[str]) -> list[Import]:
    """One concrete cycle through the component's first module (breadth-first, so a short one)."""
    start = min(component)
    paths: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target, imp in sorted(graph[node].items()):
            if target == start:
                return [*paths[node], imp]
            if target in component and target not in paths:
                paths[target] = [*paths[node], imp]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")


def test_the_parser_sees_every_kind_of_import():
    source = """
from typing import TYPE_CHECKING
import capsem.ids, json
from . import tls
from .reply import Reply
from .. import paths
from capsem.emulator import server as srv, nothing_such

if TYPE_CHECKING:
    from assembler.cli import cli
else:
    import pricing

def later():
    from addons import decode
    import assembler.query.QueryError
"""
    found = sorted((imp.target, imp.line) for imp in imports_in("capsem.emulator.bedrock", source))
    assert found == [
        ("addons.decode", 15), ("assembler.query", 16), ("capsem.emulator", 7), ("capsem.emulator.reply", 5),
        ("capsem.emulator.server", 7), ("capsem.emulator.tls", 4), ("capsem.ids", 3), ("capsem.paths", 6),
        ("pricing", 12),
    ]  # fmt: skip
    graph = {"a": {}, "b": {}, "c": {}, "d": {}}
    for source, target in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]:
        graph[source][target] = Import(source, target, 1)
    assert strongly_connected(graph) == [{"a", "b", "c"}]
    assert [(i.source, i.target) for i in a_cycle(graph, {"a", "b", "c"})] == [
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
    ]

    found = {(imp.source, imp.target) for imp in imports_of("assembler.bundle.cli")}
    assert ("assembler.bundle.cli", "assembler.bundle.errors") in found  # relative or absolute
    graph = import_graph()
    assert "capsem.emulator.server" in graph["capsem.emulator"]
    assert all(target in MODULES for targets in graph.values() for target in targets)


def test_no_import_cycles_between_modules():
    graph = import_graph()
    problems = []
    for component in strongly_connected(graph):
        cycle = a_cycle(graph, component)
        problems.append(
            f"import cycle among {len(component)} modules: "
            + " -> ".join([imp.source for imp in cycle] + [cycle[0].source])
            + "".join(f"\n    {imp}" for imp in cycle)
        )
    assert not problems, "\n".join(problems)


def test_packages_import_only_the_layers_below():
    wrong = []
    for name in MODULES:
        package = name.split(".")[0]
        for imp in imports_of(name):
            other = imp.target.split(".")[0]
            if other != package and other not in ALLOWED[package]:
                wrong.append(f"{package} may not import {other}: {imp}")
    assert not wrong, "\n".join(wrong)


def _side(module: str) -> str | None:
    if module == "addons.capsem_addon":  # the `-s` entry: it registers the proxy side's addons
        return "addons.proxy"
    for side in ("addons.proxy", "addons.recorder"):
        if module == side or module.startswith(side + "."):
            return side
    return None


def test_each_side_of_the_process_boundary_imports_only_its_own():
    wrong = []
    for name in MODULES:
        if not name.startswith("addons"):
            continue
        side = _side(name)
        for imp in imports_of(name):
            other = _side(imp.target)
            if other is None or other == side:
                continue
            if side == "addons.recorder" and name == "addons.recorder.thread":
                continue  # the recorder on a thread stands where RecorderProcess stands (tests)
            wrong.append(f"{side or 'shared'} may not import {other}: {imp}")
    assert not wrong, "\n".join(wrong)


NEVER_IN_MITMDUMP = ("addons.recorder", "addons.body", "addons.eventstream", "addons.items", "addons.conversations",
                     "addons.records",
                     "addons.providers.base", "addons.providers.collect", "addons.providers.anthropic",
                     "addons.providers.openai_chat", "addons.providers.openai_responses",
                     "addons.providers.gemini", "addons.providers.ollama", "pricing")  # fmt: skip


def test_loading_the_addon_loads_no_writer_builder_or_parser(tmp_path):
    """What mitmdump's `-s addons/capsem_addon.py` imports, in a fresh interpreter."""
    code = "import sys, addons.capsem_addon; print('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    loaded = set(out.stdout.split())
    assert "addons.proxy.capture" in loaded
    wrong = sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in NEVER_IN_MITMDUMP))
    assert not wrong, f"loading the addon imports {wrong}"


# `capsem run`'s watcher and sampler send their rows to the recorder, session.db's one writer; only
# assembler/offline_write.py writes a session.db itself, when no recorder runs it.
SEND_ONLY = ("assembler.fswatch", "assembler.feed", "assembler.procdiag.sampler", "assembler.procdiag.sample",
             "assembler.procdiag.anomalies", "assembler.run")  # fmt: skip


def test_the_watcher_and_the_sampler_import_nothing_of_the_recorder():
    wrong = [
        str(imp) for name in SEND_ONLY for imp in imports_of(name) if _side(imp.target) == "addons.recorder"
    ]
    assert not wrong, "\n".join(wrong)
    code = ("import sys, assembler.run, assembler.fswatch, assembler.procdiag, assembler.feed; "
            "print('\\n'.join(sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert not [m for m in out.stdout.split() if m.startswith("addons.recorder")]
