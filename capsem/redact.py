"""Keeping secrets off disk: header hashing, query redaction and secret scrubbing.

Rules (DESIGN.md contract): a short allowlist of harmless headers is stored verbatim; every
other header value becomes `hash:` + 12 hex chars of its SHA-256. Sensitive query parameters
are hashed the same way. Every text that reaches a database goes through `Scrubber.scrub`,
which replaces well-known credential shapes (`sk-ant-…`, `sk-…`, `AIza…`, GitHub and Slack
tokens, JWTs, bearer tokens, JSON fields named like secrets) and any secret value seen in a
credential header or query parameter of this session (learned literals).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote

HASH_PREFIX = "hash:"

# (literals one of which every match contains, pattern): the literals are checked with `in` first,
# so a text without any of them costs one fast substring scan per literal, not a regex pass.
_PATTERNS: list[tuple[tuple[str, ...], str]] = [
    (("sk-ant-",), r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    (("sk-",), r"\bsk-(?:proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_\-]{16,}"),
    (("AIza",), r"\bAIza[0-9A-Za-z_\-]{20,}"),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    (("xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"), r"\bxox[baprs]-[A-Za-z0-9\-]{10,}"),
    (("ya29.",), r"\bya29\.[0-9A-Za-z_\-]{20,}"),
    (("AKIA",), r"\bAKIA[0-9A-Z]{16}\b"),
    (("eyJ",), r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    (("Bearer ",), r"(?<=Bearer )[A-Za-z0-9._~+/\-]{12,}=*"),
]
_COMPILED = [(literals, re.compile(pattern)) for literals, pattern in _PATTERNS]
_SECRET_KEYS = (
    r"api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|id[_-]?token|client[_-]?secret|"
    r"password|passwd|secret|private[_-]?key|authorization|x-api-key|x-goog-api-key"
)
# words one of which every secret-named JSON key contains (checked on the lower-cased text first)
_SECRET_KEY_WORDS = ("key", "token", "secret", "passw", "authorization")
# "api_key": "value"  (also with escaped quotes inside JSON-in-JSON previews)
_JSON_FIELD_RE = re.compile(
    rf'(?i)((?:\\?")(?:{_SECRET_KEYS})(?:\\?")\s*:\s*(?:\\?"))(?!hash:|\[redacted )((?:[^"\\]|\\[^"])'
    r"{4,}?)(\\?\")"
)
_CREDENTIAL_HEADER_RE = re.compile(r"(?i)auth|token|secret|key|cookie|session|credential|password")
_MAX_LEARNED = 512


def hash_value(value: str | bytes) -> str:
    """`hash:` + the first 12 hex chars of the SHA-256 of `value`."""
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()[:12]


def _redacted(secret: str) -> str:
    return f"[redacted {hash_value(secret)}]"


class Scrubber:
    """Replaces secrets in text; learns the literal values of this session's credentials."""

    def __init__(self) -> None:
        self._learned: set[str] = set()
        self._learned_re: re.Pattern[str] | None = None
        self._learned_list: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def learn(self, secret: str) -> None:
        """Remember a credential value so that any later occurrence of it is scrubbed."""
        secret = secret.strip()
        if secret.lower().startswith(("bearer ", "basic ")):
            secret = secret.split(None, 1)[1] if " " in secret else ""
        if len(secret) < 8 or secret in self._learned:
            return
        with self._lock:
            if len(self._learned) >= _MAX_LEARNED:
                return
            self._learned.add(secret)
            ordered = sorted(self._learned, key=len, reverse=True)
            self._learned_re = re.compile("|".join(re.escape(s) for s in ordered))
            self._learned_list = tuple(ordered)

    def scrub(self, text: str | None) -> str | None:
        """`text` with every known secret replaced by `[redacted hash:…]`."""
        if not text:
            return text
        learned = self._learned_re
        if learned is not None and any(s in text for s in self._learned_list):
            text = learned.sub(lambda m: _redacted(m.group(0)), text)
        for literals, pattern in _COMPILED:
            if any(lit in text for lit in literals):
                text = pattern.sub(lambda m: _redacted(m.group(0)), text)
        lowered = text.lower()
        if '"' in text and any(word in lowered for word in _SECRET_KEY_WORDS):
            text = _JSON_FIELD_RE.sub(lambda m: m.group(1) + _redacted(m.group(2)) + m.group(3), text)
        return text


def is_credential_header(name: str) -> bool:
    return bool(_CREDENTIAL_HEADER_RE.search(name))


def headers_json(headers: Iterable[tuple[str, str]], allowlist: frozenset[str], scrubber: Scrubber) -> str:
    """Headers as a JSON object: allowlisted values verbatim, others hashed.

    Names are lower-cased; a repeated header becomes a list. Credential-looking headers teach
    the scrubber their value so it never appears elsewhere either.
    """
    out: dict[str, str | list[str]] = {}
    for raw_name, value in headers:
        name = raw_name.lower()
        if name in allowlist:
            stored = scrubber.scrub(value) or ""
        else:
            if is_credential_header(name):
                scrubber.learn(value)
                if name == "cookie":
                    for part in value.split(";"):
                        scrubber.learn(part.partition("=")[2])
            stored = hash_value(value)
        previous = out.get(name)
        if previous is None:
            out[name] = stored
        elif isinstance(previous, list):
            previous.append(stored)
        else:
            out[name] = [previous, stored]
    return json.dumps(out, ensure_ascii=False)


def redact_query(query: str, sensitive: frozenset[str], scrubber: Scrubber) -> str:
    """The query string with sensitive parameter values replaced by `hash:…` (order kept)."""
    if not query:
        return query
    parts = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key.lower() in sensitive and value:
            scrubber.learn(value)
            value = hash_value(value)
        else:
            value = scrubber.scrub(value) or ""
        parts.append(f"{quote(key, safe='')}={quote(value, safe=':[]')}")
    return "&".join(parts)
