"""The simple commands a shell command line would run, for matching tool arguments by meaning.

`commands("sudo -u root env A=1 bash -c 'echo x; /bin/rm -r -f /'")` yields the commands
`sudo`, `env`, `bash`, `echo` and `rm` with their words: what a guardrail needs to ask "does this
run `rm` with `-r` and `-f`?" however the line is written. Pure and tolerant: it never raises,
and input a shell would refuse (unbalanced quotes) is still read, with a rougher tokenization,
so a rule cannot be escaped by breaking the syntax.

What is read (see docs/RELIABILITY.md for what was tried):
- separators `;` `&` `&&` `|` `||` `|&`, newlines, subshells `( … )` and groups `{ …; }`, the
  keywords of compound commands (`if`, `then`, `do`, `!`…), leading `VAR=x` assignments and
  redirections (`2>&1`, `> f`);
- command substitutions `$(…)`, backticks and process substitutions `<(…)` `>(…)`, wherever they
  are, quoted or not (a single-quoted one, which a shell would not run, is read too: it errs on
  the side of matching);
- `bash|sh|zsh|dash|ksh|ash|fish -c STRING` (also in clusters such as `-lc`), `eval WORDS`,
  `env -S STRING`, a shell fed a here-string (`bash <<< STRING`) or a pipe from `echo`/`printf`
  (`echo 'rm -rf /' | sh`), recursively;
- the wrappers in `WRAPPERS` (their options, and the option values they take, are skipped),
  `find … -exec CMD ;` and brace expansion of a whole command (`{rm,-rf,/}`);
- quoting: `'rm'`, `"rm"`, `\\rm`, `r''m` and `$'rm'` are all `rm`; a program is named by its base
  name (`/bin/rm` is `rm`).

Not read: variables and aliases (`r=rm; $r -rf /`), globs in a program's name (`/bin/r?`),
escape sequences inside `$'…'`, scripts in other languages (`python -c …`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SHELLS", "WRAPPERS", "Command", "commands", "words_of"]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "busybox-sh"})
"""Programs whose `-c STRING` is a command line."""

WRAPPERS: dict[str, frozenset[str]] = {
    # wrapper -> its options that take a value (skipped with the option); the command follows
    "sudo": _names("-u -g -C -D -h -p -r -t -U -T -R --user --group --chdir --prompt --role --type "
               "--other-user --host --close-from --chroot --command-timeout"),
    "doas": _names("-u -C"),
    "env": _names("-u -C --unset --chdir"),
    "nohup": frozenset(),
    "timeout": _names("-s -k --signal --kill-after"),
    "xargs": _names("-a -d -E -I -L -n -P -s --arg-file --delimiter --max-lines --max-args "
                "--max-procs --max-chars --process-slot-var"),
    "command": frozenset(),
    "exec": _names("-a"),
    "nice": _names("-n --adjustment"),
    "time": _names("-f -o --format --output"),
    "setsid": frozenset(),
    "stdbuf": _names("-i -o -e --input --output --error"),
    "ionice": _names("-c -n -p -P -u --class --classdata"),
    "chrt": frozenset(),
    "busybox": frozenset(),
    "builtin": frozenset(),
}  # fmt: skip
"""Programs that run the command that follows their own options."""

_KEYWORDS = _names("! { } if then else elif fi do done while until case esac for in select function")
_SEPARATOR = re.compile(r"[;&|()<>]*[;|()][;&|()<>]*|&&?")
"""An operator that ends a command (shlex joins neighbouring operators: `);(`); not a redirection."""
_REDIRECT = re.compile(r"^[0-9]*(?:[<>]+&?|&>>?|<>)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_BACKTICKS = re.compile(r"`([^`]*)`?")
"""A backtick substitution, read as `$(…)` (an unclosed one runs to the end)."""
_BRACES = re.compile(r"^\{([^{}\s]*,[^{}\s]*)\}$")
_MAX_DEPTH = 8
"""Nesting read at most (`bash -c "bash -c '…'"`): deeper input is read as plain words."""


@dataclass(frozen=True, slots=True)
class Command:
    """One simple command: its program's base name and its arguments, quotes removed."""

    program: str
    args: tuple[str, ...]


def commands(line: str) -> Iterator[Command]:
    """Every simple command `line` would run (wrappers and the commands they run alike)."""
    yield from _line(line, 0)


def words_of(argv: list[str] | tuple[str, ...]) -> Iterator[Command]:
    """The commands of an argv (`["sudo", "rm", "-rf", "/"]`: no shell reads it, so no splitting)."""
    yield from _simple(list(argv), 0)


def _line(line: str, depth: int) -> Iterator[Command]:
    if depth > _MAX_DEPTH or not line.strip():
        return
    text = (
        _BACKTICKS.sub(r"$(\1)", line)
        .replace("\\\n", "")
        .replace("\r", "\n")
        .replace("\n", " ; ")
        .replace("$'", "'")
        .replace('$"', '"')
    )
    pipeline: list[list[str]] = []
    current: list[str] = []
    for token in _tokens(text):
        if _SEPARATOR.fullmatch(token) and not _REDIRECT.match(token):
            pipeline.append(current)
            if token not in ("|", "|&"):  # the end of a pipeline
                yield from _pipeline(pipeline, depth)
                pipeline = []
            current = []
        else:
            current.append(token)
            if "$(" in token or "<(" in token or ">(" in token:  # quoted: a word holds what it runs
                for inner in _substitutions(token):
                    yield from _line(inner, depth + 1)
    pipeline.append(current)
    yield from _pipeline(pipeline, depth)


