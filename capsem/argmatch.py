"""Matchers on a tool call's arguments, by what they mean rather than how they are written.

One module, pure, for every place that decides on arguments: the policy's `mcp_args` (in
mitmdump, `addons/proxy/policy.py`), the settings' checks (`capsem config check`), the backtest
(`capsem policy test`) and, later, tool rules on a model's tool calls. A pattern is written in
the YAML config as one of:

- `"glob"`: the value as text matches the glob (whole, case-sensitive). A value that is not
  text is matched as its JSON; a list of texts (an argv) also as its words joined by spaces.
- `{regex: "…"}`: the same texts, searched with the regular expression.
- `{shell: "rm -r -f"}`: a string at any depth of the value, read as a shell command line
  (`capsem/shell_commands.py`), runs the program (a glob on its base name, any case) with at
  least those flags, in any order and spelling (`-rf`, `-fr`, `-r -f`, the long forms of
  `FLAG_SYNONYMS`), and the pattern's other words in that order among its other arguments
  (each a glob). A list of texts whose first item has no space is an argv (`["rm", "-rf",
  "/"]`: one command, no shell involved); any other list is read item by item.
- `{any: "glob"}`: any string at any depth of the value (objects and lists, nested) matches.

An argument name may be a glob too (`"*"`: every argument): the pattern matches when any
argument so named matches.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cache
from typing import Any

from capsem.shell_commands import Command, commands, words_of

__all__ = ["FLAG_SYNONYMS", "ArgMatch", "ArgPatternError", "Matcher", "matcher"]

KINDS = ("regex", "shell", "any")

FLAG_SYNONYMS: dict[str, dict[str, str]] = {
    # program -> option (without dashes) -> the name it is compared by. From each program's
    # documentation (GNU coreutils, git, curl, wget): `-R` is rm's `-r`, `--force` is `-f`…
    "rm": {"R": "r", "recursive": "r", "force": "f", "interactive": "i", "dir": "d", "verbose": "v"},
    "cp": {"R": "r", "recursive": "r", "force": "f", "archive": "a", "verbose": "v"},
    "mv": {"force": "f", "interactive": "i", "verbose": "v"},
    "ln": {"force": "f", "symbolic": "s"},
    "chmod": {"recursive": "R", "silent": "f", "quiet": "f", "verbose": "v", "changes": "c"},
    "chown": {"recursive": "R", "silent": "f", "quiet": "f", "verbose": "v", "no-dereference": "h"},
    "chgrp": {"recursive": "R", "silent": "f", "quiet": "f", "verbose": "v", "no-dereference": "h"},
    "shred": {"remove": "u", "zero": "z", "force": "f"},
    "git": {"force": "f", "delete": "d", "all": "a", "hard": "hard"},
    "curl": {"insecure": "k", "request": "X", "data": "d", "output": "o", "location": "L", "silent": "s",
             "form": "F", "upload-file": "T", "header": "H", "user": "u", "proxy": "x"},
    "wget": {"output-document": "O", "no-check-certificate": "no-check-certificate", "post-data": "post-data"},
}  # fmt: skip
WORD_OPTIONS = frozenset({"find"})
"""Programs whose options are whole words after one dash (`find -delete`): never split into letters."""


_UNQUOTE = str.maketrans("", "", "'\"\\")


@cache
def _name_pattern(program: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.-]){re.escape(program)}(?![\w.-])", re.IGNORECASE)


class ArgPatternError(ValueError):
    """A pattern that cannot be compiled; `where` is the part at fault (`.regex`, `.shell`, or "")."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


def _flags(program: str, args: tuple[str, ...] | list[str]) -> tuple[set[str], list[str]]:
    """(normalized flags, the other words) of a command's arguments (everything after `--` is a word)."""
    synonyms = FLAG_SYNONYMS.get(program, {})
    flags: set[str] = set()
    words: list[str] = []
    for n, arg in enumerate(args):
        if arg == "--":
            words += args[n + 1 :]
            break
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
        elif arg.startswith("--") or program in WORD_OPTIONS:
            name = arg.lstrip("-").split("=", 1)[0]
            flags.add(synonyms.get(name) or _abbreviated(name, synonyms))
        else:
            flags.update(synonyms.get(letter, letter) for letter in arg[1:])
    return flags, words


def _abbreviated(name: str, synonyms: Mapping[str, str]) -> str:
    """`--rec` for `--recursive` (GNU getopt takes any unambiguous prefix of a long option)."""
    meant = {canonical for long, canonical in synonyms.items() if len(long) > 1 and long.startswith(name)}
    return meant.pop() if len(meant) == 1 else name


def _is_subsequence(patterns: tuple[str, ...], words: list[str]) -> bool:
    it = iter(words)
    return all(any(fnmatchcase(w, p) for w in it) for p in patterns)


