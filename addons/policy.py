"""Network policy: ordered rules that allow, warn or deny requests (pure matching).

Settings (`policy:` in the YAML config)::

    policy:
      rules:
        - name: no-paste-sites          # shown in matched_rule (default: rule-<n>)
          action: deny                  # allow | warn | deny
          host: "*.pastebin.com"        # glob, case-insensitive
        - action: deny
          mcp_server: files             # MCP tools/call only: server name from its initialize
                                        # result, or its endpoint host[:port]/path (glob)
          mcp_tool: "delete_*"          # and tool name (glob)

A rule matches when every field it names matches (host, port, path, method, mcp_server,
mcp_tool); the first matching rule decides. No rule matching means `allowed`: the default
policy allows everything, so capture alone changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

DECISIONS = {"allow": "allowed", "warn": "warned", "deny": "denied"}
McpTarget = tuple[tuple[str, ...], str]
"""An MCP tools/call: the names its server goes by (initialize name, endpoint) and the tool."""
_FIELDS = ("host", "port", "path", "method", "mcp_server", "mcp_tool")


class PolicyError(ValueError):
    """An invalid `policy:` setting."""


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    action: str
    host: str | None = None
    port: int | None = None
    path: str | None = None
    method: str | None = None
    mcp_server: str | None = None
    mcp_tool: str | None = None

    @property
    def needs_mcp(self) -> bool:
        return self.mcp_server is not None or self.mcp_tool is not None

    def matches(self, host: str, port: int, path: str, method: str, mcp: McpTarget | None) -> bool:
        if self.host is not None and not fnmatchcase(host.lower(), self.host.lower()):
            return False
        if self.port is not None and port != self.port:
            return False
        if self.path is not None and not fnmatchcase(path, self.path):
            return False
        if self.method is not None and method.upper() != self.method.upper():
            return False
        if self.needs_mcp:
            if mcp is None:
                return False
            servers, tool = mcp
            pattern = (self.mcp_server or "").lower()
            if self.mcp_server is not None and not any(fnmatchcase(s.lower(), pattern) for s in servers):
                return False
            if self.mcp_tool is not None and not fnmatchcase(tool, self.mcp_tool):
                return False
        return True


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: str
    """allowed | warned | denied"""
    rule: str | None


ALLOW = Verdict("allowed", None)


@dataclass(frozen=True, slots=True)
class Policy:
    rules: tuple[Rule, ...] = ()

    @property
    def has_mcp_rules(self) -> bool:
        return any(r.needs_mcp for r in self.rules)

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Policy:
        """The `policy:` section. Raises PolicyError naming the bad rule."""
        section = settings.get("policy") or {}
        if not isinstance(section, dict):
            raise PolicyError(f"policy: must be a mapping, not {section!r}")
        rules = section.get("rules") or []
        if not isinstance(rules, list):
            raise PolicyError("policy.rules must be a list")
        out = []
        for n, raw in enumerate(rules, 1):
            if not isinstance(raw, dict):
                raise PolicyError(f"policy rule {n} must be a mapping, not {raw!r}")
            unknown = set(raw) - {"name", "action", *_FIELDS}
            if unknown:
                raise PolicyError(f"policy rule {n}: unknown keys {sorted(unknown)}")
            action = str(raw.get("action", "")).lower()
            if action not in DECISIONS:
                raise PolicyError(
                    f"policy rule {n}: action must be allow, warn or deny, not {raw.get('action')!r}"
                )
            if not any(raw.get(f) is not None for f in _FIELDS):
                raise PolicyError(
                    f"policy rule {n}: names nothing to match (host, port, path, method, mcp_…)"
                )
            port = raw.get("port")
            if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
                raise PolicyError(f"policy rule {n}: port must be a number, not {port!r}")
            fields = {f: (raw[f] if f == "port" else str(raw[f])) for f in _FIELDS if raw.get(f) is not None}
            out.append(Rule(name=str(raw.get("name") or f"rule-{n}"), action=action, **fields))
        return cls(tuple(out))

    def decide(self, host: str, port: int, path: str, method: str, mcp: McpTarget | None = None) -> Verdict:
        """The first matching rule's verdict; `mcp` is (server names, tool) of an MCP tools/call."""
        for rule in self.rules:
            if rule.matches(host, port, path, method, mcp):
                return Verdict(DECISIONS[rule.action], rule.name)
        return ALLOW