def _pipeline(stages: list[list[str]], depth: int) -> Iterator[Command]:
    """The commands of `a | b | c`; text echoed into a shell that reads its input is a command line."""
    found = [list(_simple(words, depth)) for words in stages]
    for n, stage in enumerate(found):
        yield from stage
        if n and any(c.program in SHELLS and _reads_stdin(c.args) for c in stage):
            for earlier in found[:n]:
                for command in earlier:
                    if command.program in ("echo", "printf"):
                        args = list(command.args)
                        while args and args[0] in ("-n", "-e", "-E", "-ne", "-en", "--"):
                            args = args[1:]
                        text = " ".join(args)
                        yield from _line(text.replace("\\n", "\n"), depth + 1)


def _reads_stdin(args: tuple[str, ...]) -> bool:
    return not any(a.startswith("-") and "c" in a[1:] and not a.startswith("--") for a in args) and not [
        a for a in args if not a.startswith("-")
    ]


def _tokens(text: str) -> list[str]:
    """Words and operators; input a shell would refuse is read with its quotes ignored."""
    for attempt in (text, re.sub(r"[\"'\\]", " ", text)):
        lexer = shlex.shlex(attempt, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""  # `#` starts a comment only at a word's start: never hide what follows
        try:
            return list(lexer)
        except ValueError:
            continue
    return text.split()


def _substitutions(word: str) -> Iterator[str]:
    """The bodies of `$(…)`, `<(…)`, `>(…)` in a word (the outermost; unquoted ones are split into
    commands by their parentheses already)."""
    n, size = 0, len(word)
    while n < size:
        start = word.find("(", n)
        if start < 1:
            return
        if word[start - 1] not in "$<>":
            n = start + 1
            continue
        level, end = 1, start + 1
        while end < size and level:
            level += 1 if word[end] == "(" else -1 if word[end] == ")" else 0
            end += 1
        yield word[start + 1 : end - 1 if not level else end]
        n = end


def _base(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1].lower()


# Long on purpose: one loop that peels what stands before the program (assignments, keywords,
# redirections, wrappers with their options) and follows what runs a further command line.
def _simple(words: list[str], depth: int) -> Iterator[Command]:
    """The command of one simple command's words, and what it runs (wrappers, `-c` strings…)."""
    words = _without_redirections(words)
    while words:
        head = words[0]
        if head in _KEYWORDS or _ASSIGNMENT.match(head):
            words = words[1:]
            continue
        braces = _BRACES.match(head)
        if braces:
            words = braces.group(1).split(",") + words[1:]
            continue
        break
    if not words or depth > _MAX_DEPTH:
        return
    program, args = _base(words[0]), words[1:]
    yield Command(program, tuple(args))
    if program in SHELLS:
        yield from _shell_c(args, depth)
    elif program == "eval":
        yield from _line(" ".join(args), depth + 1)
    elif program == "find":
        yield from _find_exec(args, depth)
    elif program in WRAPPERS:
        rest = _after_options(program, args)
        if rest:
            yield from _simple(rest, depth + 1)


def _without_redirections(words: list[str]) -> list[str]:
    """Words without redirections and their targets; a here-string to a shell stays as `-c`."""
    out: list[str] = []
    n = 0
    while n < len(words):
        if _REDIRECT.match(words[n]):
            if words[n] == "<<<" and n + 1 < len(words) and out and _base(out[0]) in SHELLS:
                out += ["-c", words[n + 1]]
            n += 2
            continue
        out.append(words[n])
        n += 1
    return out


def _shell_c(args: list[str], depth: int) -> Iterator[Command]:
    """`bash [-opts] -c STRING …` (or `-lc`, `-xc` …): the string's commands."""
    for n, arg in enumerate(args):
        if arg == "--" or not arg.startswith("-"):
            return
        if not arg.startswith("--") and "c" in arg[1:]:
            rest = [a for a in args[n + 1 :] if not (a.startswith("-") and len(a) > 1)]
            if rest:
                yield from _line(rest[0], depth + 1)
            return


def _find_exec(args: list[str], depth: int) -> Iterator[Command]:
    """`find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`, ended by `;` or `+`)."""
    for n, arg in enumerate(args):
        if arg in ("-exec", "-execdir", "-ok", "-okdir"):
            end = next((m for m in range(n + 1, len(args)) if args[m] in (";", "+", "\\;")), len(args))
            yield from _simple(args[n + 1 : end], depth + 1)


def _after_options(wrapper: str, args: list[str]) -> list[str]:
    """The command a wrapper runs: its words after the wrapper's own options (and, for `env`,
    assignments; for `timeout`, the duration; for `nice`, `-N`)."""
    takes_value = WRAPPERS[wrapper]
    n = 0
    while n < len(args):
        arg = args[n]
        if arg == "--":
            n += 1
            break
        if wrapper == "env" and _ASSIGNMENT.match(arg):
            n += 1
            continue
        if not arg.startswith("-") or (arg == "-" and wrapper != "env"):  # `env -` is `env -i`
            break
        if wrapper == "env" and (arg.startswith("-S") or arg.startswith("--split-string")):
            return _split_string(arg, args[n + 1 :])
        n += 2 if arg in takes_value else 1  # `-u root`: the value too; `-uroot`, `--user=root`: no
    rest = args[n:]
    if wrapper == "timeout" and rest:
        rest = rest[1:]  # the duration
    return rest


def _split_string(option: str, rest: list[str]) -> list[str]:
    """`env -S 'rm -rf' /` (or `-S'…'`, `--split-string=…`): the string split into words (as env
    does, no shell), then the words after it."""
    if option in ("-S", "--split-string"):
        string, rest = (rest[0], rest[1:]) if rest else ("", [])
    else:
        string = option.split("=", 1)[1] if option.startswith("--") else option[2:]
    try:
        words = shlex.split(string)
    except ValueError:
        words = string.split()
    return words + rest
