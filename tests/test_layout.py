"""Small modules and short functions, or a reason written beside them.

Every function of the project's packages over `LONG_FUNCTION` lines carries a `#` comment line
directly above its `def` (or above its decorators) saying why it is long. Every module under
`addons/` over `LONG_MODULE` lines says why in its docstring ("Over 400 lines on purpose: ...").
Parsed with `ast`; nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("addons", "assembler", "capsem", "pricing")
LONG_FUNCTION = 60
LONG_MODULE = 420


def _modules(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def long_functions_without_reason(source: str) -> list[tuple[str, int, int]]:
    """(name, line, length) of each function over `LONG_FUNCTION` lines with no `#` line right above it."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = node.end_lineno - node.lineno + 1
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if length > LONG_FUNCTION and not (first >= 2 and lines[first - 2].strip().startswith("#")):
            found.append((node.name, node.lineno, length))
    return found


def test_the_rule_sees_a_long_function_and_its_reason():
    body = "".join(f"    x{i} = {i}\n" for i in range(LONG_FUNCTION))
    assert long_functions_without_reason(f"def f():\n{body}") == [("f", 1, LONG_FUNCTION + 1)]
    assert long_functions_without_reason(f"# long: a table of cases\ndef f():\n{body}") == []
    assert long_functions_without_reason(f"# long: a table of cases\n@decorated\ndef f():\n{body}") == []
    assert long_functions_without_reason(f"class C:\n  def f(self):\n{body}") == [("f", 2, LONG_FUNCTION + 1)]
    assert long_functions_without_reason("def f():\n    return 1\n") == []


def test_no_function_over_60_lines_without_a_reason_above_it():
    missing = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for path in _modules(*PACKAGES)
        for name, line, length in long_functions_without_reason(path.read_text())
    ]
    why = "split these or write why they are long in a # comment above them:\n"
    assert not missing, why + "\n".join(missing)


def test_no_module_under_addons_over_420_lines_without_a_reason():
    missing = []
    for path in _modules("addons"):
        source = path.read_text()
        if len(source.splitlines()) > LONG_MODULE:
            doc = ast.get_docstring(ast.parse(source)) or ""
            if not re.search(r"Over \d+ lines", doc):
                missing.append(f"{path.relative_to(ROOT)} ({len(source.splitlines())} lines)")
    why = "split these or say why in the docstring (Over 400 lines on purpose: ...):\n"
    assert not missing, why + "\n".join(missing)
