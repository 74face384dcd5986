"""`python -m capsem.native.build`: compile each C source here (fastpath.c, scrubpath.c, ledgerpath.c) into its
own extension module next to itself (`_fastpath`, `_scrubpath`, `_ledgerpath`), for this interpreter.

Run by `make install` after the environment is synced. It needs a C compiler and the Python
headers, and takes a few seconds; when either is missing, or the compiler fails, it says so and
exits 0: capsem then runs on its pure-Python path (slower, same results). A build newer than its
source is kept. The compiler and flags are the ones this Python was built with (`sysconfig`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = tuple(sorted(HERE.glob("*.c")))


def target(source: Path) -> Path:
    """The extension module built from `source` (`fastpath.c` -> `_fastpath.<suffix>`)."""
    return HERE / ("_" + source.stem + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def command(source: Path, out: Path) -> list[str] | None:
    """The compile-and-link command for this platform, or None when there is no compiler."""
    ldshared = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    if shutil.which(ldshared[0]) is None:
        return None
    include = sysconfig.get_paths()["include"]
    return [*ldshared, *shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC"), "-O2", "-std=c99",
            f"-I{include}", str(source), "-o", str(out)]  # fmt: skip


def build_one(source: Path, force: bool = False) -> str:
    """Build `source`'s extension unless a build newer than it is there; what happened, in words."""
    built = target(source)
    if not force and built.exists() and built.stat().st_mtime >= source.stat().st_mtime:
        return f"fast path: up to date ({built.name})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "fast path: not built (no Python headers: install python3-dev); capsem runs on pure Python"
    with tempfile.TemporaryDirectory(prefix="capsem-native-") as tmp:
        out = Path(tmp) / built.name
        cmd = command(source, out)
        if cmd is None:
            return "fast path: not built (no C compiler); capsem runs on pure Python"
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"fast path: not built ({exc}); capsem runs on pure Python"
        if done.returncode != 0:
            failed = done.stderr.strip()[-500:]
            return (
                f"fast path: {source.name} not built (compiler failed: {failed}); capsem runs on pure Python"
            )
        os.replace(out, built)
    return f"fast path: built {built.name}"


def build(force: bool = False) -> str:
    """Build every C source's extension; what happened, one line each."""
    return "\n".join(build_one(source, force) for source in SOURCES)


if __name__ == "__main__":
    print(build(force="--force" in sys.argv[1:]))
