"""Policy rules from settings: ordered, first match decides, every field must match.

(The rules' checks and their error lines are tested with every other setting in
tests/core/test_settings.py.)"""

from __future__ import annotations

import pytest
import yaml

from addons.canonical import CanonicalRequest
from addons.proxy.policy import ALLOW, McpTarget, Policy, PolicyError, Verdict
from capsem.settings import load, parse


def at(host: str, port: int, path: str, method: str, *more_names: str) -> CanonicalRequest:
    """The canonical request of `method host:port path` carrying `more_names` too (Host, SNI...)."""
    return CanonicalRequest.of(method, port, path, (host, *more_names))


CONFIG = """
policy:
  rules:
    - {name: no-paste, action: deny, host: "*.pastebin.com"}
    - {name: local-admin, action: deny, host: 127.0.0.1, port: 9000, path: "/admin/*", method: delete}
    - {name: watch-shell, action: warn, mcp_tool: "run_*"}
    - {name: files-read-ok, action: allow, mcp_server: files, mcp_tool: read_note}
    - {action: deny, mcp_server: "files*"}
    - {action: warn, path: "/v1/*"}
"""


@pytest.fixture
def policy() -> Policy:
    return Policy.from_settings(parse(yaml.safe_load(CONFIG)))


def test_default_settings_allow_everything():
    policy = Policy.from_settings(load())
    assert policy.rules == () and not policy.has_mcp_rules
    assert policy.decide(at("api.anthropic.com", 443, "/v1/messages", "POST")) is ALLOW


def test_first_matching_rule_decides(policy):
    assert policy.decide(at("Foo.PasteBin.com", 443, "/v1/x", "GET")) == Verdict("denied", "no-paste")
    assert policy.decide(at("api.example.com", 443, "/v1/chat", "POST")) == Verdict("warned", "rule-6")
    assert policy.decide(at("api.example.com", 443, "/v2/chat", "POST")) is ALLOW


def test_every_named_field_must_match(policy):
    assert policy.decide(at("127.0.0.1", 9000, "/admin/users", "DELETE")) == Verdict("denied", "local-admin")
    assert policy.decide(at("127.0.0.1", 9000, "/admin/users", "GET")) is ALLOW  # method
    assert policy.decide(at("127.0.0.1", 9001, "/admin/users", "DELETE")) is ALLOW  # port
    assert policy.decide(at("127.0.0.1", 9000, "/public", "DELETE")) is ALLOW  # path


def test_mcp_rules_match_tools_calls_only(policy):
    assert policy.has_mcp_rules
    endpoint = ("127.0.0.1:8000/mcp",)
    named = ("127.0.0.1:8000/mcp", "files-server")
    assert policy.decide(at("127.0.0.1", 8000, "/mcp", "POST")) is ALLOW  # no tools/call in the body
    assert policy.decide(at("127.0.0.1", 8000, "/mcp", "POST"), (endpoint, "run_tests")) == Verdict(
        "warned", "watch-shell"
    )
    # the server goes by its initialize name or its endpoint; globs are case-insensitive for servers
    assert policy.decide(at("h", 1, "/mcp", "POST"), (("FILES",), "read_note")) == Verdict(
        "allowed", "files-read-ok"
    )
    assert policy.decide(at("h", 1, "/mcp", "POST"), (named, "write_note")) == Verdict("denied", "rule-5")
    assert policy.decide(at("h", 1, "/mcp", "POST"), (endpoint, "write_note")) is ALLOW


def test_a_raw_mapping_is_still_checked_during_the_transition():
    raw = yaml.safe_load(CONFIG)
    assert Policy.from_settings(raw) == Policy.from_settings(parse(raw))
    with pytest.raises(PolicyError) as refused:
        Policy.from_settings({"policy": {"rules": [{"action": "block", "host": "x"}]}})
    assert (
        str(refused.value)
        == "<settings>: policy.rules[1].action must be allow, warn, deny or ask, got 'block'"
    )
    for settings in ({}, {"policy": None}, {"policy": {}}, {"policy": {"rules": None}}):
        assert Policy.from_settings(settings).rules == ()


def test_rules_keep_their_order_names_and_fields(policy):
    assert [r.name for r in policy.rules] == ["no-paste", "local-admin", "watch-shell", "files-read-ok",
                                              "rule-5", "rule-6"]  # fmt: skip
    assert (policy.rules[1].port, policy.rules[1].method, policy.rules[1].action) == (9000, "delete", "deny")


ARGS_CONFIG = """
policy:
  rules:
    - {name: shell-ok, action: allow, mcp_tool: run_shell, mcp_args: {command: "ls *"}}
    - {name: no-rm-rf, action: deny, mcp_args: {command: "rm -rf *"}}
    - {name: no-etc, action: warn, mcp_server: files, mcp_args: {path: {regex: '^/etc/'}, mode: w}}
    - {name: big-lists, action: deny, mcp_args: {paths: '*"/root*'}}
"""


