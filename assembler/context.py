"""Where a `capsem run` ran and what the user called it: the workspace, its git repository, branch
and commit at start, `--name` and `--tag`s, stored in main.db (`sessions.workspace`, `project`,
`git_repo`, `git_branch`, `git_commit`, `name`; `session_tags`) so that `list-sessions`,
`cost-report --by project|branch|tag` and the web list can group and filter by them.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path

from capsem.rollup import open_main

TAG = re.compile(r"[^\s,#][^\s,]{0,63}")
"""A tag or name: no spaces or commas, at most 64 characters, not starting with `#`."""


@dataclass(frozen=True)
class RunContext:
    workspace: str
    project: str
    """The git repository's folder name, else the workspace's."""
    git_repo: str | None = None
    """The repository's top-level directory."""
    git_branch: str | None = None
    """The branch checked out (None when detached or not a repository)."""
    git_commit: str | None = None
    name: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)


def check_label(kind: str, value: str) -> str:
    """`value` when it is a valid --name or --tag.

    Raises:
        ValueError: naming the option and the value.
    """
    if not TAG.fullmatch(value):
        raise ValueError(
            f"--{kind} {value!r}: use 1 to 64 characters without spaces or commas, not starting with #"
        )
    return value


def _git(workspace: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(workspace), *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


def run_context(workspace: Path, name: str | None = None, tags: tuple[str, ...] = ()) -> RunContext:
    """The context of a run in `workspace` (git is asked; without git, or outside a repository, only
    the workspace is known)."""
    workspace = workspace.resolve()
    repo = _git(workspace, "rev-parse", "--show-toplevel")
    branch = _git(workspace, "symbolic-ref", "--quiet", "--short", "HEAD") if repo else None
    commit = _git(workspace, "rev-parse", "--verify", "--quiet", "HEAD") if repo else None
    project = Path(repo).name if repo else workspace.name or str(workspace)
    return RunContext(str(workspace), project, repo, branch, commit, name, tuple(dict.fromkeys(tags)))


def scrubbed(context: RunContext) -> RunContext:
    """`context` with every text through the one scrubber, as stored: a name, a tag, a branch or a
    folder may hold a secret (`--tag token=ghp_…`)."""
    from capsem.scrubbers import configured_scrubber

    scrub = configured_scrubber().scrub
    texts = {f.name: scrub(value) if isinstance(value := getattr(context, f.name), str) else value
             for f in fields(context)}  # fmt: skip
    texts["tags"] = tuple(dict.fromkeys(scrub(tag) or "" for tag in context.tags))
    return RunContext(**texts)


def record_context(session_id: str, context: RunContext) -> None:
    """Store `context`, scrubbed, on the session's main.db row (which mitmdump registered at start)."""
    context = scrubbed(context)
    main = open_main()
    try:
        with main:
            main.execute(
                "UPDATE sessions SET workspace = ?, project = ?, git_repo = ?, git_branch = ?, git_commit = ?, "
                "name = ? WHERE id = ?",
                (context.workspace, context.project, context.git_repo, context.git_branch, context.git_commit,
                 context.name, session_id),
            )  # fmt: skip
            main.executemany(
                "INSERT OR IGNORE INTO session_tags (session_id, tag) VALUES (?, ?)",
                [(session_id, tag) for tag in context.tags],
            )
    finally:
        main.close()
