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
    """A tool whose flag takes a password: `tool … FLAG PASSWORD` (`glue` says how they join)."""

    literals: tuple[str, ...]
    """What every such command line holds (the prefilter's literals)."""
    tool: str
    """A regex for the tool's name (`\\b` on both sides is added)."""
    flag: str
    glue: str = "blank"
    """`blank` (`-a X`), `glued` (`-pX`), `either` (`-P X` or `-PX`) or `equals` (`-p X` or `-p=X`)."""


_GLUE = {"blank": r"[ \t]+", "glued": "", "either": r"[ \t]*", "equals": r"(?:[ \t]+|=)"}

FLAGS = (
    Flag(("redis-cli",), r"redis-cli", "-a"),
    Flag(("sqlcmd", "bcp", "osql", "isql", "mssql-cli"), r"sqlcmd|bcp|osql|isql|mssql-cli", "-P", "either"),
    Flag(("login",), r"az[ \t]+login", "(?:-p|--password)", "equals"),
    Flag(("mongo",), r"mongo\w*", "-p"),
    Flag(("cqlsh",), r"cqlsh", "-p"),
    Flag(("ldap",), r"ldap\w+", "-w"),
    Flag(("zip",), r"zip|unzip|zipcloak", "-P"),
    Flag(("7z",), r"7z[ar]?", "-p", "glued"),
    Flag(("rar",), r"rar|unrar", "-p", "glued"),
    Flag(("rdesktop",), r"rdesktop", "-p"),
    Flag(("ncftp",), r"ncftp\w*", "-p"),
    Flag(("ssh-keygen",), r"ssh-keygen", "-[NP]"),
    Flag(("twine",), r"twine", "-p"),
    Flag(("secret",), r"gh[ \t]+secret[ \t]+set", "(?:-b|--body)", "equals"),
    Flag(("mysql", "mariadb"), r"mysql\w*|mariadb[\w\-]*", "-p", "glued"),
    Flag(("sshpass",), r"sshpass", "-p", "either"),
    Flag(("openssl",), r"openssl", "-k"),
    Flag(
        ("login",),
        r"(?:docker|podman|nerdctl|buildah|skopeo|helm[ \t]+registry|helm|oras|crane)[ \t]+login",
        "(?:-p|--password)",
        "equals",
    ),
)

OTHER: tuple[tuple[tuple[str, ...], str], ...] = (
    (("curl",), rf"\bcurl\b{_ARGS}\s(?:-u|--user|--proxy-user|-U)(?:[ \t]+|=){_QUOTE}[^\s:'\"\\]*:{_VALUE}"),
    # smbclient -U user%PASSWORD
    (
        ("smbclient", "rpcclient", "smbcacls", "smbget"),
        rf"\b(?:smbclient|rpcclient|smbcacls|smbget)\b{_ARGS}\s(?:-U|--user(?:name)?)(?:[ \t]+|=)"
        rf"{_QUOTE}[^\s%'\"\\]*%{_VALUE}",
    ),
    (("lftp",), rf"\blftp\b{_ARGS}\s-u[ \t]+{_QUOTE}[^\s,'\"\\]*,{_VALUE}"),  # lftp -u user,PASSWORD
    (
        ("freerdp",),
        rf"\b(?:xfreerdp|wlfreerdp|freerdp)\b{_ARGS}\s/p:{_QUOTE}{_VALUE}",
    ),  # xfreerdp /p:PASSWORD
    # sqlplus user/PASSWORD@db (Oracle's tools)
    (
        ("sqlplus", "sqlldr", "expdp", "impdp", "rman"),
        r"""\b(?:sqlplus|sqlldr|expdp|impdp|rman)\b(?:[ \t]+-\w+)*[ \t]+(?:\\*['"])?[A-Za-z_][\w$#]*/"""
        r"""(?!\[redacted )(?P<s>[^\s@'"\\/]+)""",
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


def _pattern(flag: Flag) -> str:
    optional = "" if flag.glue == "glued" else _OPTIONAL
    return rf"\b(?:{flag.tool})\b{_ARGS}\s{flag.flag}{_GLUE[flag.glue]}{optional}{_QUOTE}{_VALUE}"


COMMAND_PATTERNS: list[tuple[tuple[str, ...], str]] = [
    *((flag.literals, _pattern(flag)) for flag in FLAGS),
    *OTHER,
]
"""(literals, pattern) pairs for `capsem.redact`."""
