"""Passwords on command lines that no secret name announces: the flags of common tools, as data.

An agent's shell calls (and the output they print) put passwords after flags whose names say
nothing (`redis-cli -a X`, `sqlcmd -P X`, `mysql -pX`). `FLAGS` lists, per tool, the flag and how
its value is glued to it; `OTHER` the forms that are no flag (`curl -u user:X`, `smbclient -U
user%X`, `sqlplus user/X@db`, `htpasswd -b FILE USER X`…). Flags whose names hold a secret word
(`--password`, `-storepass`, `--passphrase`, `-password`) are the name pass's (`capsem.secret_names`).
Each entry becomes a pattern of `capsem.redact` that runs only on a text holding one of its
literals (the tool's name); its group `s` is the password. The table is docs/RELIABILITY.md's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ARGS = r"[^\n|;&]{0,400}?"
"""The rest of one command, up to the flag (not past a newline, a pipe or the next command)."""
_QUOTE = r"""(?:\\*['"])?"""
_VALUE = r"""(?!\[redacted )(?P<s>[^\s'"\\]+)"""
"""A command-line value: up to a blank, a quote or a backslash (JSON's escaped quote)."""
_OPTIONAL = r"""(?![-/*][\s'"\\]|-[A-Za-z\-])"""
"""Not another flag, nor `-`, `/` or `*` alone (read it from stdin, prompt for it)."""
_HTFLAGS = r"(?:[ \t]+-(?:C[ \t]+[0-9]+|[A-Za-z]+))"


@dataclass(frozen=True)
class Flag:
    """Tools whose flag takes a password: `tool … FLAG PASSWORD` (`glue` says how they join)."""

    tools: tuple[str, ...]
    """Each a regex that starts with the literal every such command line holds (the prefilter's;
    one pattern per tool, so that Python's `re` searches for that literal, not an alternation)."""
    flag: str
    glue: str = "blank"
    """`blank` (`-a X`), `glued` (`-pX`), `either` (`-P X` or `-PX`) or `equals` (`-p X` or `-p=X`)."""
    literal: str | None = None
    """What the prefilter looks for, when not the tool's name (a name common in other text)."""


_GLUE = {"blank": r"[ \t]+", "glued": "", "either": r"[ \t]*", "equals": r"(?:[ \t]+|=)"}
_LOGINS = ("docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras", "crane")

FLAGS = (
    Flag(("redis-cli",), "-a"),
    Flag(("sqlcmd", "bcp", "osql", "isql", "mssql-cli"), "-P", "either"),
    Flag(
        (r"login(?<=\baz login)",), "(?:-p|--password)", "equals"
    ),  # (led by `login`: `az` is in every text)
    Flag((r"mongo\w*",), "-p"),
    Flag(("cqlsh",), "-p"),
    Flag((r"ldap\w+",), "-w"),
    Flag(("zip", "unzip"), "-P", literal="-P"),  # (`zip(` is in every Python text)
    Flag((r"7z[ar]?",), "-p", "glued"),
    Flag(("unrar",), "-p", "glued"),
    Flag(("rdesktop",), "-p"),
    Flag((r"ncftp\w*",), "-p"),
    Flag(("ssh-keygen",), "-[NP]"),
    Flag(("twine",), "-p"),
    Flag((r"secret(?<=\bgh secret)[ \t]+set",), "(?:-b|--body)", "equals"),
    Flag((r"mysql\w*", r"mariadb[\w\-]*"), "-p", "glued"),
    Flag(("sshpass",), "-p", "either"),
    Flag(("openssl",), "-k"),
    Flag(tuple(rf"{tool}(?:[ \t]+registry)?[ \t]+login" for tool in _LOGINS), "(?:-p|--password)", "equals"),
)

OTHER: tuple[tuple[tuple[str, ...], str], ...] = (
    (("curl",), rf"\bcurl\b{_ARGS}\s(?:-u|--user|--proxy-user|-U)(?:[ \t]+|=){_QUOTE}[^\s:'\"\\]*:{_VALUE}"),
    # smbclient -U user%PASSWORD
    *(
        ((tool,), rf"\b{tool}\b{_ARGS}\s(?:-U|--user(?:name)?)(?:[ \t]+|=){_QUOTE}[^\s%'\"\\]*%{_VALUE}")
        for tool in ("smbclient", "rpcclient", "smbcacls", "smbget")
    ),
    (("lftp",), rf"\blftp\b{_ARGS}\s-u[ \t]+{_QUOTE}[^\s,'\"\\]*,{_VALUE}"),  # lftp -u user,PASSWORD
    *(((tool,), rf"\b{tool}\b{_ARGS}\s/p:{_QUOTE}{_VALUE}") for tool in ("xfreerdp", "wlfreerdp", "freerdp")),
    # sqlplus user/PASSWORD@db (Oracle's tools)
    *(
        (
            (tool,),
            rf"""\b{tool}\b(?:[ \t]+-\w+)*[ \t]+{_QUOTE}[A-Za-z_][\w$#]*/(?!\[redacted )(?P<s>[^\s@'"\\/]+)""",
        )
        for tool in ("sqlplus", "sqlldr", "expdp", "impdp", "rman")
    ),
    (
        ("rabbitmqctl",),
        rf"\brabbitmqctl\b(?:[ \t]+-\S+)*[ \t]+(?:add_user|change_password|authenticate_user)[ \t]+{_QUOTE}[^\s'\"\\]+"
        rf"{_QUOTE}[ \t]+{_QUOTE}{_VALUE}",
    ),
    # MinIO: mc alias set NAME URL ACCESS_KEY SECRET_KEY
    (
        ("mc alias", "mc config"),
        rf"\bmc[ \t]+(?:alias[ \t]+set|config[ \t]+host[ \t]+add)[ \t]+\S+[ \t]+\S+[ \t]+\S+[ \t]+"
        rf"{_QUOTE}{_VALUE}",
    ),
    (("ConvertTo-SecureString",), rf"\bConvertTo-SecureString[ \t]+(?:-String[ \t]+)?{_QUOTE}{_VALUE}"),
    (
        ("pass:",),
        rf"-(?:pass(?:in|out)?|passwd|password)[ \t]+pass:{_VALUE}",
    ),  # openssl -passin pass:PASSWORD
    # htpasswd -b [-c…] FILE USER PASSWORD, and -nb USER PASSWORD (no file)
    (
        ("htpasswd",),
        rf"\bhtpasswd(?={_HTFLAGS}*[ \t]+-[A-Za-z]*b)(?!{_HTFLAGS}*[ \t]+-[A-Za-z]*n){_HTFLAGS}+"
        rf"[ \t]+[^\s\-]\S*[ \t]+\S+[ \t]+{_QUOTE}{_VALUE}",
    ),
    (
        ("htpasswd",),
        rf"\bhtpasswd(?={_HTFLAGS}*[ \t]+-[A-Za-z]*b)(?={_HTFLAGS}*[ \t]+-[A-Za-z]*n){_HTFLAGS}+"
        rf"[ \t]+[^\s\-]\S*[ \t]+{_QUOTE}{_VALUE}",
    ),
)


_LITERAL_RE = re.compile(r"(?P<word>[\w\-]+)(?:\(\?<=\\b(?P<phrase>[\w ]+)\))?")


def _pattern(tool: str, flag: Flag) -> tuple[tuple[str, ...], str]:
    optional = "" if flag.glue == "glued" else _OPTIONAL
    literal = _LITERAL_RE.match(tool)
    assert literal is not None, tool
    prefilter = flag.literal or literal.group("phrase") or literal.group("word")
    return (prefilter,), rf"\b{tool}\b{_ARGS}\s{flag.flag}{_GLUE[flag.glue]}{optional}{_QUOTE}{_VALUE}"


COMMAND_PATTERNS: list[tuple[tuple[str, ...], str]] = [
    *(_pattern(tool, flag) for flag in FLAGS for tool in flag.tools),
    *OTHER,
]
"""(literals, pattern) pairs for `capsem.redact`."""
