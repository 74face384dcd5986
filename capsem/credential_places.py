"""Places that hold credentials whatever their names look like: the syntaxes around a value.

`capsem.secret_names` finds a secret name and asks here whether the place it is in holds a value
the usual `NAME=v` / `NAME: v` / `"name": "v"` / `--name v` reading misses:

- a name and its value separated by blanks, after a command that assigns that way: `setx NAME v`,
  fish's `set -x NAME v`, a Dockerfile's `ENV NAME v`, `aws configure set NAME v`,
  `npm|yarn|pnpm config set NAME v`, `git config [--global] NAME v`, netrc
  (`machine h login u password v`, on one line or several), `nmcli … wifi connect SSID password v`;
- an XML element (`<password>v</password>`, Maven's settings.xml; attributes allowed);
- a name that is the value of a name/key field, its secret in the value field beside it:
  Kubernetes' `- name: DB_PASSWORD` / `value: v`, `{"name": "DB_PASSWORD", "value": "v"}`,
  .NET's `<add key="DbPassword" value="v"/>`, CloudFormation's `ParameterKey=DbPassword,ParameterValue=v`;
- a CSV header that names a secret column (an AWS IAM access-key file: `Access key ID,Secret access
  key`): that column of each row under it;

and, found without a name, `.pgpass` lines (`host:port:database:user:password`, `pgpass_spans`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from capsem.literal_scan import SHORT_TEXT, RegexPrefilter
from capsem.secret_values import DONE_RE, value_span

LOOK_BACK = 80
ASSIGNING = (
    (r"\bsetx\b", True), (r"\bENV\b", False), (r"\bset(?:\s+-[A-Za-z]+)+", True), (r"\bconfigure\s+set\b", True),
    (r"\bconfig\s+set\b", True), (r"\bgit\s+config\b", True), (r"\bmachine\b", True), (r"\blogin\b", True),
    (r"\bwifi\s+connect\b", True),
)  # fmt: skip
"""(regex, caseless): every blank assignment has a match of one of these ending in the few words
before its name (`blank_assignment` then decides)."""
_WORD_RUN_RE = re.compile(r"""[^\s"'\\{}\[\]:,=]+""")
_CONFIG_TOOLS = frozenset({"npm", "yarn", "pnpm"})
_XML_OPEN_END_RE = re.compile(r"(?:[ \t][^<>]*)?>[ \t]*(?=[^<\s])")
_XML_CONTENT_RE = re.compile(r"[^<]*")
_PAIR_NAME_RE = re.compile(
    r"""\b(?:name|key|Name|Key|ParameterKey|OptionName)\\*["']?[ \t]*[:=][ \t]*\\*["']?$"""
)
_PAIR_VALUE_RE = re.compile(r"""\b(?:value|Value|ParameterValue)(?P<q>\\*["'])?[ \t]*[:=][ \t]*""")
_PAIR_REACH = 200
_HEADER_LINE_RE = re.compile(r"[ \t]*[A-Za-z][\w .\-/]{0,40}(?:,[ \t]*[A-Za-z][\w .\-/]{0,40}){1,40}")
_MAX_ROWS = 10_000
_FIELD_REST_RE = re.compile(r"[\w .\-/]{0,40}?[ \t]*(?:[,\r\n\\\"]|$)")
_PGPASS_RE = re.compile(
    r"(?m)(?:^|(?<=[\"']))[ \t]*(?=[\w.\-*]*[A-Za-z*])[\w.\-*]+:(?:[0-9]{1,5}|\*):[^:\s\"'\\]+:[^:\s\"'\\]+:"
    r"(?!\[redacted )(?P<s>[^\s\"'\\]+)(?=[ \t\r]*(?:$|[\"'\\]))"
)
_PGPASS_GATE = RegexPrefilter(r":(?:[0-9]{1,5}|\*):[^:\s]+:[^:\s]+:[^\s:]", keep=True)
"""Led by its literal `:` (4x faster in Hyperscan than led by the host's character class)."""


def blank_assignment(text: str, name_start: int) -> bool:
    """Whether the name at `name_start` is assigned its value after blanks (see module doc): read
    from the few words before it, not by a regex over the line (most names followed by a blank
    are prose)."""
    # the words before the name, nearest last, whatever JSON or quotes they are in (one scan of the
    # reversed window: `{"command":"aws configure set` gives aws, configure, set)
    backwards = _WORD_RUN_RE.findall(text[max(0, name_start - LOOK_BACK) : name_start][::-1])
    words = [w[::-1] for w in reversed(backwards[:5])]
    if not words:
        return False
    last = words[-1].lower()
    if last == "setx" or words[-1] == "ENV":  # setx NAME v; Dockerfile ENV NAME v
        return True
    if len(words) >= 2 and words[-2].lower() in ("login", "machine"):  # netrc: machine h [login u] password v
        return True
    if last.startswith("-") or last in ("set", "config"):
        lowered = [w.lower() for w in words]
        if lowered[-3:-1] == ["wifi", "connect"]:
            return True
        flags = len(lowered)
        while flags > 0 and lowered[flags - 1].startswith("-"):
            flags -= 1
        head = lowered[:flags]
        if head[-1:] == ["set"] and (flags < len(lowered) or head[-3:-1] == ["aws", "configure"]):
            return True  # fish's set -gx NAME v; aws configure set NAME v
        if head[-2:] == ["config", "set"] and len(head) >= 3 and head[-3] in _CONFIG_TOOLS:
            return True
        return head[-2:] == ["git", "config"]
    return len(words) >= 3 and [w.lower() for w in words[-3:-1]] == ["wifi", "connect"]