def test_mcp_args_match_named_arguments_by_glob_or_regex():
    policy = Policy.from_settings(parse(yaml.safe_load(ARGS_CONFIG)))
    assert policy.has_mcp_rules and policy.needs_arguments
    server = ("127.0.0.1:8000/mcp", "files")

    def decide(tool, arguments):
        return policy.decide(at("127.0.0.1", 8000, "/mcp", "POST"), McpTarget(server, tool, arguments))

    assert decide("run_shell", {"command": "ls -la"}) == Verdict("allowed", "shell-ok")
    assert decide("run_shell", {"command": "rm -rf /tmp/x"}) == Verdict("denied", "no-rm-rf")
    assert decide("exec", {"command": "rm -rf /"}) == Verdict("denied", "no-rm-rf")  # any tool
    assert decide("exec", {"command": "echo rm -rf /"}) is ALLOW  # a glob matches the whole value
    assert decide("exec", {"cmd": "rm -rf /"}) is ALLOW  # another argument name
    assert decide("write", {"path": "/etc/passwd", "mode": "w"}) == Verdict("warned", "no-etc")
    assert decide("write", {"path": "/etc/passwd", "mode": "r"}) is ALLOW  # every named argument must match
    assert decide("write", {"path": "/home/etc/x", "mode": "w"}) is ALLOW  # the regex is anchored
    assert decide("rm", {"paths": ["/root/a", "/tmp"]}) == Verdict("denied", "big-lists")  # JSON of a list
    # no arguments known (a header-only call, or a plain (servers, tool) pair): argument rules do not match
    assert decide("exec", None) is ALLOW
    assert policy.decide(at("h", 1, "/mcp", "POST"), (server, "exec")) is ALLOW
    # not an MCP call at all
    assert policy.decide(at("127.0.0.1", 8000, "/mcp", "POST")) is ALLOW


def test_a_request_is_decided_by_its_strictest_tools_call():
    policy = Policy.from_settings(parse(yaml.safe_load(ARGS_CONFIG)))
    server = ("127.0.0.1:8000/mcp",)
    calls = [
        McpTarget(server, "run_shell", {"command": "ls -l"}),
        McpTarget(server, "x", {"command": "rm -rf /"}),
    ]
    assert policy.decide_request(at("h", 1, "/mcp", "POST"), calls) == Verdict("denied", "no-rm-rf")
    assert policy.decide_request(at("h", 1, "/mcp", "POST"), calls[:1]) == Verdict("allowed", "shell-ok")
    assert policy.decide_request(at("h", 1, "/mcp", "POST"), []) is ALLOW


def test_mcp_args_show_as_plain_data_in_the_settings():
    settings = parse(yaml.safe_load(ARGS_CONFIG))
    (entry,) = [e for e in settings.entries() if e.key == "policy.rules"]
    assert entry.value[2]["mcp_args"] == {"path": {"regex": "^/etc/"}, "mode": "w"}
    assert yaml.safe_load(yaml.safe_dump(entry.value)) == entry.value


CANONICAL = """
policy:
  rules:
    - {name: no-admin, action: deny, path: "/admin/*"}
    - {name: no-paste, action: deny, host: "*.pastebin.com"}
    - {name: no-loopback, action: deny, host: 127.0.0.0/8}
    - {name: no-v6-local, action: ask, host: "::1"}
    - {name: openai-ok, action: allow, host: api.openai.com}
    - {name: bucher, action: warn, host: "*.bücher.de"}
    - {name: rest, action: deny, host: "*"}
"""


@pytest.fixture
def canonical() -> Policy:
    return Policy.from_settings(parse(yaml.safe_load(CANONICAL)))


@pytest.mark.parametrize(
    "path",
    ["//admin/users", "/./admin/users", "/a/../admin/users", "/%61dmin/users", "/%61DMIN/../admin/x",
     "/ad%6Din/users", "/%2E%2E/admin/users", "/admin;x=1/users", "/public/..;/admin/users",
     "/admin%2Fusers", "/admin%2fusers", "/admin%5Cusers", "/admin\\users", "/x%2F..%2Fadmin/users",
     "/admin;x%2F..%2F/users", "/admin/users#frag"],
)  # fmt: skip
def test_a_path_rule_decides_on_every_spelling_of_the_path(canonical, path):
    assert canonical.decide(at("api.openai.com", 443, path, "GET")) == Verdict("denied", "no-admin")


@pytest.mark.parametrize("path", ["/ADMIN/users", "/%2561dmin/users", "/administrator", "/x/admin/users"])
def test_a_path_that_means_something_else_is_not_denied(canonical, path):
    assert canonical.decide(at("api.openai.com", 443, path, "GET")) == Verdict("allowed", "openai-ok")