@dataclass(frozen=True, slots=True)
class ShellPattern:
    """`{shell: "git push --force"}` compiled: program glob, flags needed, words in order."""

    program: str
    flags: frozenset[str]
    words: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> ShellPattern:
        try:
            parts = shlex.split(text)
        except ValueError as exc:
            raise ArgPatternError(".shell", f"is not a command line ({exc})") from None
        if not parts or parts[0].startswith("-"):
            raise ArgPatternError(".shell", "must start with a program (e.g. 'rm -rf')")
        program = parts[0].rstrip("/").rsplit("/", 1)[-1].lower()
        flags, words = _flags(program, parts[1:])
        return cls(program, frozenset(flags), tuple(words))

    def may_run(self, line: str) -> bool:
        """A cheap test first (a C-speed search): a literal program's name must be in the line as
        a word once quotes and backslashes are taken out (`r''m`, `\\rm`, `{rm,-rf}` keep it)."""
        if self._name is None:
            return True
        return self._name.search(line.translate(_UNQUOTE)) is not None

    @property
    def _name(self) -> re.Pattern[str] | None:
        if any(c in self.program for c in "*?["):
            return None
        return _name_pattern(self.program)

    def runs(self, command: Command) -> bool:
        if not fnmatchcase(command.program, self.program):
            return False
        flags, words = _flags(command.program, command.args)
        return self.flags <= flags and _is_subsequence(self.words, words)


@dataclass(frozen=True, slots=True)
class Matcher:
    """One compiled pattern: `matches(value)` on an argument's value (any JSON value)."""

    kind: str
    """`glob`, `regex`, `shell` or `any`."""
    glob: str | None = None
    regex: re.Pattern[str] | None = None
    shell: ShellPattern | None = None

    def matches(self, value: Any) -> bool:
        if self.kind == "shell":
            assert self.shell is not None
            return any(self.shell.runs(c) for c in _commands(value, self.shell.may_run))
        if self.kind == "any":
            return any(fnmatchcase(s, self.glob or "") for s in _strings(value))
        if self.regex is not None:
            return any(self.regex.search(t) for t in _texts(value))
        return any(fnmatchcase(t, self.glob or "") for t in _texts(value))


def matcher(spec: Any) -> Matcher:
    """Compile a pattern as written in the config (see the module's docstring). Raises
    ArgPatternError saying what is wrong."""
    if isinstance(spec, str) and spec:
        return Matcher("glob", glob=spec)
    if not (isinstance(spec, Mapping) and len(spec) == 1 and next(iter(spec)) in KINDS):
        raise ArgPatternError("", "must be a glob (text), {regex: ...}, {shell: ...} or {any: ...}")
    ((kind, text),) = spec.items()
    if not isinstance(text, str) or not text:
        what = {"regex": "a regular expression", "shell": "a command line", "any": "a glob"}[kind]
        raise ArgPatternError(f".{kind}", f"must be {what} (text)")
    if kind == "regex":
        try:
            return Matcher("regex", regex=re.compile(text))
        except re.error as exc:
            raise ArgPatternError(".regex", f"is not a valid regular expression ({exc})") from None
    if kind == "shell":
        return Matcher("shell", shell=ShellPattern.of(text))
    return Matcher("any", glob=text)


@dataclass(frozen=True, slots=True)
class ArgMatch:
    """One `mcp_args` entry: an argument (by name, or a glob on names) whose value matches."""

    name: str
    match: Matcher = field(compare=False)

    @classmethod
    def of(cls, name: str, spec: Any) -> ArgMatch:
        return cls(name, matcher(spec))

    def matches(self, arguments: Mapping[str, Any] | None) -> bool:
        if not isinstance(arguments, Mapping):
            return False
        if self.name in arguments:
            return self.match.matches(arguments[self.name])
        if not any(c in self.name for c in "*?["):
            return False
        return any(fnmatchcase(str(k), self.name) and self.match.matches(v) for k, v in arguments.items())


def _strings(value: Any) -> Iterator[str]:
    """Every string at any depth of a JSON value (iteratively: no depth is too deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))


def _texts(value: Any) -> Iterator[str]:
    """What a glob or regex is matched against: the text, an argv's words joined, else the JSON."""
    if isinstance(value, str):
        yield value
        return
    if _is_argv(value):
        yield " ".join(value)
    yield json.dumps(value, ensure_ascii=False)


def _is_argv(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(v, str) for v in value)
        and not any(c.isspace() for c in value[0])
    )


def _commands(value: Any, may_run: Callable[[str], bool]) -> Iterator[Command]:
    """The commands in a value: each string a command line (when `may_run` it), each argv one
    command, at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if may_run(item):
                yield from commands(item)
        elif _is_argv(item):
            yield from words_of(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