def xml_element_span(text: str, name_start: int, name_end: int) -> tuple[int, int] | None:
    """The content of `<name …>content</name>` when the name opens an element, else None."""
    if name_start == 0 or text[name_start - 1] != "<":
        return None
    opened = _XML_OPEN_END_RE.match(text, name_end)
    if opened is None:
        return None
    content = _XML_CONTENT_RE.match(text, opened.end())
    end = content.end() if content else opened.end()
    name = text[name_start:name_end]
    if not text.startswith("</", end) or text[end + 2 : end + 2 + len(name)].lower() != name.lower():
        return None  # no closing tag of its own: prose that quotes a tag (`ack <token>, then…`)
    value = text[opened.end() : end].rstrip()
    if not value or DONE_RE.fullmatch(value):
        return None
    return opened.end(), opened.end() + len(value)


def paired_value_span(text: str, name_start: int, name_end: int) -> tuple[int, int] | None:
    """The value beside a secret name that is itself the value of a name/key field, else None."""
    before = name_start - 1
    while before > 0 and text[before] in "\\\"' \t":
        before -= 1
    if (
        before < 0
        or text[before] not in ":="
        or _PAIR_NAME_RE.search(text, max(0, name_start - 40), name_start) is None
    ):
        return None
    pair = _PAIR_VALUE_RE.search(text, name_end, name_end + _PAIR_REACH)
    if (
        pair is None
        or any(c in text[name_end : pair.start()] for c in "{}<")
        or "name" in text[name_end : pair.start()]
    ):
        return None
    return value_span(text, pair.end(), "value", bool(pair.group("q")), False)


def _line_bounds(text: str, at: int) -> tuple[int, int]:
    """The line around `at` (at most 2,000 characters), also ended by a quote (the JSON string it
    is in)."""
    low, high = max(0, at - 2000), min(len(text), at + 2000)
    start = max(text.rfind("\n", low, at), text.rfind('"', low, at), low - 1) + 1
    ends = [i for i in (text.find("\n", at, high), text.find('"', at, high)) if i >= 0]
    return start, min(ends) if ends else high


def csv_column_spans(
    text: str, hit: int, is_secret: Callable[[str], bool]
) -> tuple[list[tuple[int, int]], int]:
    """The values under the secret columns of the CSV header line holding `hit`, and where they
    end (`hit` itself when that line is no such header)."""
    if not _FIELD_REST_RE.match(text, hit):  # the rest of its field: plain words up to `,` or the end
        return [], hit
    low = max(0, hit - 42)
    edge = max(text.rfind(",", low, hit), text.rfind("\n", low, hit), text.rfind('"', low, hit))
    if (edge < 0 and low > 0) or text.find(",", hit, hit + 300) < 0:  # not a field of a header line
        return [], hit
    start, end = _line_bounds(text, hit)
    header = text[start:end].rstrip(" \t\r\\")
    if not _HEADER_LINE_RE.fullmatch(header):
        return [], hit
    fields = header.split(",")
    columns = [i for i, f in enumerate(fields) if is_secret(f.strip())]
    if not columns or end >= len(text) or text[end] != "\n":
        return [], hit
    spans: list[tuple[int, int]] = []
    pos = end + 1
    for _ in range(_MAX_ROWS):
        row_end = min((i for i in (text.find("\n", pos), text.find('"', pos)) if i >= 0), default=len(text))
        cells = text[pos:row_end].split(",")
        if len(cells) != len(fields) or not text[pos:row_end].strip(" \t\r\\"):
            break
        offsets = [pos]
        for cell in cells[:-1]:
            offsets.append(offsets[-1] + len(cell) + 1)
        for i in columns:
            cell = cells[i].split("\\", 1)[0]  # (a JSON escape ends the cell: `\\r`, `\\"`)
            value = cell.strip()
            if value and not DONE_RE.fullmatch(value):
                at = offsets[i] + len(cell) - len(cell.lstrip())
                spans.append((at, at + len(value)))
        end = row_end
        if row_end >= len(text) or text[row_end] != "\n":
            break
        pos = row_end + 1
    return spans, end


def pgpass_spans(text: str, data: bytes) -> list[tuple[int, int]]:
    """The passwords of `.pgpass` lines (`host:port:database:user:password`) in `text`
    (`data`: its UTF-8; Hyperscan says first whether any line could be one)."""
    few_colons = len(data) <= SHORT_TEXT and data.count(b":") < 4  # a line holds four
    if few_colons or not _PGPASS_GATE.maybe(data):
        return []
    return [m.span("s") for m in _PGPASS_RE.finditer(text)]