@pytest.mark.parametrize(
    "host",
    ["x.pastebin.com", "x.pastebin.com.", "X.PASTEBIN.COM", "x.PasteBin.com..", "x.pastebin.com:443",
     "ｘ.ｐａｓｔｅｂｉｎ.ｃｏｍ"],
)  # fmt: skip
def test_a_host_glob_matches_the_canonical_name(canonical, host):
    assert canonical.decide(at(host, 443, "/", "GET")) == Verdict("denied", "no-paste")


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7F.1", "0177.0.0.1", "017700000001", "127.0.0.1.",
     "::ffff:127.0.0.1", "[::ffff:7f00:1]:8080", "localhost", "LocalHost.", "api.localhost", "127.255.0.9"],
)  # fmt: skip
def test_an_address_range_matches_every_spelling_of_an_address(canonical, host):
    assert canonical.decide(at(host, 80, "/", "GET")) == Verdict("denied", "no-loopback")


def test_an_address_rule_names_its_address_in_any_spelling():
    policy = Policy.from_settings(parse({"policy": {"rules": [{"action": "deny", "host": "0x7f000001"}]}}))
    assert policy.decide(at("127.0.0.1", 80, "/", "GET")).decision == "denied"
    assert policy.decide(at("127.0.0.2", 80, "/", "GET")) is ALLOW
    mapped = Policy.from_settings(
        parse({"policy": {"rules": [{"action": "deny", "host": "::ffff:10.0.0.0/104"}]}})
    )
    assert mapped.decide(at("10.1.2.3", 80, "/", "GET")).decision == "denied"
    assert mapped.decide(at("11.0.0.1", 80, "/", "GET")) is ALLOW


def test_a_localhost_rule_covers_the_loopback_addresses():
    policy = Policy.from_settings(parse({"policy": {"rules": [{"action": "deny", "host": "localhost"}]}}))
    for host in ("127.1", "2130706433", "0x7f000001", "[::1]", "localhost."):
        assert policy.decide(at(host, 80, "/", "GET")).decision == "denied", host
    assert policy.decide(at("10.0.0.1", 80, "/", "GET")) is ALLOW


def test_ipv6_and_idna(canonical):
    assert canonical.decide(at("[::1]", 80, "/", "GET")) == Verdict("asked", "no-v6-local")
    assert canonical.decide(at("0:0::1", 80, "/", "GET")) == Verdict("asked", "no-v6-local")
    assert canonical.decide(at("shop.BÜCHER.de", 443, "/", "GET")) == Verdict("warned", "bucher")
    assert canonical.decide(at("shop.xn--bcher-kva.de", 443, "/", "GET")) == Verdict("warned", "bucher")


def test_a_deny_on_any_name_denies_and_an_allow_needs_every_name(canonical):
    """The destination, a Host header, `:authority` and SNI may disagree: none walks round a rule."""
    assert canonical.decide(at("api.openai.com", 443, "/", "GET")) == Verdict("allowed", "openai-ok")
    assert canonical.decide(at("api.openai.com", 443, "/", "GET", "x.pastebin.com")) == Verdict(
        "denied", "no-paste"
    )
    assert canonical.decide(at("x.pastebin.com", 443, "/", "GET", "api.openai.com")) == Verdict(
        "denied", "no-paste"
    )
    assert canonical.decide(at("api.openai.com", 443, "/", "GET", "0x7f000001")) == Verdict(
        "denied", "no-loopback"
    )
    # the allow does not hold for evil.example: the rules after it decide
    assert canonical.decide(at("api.openai.com", 443, "/", "GET", "evil.example")) == Verdict(
        "denied", "rest"
    )
    assert canonical.decide(at("api.openai.com.", 443, "/", "GET", "API.OPENAI.COM:443")) == Verdict(
        "allowed", "openai-ok"
    )


def test_an_allowed_path_must_hold_for_every_reading():
    rules = [{"action": "allow", "path": "/public/*"}, {"name": "rest", "action": "deny", "path": "*"}]
    policy = Policy.from_settings(parse({"policy": {"rules": rules}}))
    assert policy.decide(at("h", 80, "/public/a", "GET")).decision == "allowed"
    assert policy.decide(at("h", 80, "/public/../admin", "GET")) == Verdict("denied", "rest")
    assert policy.decide(at("h", 80, "/public/a%2F..%2F..%2Fadmin", "GET")) == Verdict("denied", "rest")


def test_a_cidr_host_that_is_no_range_is_refused():
    with pytest.raises(PolicyError, match=r"policy.rules\[1\].host must be a glob or an address range"):
        Policy.from_settings({"policy": {"rules": [{"action": "deny", "host": "10.0.0.0/33"}]}})
