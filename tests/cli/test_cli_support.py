"""The commands capsem suggests ("next: capsem view ID") work when pasted into a new shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.cli_support import capsem_command

ROOT = Path(__file__).resolve().parents[2]
CAPSEM = Path(sys.executable).parent / "capsem"


def test_capsem_is_spelled_as_a_new_shell_finds_it(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", [str(CAPSEM), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not on PATH: its absolute path
    assert capsem_command() == str(CAPSEM)
    link = tmp_path / "bin" / "capsem"  # on PATH as a link to the same program (make install-cli)
    link.parent.mkdir()
    link.symlink_to(CAPSEM)
    monkeypatch.setenv("PATH", f"{link.parent}:/usr/bin:/bin")
    assert capsem_command() == "capsem"
    other = tmp_path / "other" / "capsem"  # another capsem first on PATH: not this one
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", f"{other.parent}:{link.parent}")
    assert capsem_command() == str(CAPSEM)
    monkeypatch.setattr(sys, "argv", ["/somewhere/pytest"])  # not started as capsem
    assert capsem_command().endswith(" -m assembler") and sys.executable in capsem_command()


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "capsem").exists(), reason="needs `make install`")
def test_make_install_cli_leaves_a_capsem_a_new_shell_runs(tmp_path):
    bin_dir = tmp_path / "bin"
    made = subprocess.run(["make", "-s", "-C", str(ROOT), "install-cli", f"BIN_DIR={bin_dir}"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert f"linked {bin_dir}/capsem; {bin_dir} is not on your PATH" in made.stdout
    shell = subprocess.run(["bash", "-c", "capsem --version"], capture_output=True, text=True,
                           env={"HOME": str(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin"})  # fmt: skip
    assert shell.returncode == 0 and shell.stdout.startswith("capsem, version"), shell.stderr
    assert os.path.realpath(bin_dir / "capsem") == str((ROOT / ".venv" / "bin" / "capsem").resolve())
