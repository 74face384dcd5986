"""capsem.settings: one typed tree from default.yaml, config.yaml and overrides; every bad value
refused in one line naming the file and the key; where each value came from."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import msgspec
import pytest

from addons.spec import RecorderSpec
from capsem import settings as settings_module
from capsem.config import ConfigError
from capsem.markers import hash_value
from capsem.paths import default_config_path
from capsem.settings import (
    OVERRIDE,
    SECTIONS,
    SETTINGS,
    Budget,
    CaptureSettings,
    Credential,
    PolicyRule,
    SettingsError,
    defaults,
    load,
    parse,
)

CAPTURE_KEYS = (
    "preview_bytes, content_max_bytes, max_parse_bytes, max_body_bytes, commit_interval_ms, max_pending_calls"
)
ALL_SECTIONS = (
    "capture, headers, redaction, policy, diagnostics, retention, budgets, credentials, export, team"
)
BUDGET_FIELDS = (
    "scope, period, limit_usd, warn_at, provider, model, host, "
    "on_unconfirmed, on_unpriced, reserve_output_tokens"
)
CREDENTIAL_FIELDS = "host, header, query, env, file, placeholder, agent_env"
RULE_FIELDS = (
    "name, action, host, port, path, method, mcp_server, mcp_tool, mcp_args, tool, tool_args, agent, process"
)


@pytest.fixture
def config(capsem_home: Path) -> Path:
    capsem_home.mkdir(parents=True, exist_ok=True)
    return capsem_home / "config.yaml"


def refusal(config: Path, text: str | bytes) -> str:
    """The one line `load()` refuses `text` (as $CAPSEM_HOME/config.yaml) with."""
    config.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SettingsError) as refused:
        load()
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{config}: ")
    return line.removeprefix(f"{config}: ")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # wrong types
        ("capture:\n  preview_bytes: lots\n", "capture.preview_bytes must be a whole number of bytes, got 'lots'"),
        ("capture: {commit_interval_ms: true}",
         "capture.commit_interval_ms must be a whole number of milliseconds >= 1, got True"),
        ("capture: {max_pending_calls: 2.5}", "capture.max_pending_calls must be a whole number of calls >= 1, got 2.5"),
        ("headers: {allowlist: accept}", "headers.allowlist must be a list of header names, got 'accept'"),
        ("headers: {allowlist: [accept, 5]}", "headers.allowlist[2] must be a header name, got 5"),
        ("redaction: {query_params: [key, {a: 1}]}",
         "redaction.query_params[2] must be a query parameter name, got {'a': 1}"),
        ("retention: {auto: 'yes please'}", "retention.auto must be true or false, got 'yes please'"),
        # negative, out of range
        ("capture: {content_max_bytes: -1}", "capture.content_max_bytes must be a whole number of bytes, got -1"),
        ("capture: {commit_interval_ms: 0}",
         "capture.commit_interval_ms must be a whole number of milliseconds >= 1, got 0"),
        ("retention: {max_disk_gb: -1}", "retention.max_disk_gb must be a number of GiB >= 0 (0 or null: no limit), got -1"),
        ("retention: {max_sessions: 2.5}",
         "retention.max_sessions must be a whole number of sessions (0 or null: no limit), got 2.5"),
        ("retention: {vacuum_after_hours: null}", "retention.vacuum_after_hours must be a number of hours >= 0, got None"),
        ("retention: {min_content_keep: -3}", "retention.min_content_keep must be a whole number of sessions, got -3"),
        # unknown keys and sections
        ("capture: {preview_byte: 10}",
         f"capture.preview_byte is not a setting (did you mean preview_bytes?); capture has: {CAPTURE_KEYS}"),
        ("capture: {a: 1, b: 2}", f"capture.a, capture.b are not settings; capture has: {CAPTURE_KEYS}"),
        ("captur: {preview_bytes: 10}", f"captur is not a section (did you mean capture?); sections are: {ALL_SECTIONS}"),
        ("exports: {}\nbudget: {}", f"exports, budget are not sections; sections are: {ALL_SECTIONS}"),
        ("policy: [1]", "policy must be a mapping of settings, got [1]"),
        # policy rules
        ("policy: {rules: [{action: block, host: x}]}",
         "policy.rules[1].action must be allow, warn, deny or ask, got 'block'"),
        ("policy: {rules: [{host: x}]}", "policy.rules[1].action must be allow, warn, deny or ask, got None"),
        ("policy: {rules: [{action: deny}]}",
         "policy.rules[1] must name something to match (host, port, path, method, mcp_server, mcp_tool, "
         "mcp_args, tool, tool_args), "
         "got {'action': 'deny'}"),
        ("policy: {rules: [{action: deny, hosts: x}]}",
         f"policy.rules[1].hosts is not a rule field (did you mean host?); a rule has: {RULE_FIELDS}"),
        ("policy: {rules: [{action: deny, hostname: x}]}",
         f"policy.rules[1].hostname is not a rule field (did you mean host?); a rule has: {RULE_FIELDS}"),
        ("policy: {rules: [{action: deny, host: x}, {action: deny, port: '443'}]}",
         "policy.rules[2].port must be a port number (1-65535), got '443'"),
        ("policy: {rules: [{action: deny, port: true}]}", "policy.rules[1].port must be a port number (1-65535), got True"),
        ("policy: {rules: [{action: deny, host: [a, b]}]}", "policy.rules[1].host must be a glob (text), got ['a', 'b']"),
        ("policy: {rules: {a: 1}}", "policy.rules must be a list of rules, got {'a': 1}"),
        ("policy: {rules: [deny]}", f"policy.rules[1] must be a mapping of rule fields ({RULE_FIELDS}), got 'deny'"),
        ("policy: {rules: [{action: deny, mcp_args: 'rm -rf *'}]}",
         "policy.rules[1].mcp_args must be a mapping of MCP argument name -> glob, {regex: ...}, {shell: ...} or "
         "{any: ...}, got 'rm -rf *'"),
        ("policy: {rules: [{action: deny, mcp_args: {command: 3}}]}",
         "policy.rules[1].mcp_args.command must be a glob (text), {regex: ...}, {shell: ...} or {any: ...}, got 3"),
        ("policy: {rules: [{action: deny, mcp_args: {command: {glob: x}}}]}",
         "policy.rules[1].mcp_args.command must be a glob (text), {regex: ...}, {shell: ...} or {any: ...}, "
         "got {'glob': 'x'}"),
        ("policy: {rules: [{action: deny, mcp_args: {command: {regex: 'rm (-rf'}}}]}",
         "policy.rules[1].mcp_args.command.regex is not a valid regular expression (missing ), unterminated "
         "subpattern at position 3), got 'rm (-rf'"),
        ("policy: {rules: [{action: deny, mcp_args: {command: {shell: '-rf'}}}]}",
         "policy.rules[1].mcp_args.command.shell must start with a program (e.g. 'rm -rf'), got '-rf'"),
        ("policy: {rules: [{action: deny, mcp_args: {command: {shell: \"rm 'x\"}}}]}",
         "policy.rules[1].mcp_args.command.shell is not a command line (No closing quotation), got \"rm 'x\""),
        ("policy: {rules: [{action: deny, mcp_args: {command: {any: 3}}}]}",
         "policy.rules[1].mcp_args.command.any must be a glob (text), got 3"),
        ("policy: {rules: [{action: deny, mcp_args: {command: {shell: rm, any: x}}}]}",
         "policy.rules[1].mcp_args.command must be a glob (text), {regex: ...}, {shell: ...} or {any: ...}, "
         "got {'shell': 'rm', 'any': 'x'}"),
        # tool rules
        ("policy: {rules: [{action: deny, tool: Bash, host: x}]}",
         "policy.rules[1] mixes a tool rule's fields (tool: a tool call in the model's answer) with a request "
         "rule's (host), which never match together: write two rules"),
        ("policy: {rules: [{action: deny, tool_args: {command: x}, mcp_tool: run}]}",
         "policy.rules[1] mixes a tool rule's fields (tool_args: a tool call in the model's answer) with a "
         "request rule's (mcp_tool), which never match together: write two rules"),
        ("policy: {rules: [{action: deny, host: x, agent: claude}]}",
         "policy.rules[1].agent scopes tool rules only: add tool (a glob on the tool's name, e.g. Bash) or tool_args"),
        ("policy: {rules: [{action: deny, agent: claude}]}",
         "policy.rules[1] must name something to match (host, port, path, method, mcp_server, mcp_tool, "
         "mcp_args, tool, tool_args), got {'action': 'deny', 'agent': 'claude'}"),
        ("policy: {rules: [{action: deny, tool: 3}]}", "policy.rules[1].tool must be a glob (text), got 3"),
        ("policy: {rules: [{action: deny, tool: Bash, process: ''}]}",
         "policy.rules[1].process must be a glob (text), got ''"),
        ("policy: {rules: [{action: deny, tool_args: 'rm -rf'}]}",
         "policy.rules[1].tool_args must be a mapping of tool argument name -> glob, {regex: ...}, {shell: ...} "
         "or {any: ...}, got 'rm -rf'"),
        ("policy: {rules: [{action: deny, tool: Bash, tool_args: {command: {shell: '-rf'}}}]}",
         "policy.rules[1].tool_args.command.shell must start with a program (e.g. 'rm -rf'), got '-rf'"),
        ("policy: {rules: [{action: deny, tool: Bash, tool_args: {command: {regex: '(('}}}]}",
         "policy.rules[1].tool_args.command.regex is not a valid regular expression (missing ), unterminated "
         "subpattern at position 1), got '(('"),
        ("policy: {rules: [{action: deny, tools: Bash}]}",
         f"policy.rules[1].tools is not a rule field (did you mean tool?); a rule has: {RULE_FIELDS}"),
        # budgets
        ("budgets: {daily_usd: 5}", f"budgets.daily_usd must be a mapping of budget fields ({BUDGET_FIELDS}), got 5"),
        ("budgets: [{scope: day}]", "budgets must be a mapping of budget names to their fields, got [{'scope': 'day'}]"),
        ("budgets: {daily: {scope: week, limit_usd: 5}}",
         "budgets.daily.scope must be session, day, month or team, got 'week'"),
        ("budgets: {t: {scope: team, period: week, limit_usd: 5}}", "budgets.t.period must be day or month, got 'week'"),
        ("budgets: {d: {scope: day, period: day, limit_usd: 5}}",
         "budgets.d.period must be set only with scope: team (day and month scopes are their own period), got 'day'"),
        ("team: {url: 'http://db:5432/x'}",
         "team.url must be a postgresql:// URL (null: no team), got 'a URL that is not postgresql://'"),
        ("team: {share: everything}", "team.share must be one of metadata, redacted, full, got 'everything'"),
        ("budgets: {daily: {limit_usd: 5}}", "budgets.daily.scope must be session, day, month or team, got None"),
        ("budgets: {daily: {scope: day, limit_usd: -5}}",
         "budgets.daily.limit_usd must be a number of US dollars >= 0, got -5"),
        ("budgets: {daily: {scope: day}}", "budgets.daily.limit_usd must be a number of US dollars >= 0, got None"),
        ("budgets: {daily: {scope: day, limit_usd: '5$'}}",
         "budgets.daily.limit_usd must be a number of US dollars >= 0, got '5$'"),
        ("budgets: {daily: {scope: day, limit_usd: 5, warn_at: 80}}",
         "budgets.daily.warn_at must be a fraction of the limit above 0 and at most 1 (null: never), got 80"),
        ("budgets: {daily: {scope: day, limit_usd: 5, on_unconfirmed: maybe}}",
         "budgets.daily.on_unconfirmed must be deny or allow, got 'maybe'"),
        ("budgets: {daily: {scope: day, limit_usd: 5, on_unpriced: count}}",
         "budgets.daily.on_unpriced must be deny or allow, got 'count'"),
        ("budgets: {daily: {scope: day, limit_usd: 5, reserve_output_tokens: 0}}",
         "budgets.daily.reserve_output_tokens must be a whole number of tokens >= 1 (null: the model's output "
         "ceiling), got 0"),
        ("budgets: {daily: {scope: day, limit_usd: 5, models: 'x*'}}",
         f"budgets.daily.models is not a budget field (did you mean model?); a budget has: {BUDGET_FIELDS}"),
        ("budgets: {daily: {scope: day, limit_usd: 5, host: 443}}", "budgets.daily.host must be a glob (text), got 443"),
        # credentials
        ("credentials: {anthropic: {host: api.anthropic.com, header: x-api-key}}",
         "credentials.anthropic must name one source of the real value: env (a variable of capsem's own "
         "environment) or file (readable only by you), got {'host': 'api.anthropic.com', 'header': 'x-api-key'}"),
        ("credentials: {a: {host: h, header: x-api-key, env: K, file: /k}}",
         "credentials.a must name one source of the real value: env (a variable of capsem's own "
         "environment) or file (readable only by you), got {'host': 'h', 'header': 'x-api-key', 'env': 'K', 'file': '/k'}"),
        ("credentials: {a: {host: h, env: K}}",
         "credentials.a must say where the key goes: header (x-api-key, authorization...) or query "
         "(a query parameter), one of them, got {'host': 'h', 'env': 'K'}"),
        ("credentials: {a: {header: x-api-key, env: K}}",
         "credentials.a.host must be a host glob (the only hosts the real value may go to), got None"),
        ("credentials: {a: {host: h, header: 'x api key', env: K}}",
         "credentials.a.header must be a header name or a list of them, got 'x api key'"),
        ("credentials: {a: {host: h, header: [x-api-key, 'bad name'], env: K}}",
         "credentials.a.header must be a header name or a list of them, got ['x-api-key', 'bad name']"),
        ("credentials: {a: {host: h, header: [], env: K}}",
         "credentials.a.header must be a header name or a list of them, got []"),
        ("credentials: {a: {host: h, header: x-api-key, env: 'MY-KEY'}}",
         "credentials.a.env must be an environment variable name, got 'MY-KEY'"),
        ("credentials: {a: {host: h, header: x-api-key, file: keys/a.key}}",
         "credentials.a.file must be an absolute path (or one starting with ~), got 'keys/a.key'"),
        ("credentials: {a: {host: h, header: x-api-key, env: K, placeholder: short}}",
         "credentials.a.placeholder must be 8 or more letters, digits, '_', '-' or '.', got 'short'"),
        ("credentials: {a: {host: h, header: x-api-key, env: K, agent_env: [OK, 'not ok']}}",
         "credentials.a.agent_env must be an environment variable name or a list of them, got ['OK', 'not ok']"),
        ("credentials: {a: {host: h, header: x-api-key, env: K, placeholder: same-mark},"
         " b: {host: h, header: x-api-key, env: K, placeholder: same-mark}}",
         "credentials.b.placeholder is the placeholder of credentials.a too"),
        ("credentials: {a: {host: h, header: x-api-key, env: K, secret: v}}",
         f"credentials.a.secret is not a credential field; a credential has: {CREDENTIAL_FIELDS}"),
        # diagnostics
        ("diagnostics: {sample_interval_ms: 5}",
         "diagnostics.sample_interval_ms must be a whole number of milliseconds >= 10, got 5"),
        ("diagnostics: {sample_interval_ms: often}",
         "diagnostics.sample_interval_ms must be a whole number of milliseconds >= 10, got 'often'"),
        ("diagnostics: {enabled: 'no'}", "diagnostics.enabled must be true or false, got 'no'"),
        # the file itself
        ("capture:\n  preview_bytes: 1\n   bad: [\n",
         "invalid YAML at line 3, column 7: mapping values are not allowed here"),
        ("capture: [\n", "invalid YAML at line 2, column 1: expected the node content, but found '<stream end>'"),
        ("- a\n- b\n", f"the top level must be a mapping of sections ({ALL_SECTIONS}), got ['a', 'b']"),
        ("just text", f"the top level must be a mapping of sections ({ALL_SECTIONS}), got 'just text'"),
        (b"capture: \xff\n", "not UTF-8 text (invalid start byte at byte 9)"),
    ],
)  # fmt: skip
def test_every_bad_value_is_one_line_naming_file_key_value_and_what_is_allowed(config, text, line):
    assert refusal(config, text) == line


def test_the_error_is_a_config_error_that_knows_its_file_and_key(config):
    config.write_text("capture:\n  preview_bytes: lots\n")
    with pytest.raises(ConfigError) as refused:  # the existing handlers (user_errors, the addon) catch it
        load()
    error = refused.value
    assert isinstance(error, SettingsError) and isinstance(error, ValueError)
    assert (error.origin, error.key) == (str(config), "capture.preview_bytes")
    assert str(error) == f"{config}: capture.preview_bytes must be a whole number of bytes, got 'lots'"


def test_a_long_bad_value_is_shortened_to_keep_the_line_readable(config):
    line = refusal(config, "headers: {allowlist: " + "x" * 500 + "}")
    assert len(line) < 200 and line.endswith("xxx...")


def test_defaults_are_default_yaml_typed():
    settings = load()
    assert settings == defaults()
    assert settings.files == (default_config_path(),)
    assert set(settings.origins.values()) == {"default"} and len(settings.origins) == len(SETTINGS)
    cap = settings.capture
    assert (cap.preview_bytes, cap.content_max_bytes, cap.max_parse_bytes, cap.max_body_bytes) == (
        65536, 1 << 20, 64 << 20, 64 << 20)  # fmt: skip
    assert (cap.commit_interval_ms, cap.max_pending_calls) == (250, 10000)
    assert {"content-type", "anthropic-version", "x-capsem-policy"} <= cap.header_allowlist
    assert "authorization" not in cap.header_allowlist and {"key", "api_key"} <= cap.query_params
    assert settings.policy.rules == () and settings.budgets.entries == () == settings.credentials.entries
    assert (settings.diagnostics.enabled, settings.diagnostics.sample_interval_ms) == (True, 1000)
    r = settings.retention
    assert (r.auto, r.vacuum_after_hours, r.retention_days, r.max_sessions, r.max_disk_gb, r.min_content_keep) == (
        True, 24, 30, 100, 10, 5)  # fmt: skip


def test_capture_settings_carry_every_field_the_recorder_reads():
    names = {f.name for f in fields(CaptureSettings)}
    assert names == {"preview_bytes", "content_max_bytes", "max_parse_bytes", "max_body_bytes", "commit_interval_ms",
                     "max_pending_calls", "header_allowlist", "query_params", "secret_rules",
                     "disabled_rules"}  # fmt: skip


def test_every_declared_key_has_its_default_in_default_yaml(tmp_path, monkeypatch):
    assert SECTIONS == (
        "capture",
        "headers",
        "redaction",
        "policy",
        "diagnostics",
        "retention",
        "budgets",
        "credentials",
        "export",
        "team",
    )
    short = tmp_path / "default.yaml"
    short.write_text(default_config_path().read_text().replace("  max_body_bytes: 67108864\n", ""))
    monkeypatch.setattr(settings_module, "default_config_path", lambda: short)
    with pytest.raises(SettingsError) as refused:
        load()
    assert (
        str(refused.value) == f"{short}: capture.max_body_bytes must be set here (the defaults of every key)"
    )


def test_the_users_file_overrides_key_by_key_and_origins_say_so(config):
    config.write_text(
        "capture:\n  preview_bytes: 1024\n"
        "headers:\n  allowlist: [Content-Type, X-Trace]\n"
        "policy:\n  rules:\n    - {name: no-paste, action: DENY, host: '*.pastebin.com'}\n"
        "    - {action: warn, mcp_server: files, mcp_tool: 'run_*', port: 8080}\n"
        "retention:\n  max_sessions: 0\n  retention_days: null\n  min_content_keep: 0\n"
    )
    settings = load()
    assert settings.files == (default_config_path(), config)
    assert settings.capture.preview_bytes == 1024
    assert settings.capture.content_max_bytes == 1 << 20  # its sibling keeps the default
    assert settings.capture.header_allowlist == {"content-type", "x-trace"}  # a list is replaced whole
    assert settings.policy.rules == (
        PolicyRule(name="no-paste", action="deny", host="*.pastebin.com"),
        PolicyRule(name="rule-2", action="warn", port=8080, mcp_server="files", mcp_tool="run_*"),
    )
    r = settings.retention
    assert (r.max_sessions, r.retention_days, r.min_content_keep, r.max_disk_gb) == (None, None, 0, 10)
    origins = settings.origins
    assert (
        origins["capture.preview_bytes"]
        == origins["policy.rules"]
        == origins["retention.max_sessions"]
        == str(config)
    )
    assert origins["capture.content_max_bytes"] == origins["diagnostics.enabled"] == "default"


def test_overrides_win_and_go_through_the_same_checks(config):
    config.write_text("capture:\n  preview_bytes: 1024\n")
    settings = load(overrides={"capture.preview_bytes": 10, "diagnostics.enabled": False})
    assert (settings.capture.preview_bytes, settings.diagnostics.enabled) == (10, False)
    assert settings.origins["capture.preview_bytes"] == OVERRIDE == "--set"
    assert settings.files == (default_config_path(), config)  # --set is no file
    with pytest.raises(SettingsError) as refused:
        load(overrides={"capture.preview_bytes": -5})
    assert str(refused.value) == "--set: capture.preview_bytes must be a whole number of bytes, got -5"
    with pytest.raises(SettingsError) as refused:
        load(overrides={"capture.previewbytes": 5})
    assert str(refused.value).startswith(
        "--set: capture.previewbytes is not a setting (did you mean preview_bytes?)"
    )


def test_an_explicit_file_replaces_the_users_and_an_empty_one_changes_nothing(config, tmp_path):
    config.write_text("capture: {preview_bytes: lots}")
    other = tmp_path / "team.yaml"
    other.write_text("# nothing yet\ncapture:\n")
    assert load(other) == defaults() and load(other).files == (default_config_path(), other)


def test_parse_checks_a_mapping_over_the_defaults():
    assert parse({"diagnostics": {"sample_interval_ms": 250}}).diagnostics.sample_interval_ms == 250
    assert parse({}) == parse({"policy": None}) == parse({"policy": {"rules": None}}) == defaults()
    with pytest.raises(SettingsError, match=r"^<settings>: policy\.rules\[1\]\.action must be"):
        parse({"policy": {"rules": [{"action": "block", "host": "x"}]}})


def test_as_dict_round_trips(config):
    config.write_text("policy:\n  rules: [{action: deny, host: x}]\nretention: {max_disk_gb: 0}\n")
    settings = load()
    assert parse(settings.as_dict()) == settings
    assert settings.as_dict()["policy"] == {
        "rules": [{"name": "rule-1", "action": "deny", "host": "x"}],
        "ask_timeout_s": 120,
    }
    config.write_text("capture: {preview_bytes: lots}")
    with pytest.raises(
        ConfigError, match=r"capture\.preview_bytes must be a whole number of bytes, got 'lots'"
    ):
        load()


def test_budgets_and_credentials_are_named_entries_replaced_whole(config, tmp_path):
    config.write_text(
        "budgets:\n"
        "  daily: {scope: Day, limit_usd: 20}\n"
        "  opus-month: {scope: month, limit_usd: 200.5, model: 'claude-opus-*', warn_at: 0.5, host: '*.anthropic.com'}\n"
        "  one-run: {scope: session, limit_usd: 0, provider: openai, warn_at: null, on_unconfirmed: allow,"
        " on_unpriced: allow, reserve_output_tokens: 4096}\n"
        "credentials:\n"
        "  anthropic: {host: api.anthropic.com, header: X-Api-Key, env: ANTHROPIC_API_KEY}\n"
        "  gemini: {host: '*.googleapis.com', query: key, file: ~/gemini.key, placeholder: capsem-gemini-x,"
        " agent_env: [GEMINI_API_KEY, GOOGLE_API_KEY]}\n"
    )
    settings = load()
    assert settings.budgets.entries == (
        Budget("daily", "day", 20.0),
        Budget("opus-month", "month", 200.5, 0.5, model="claude-opus-*", host="*.anthropic.com"),
        Budget(
            "one-run",
            "session",
            0.0,
            None,
            provider="openai",
            on_unconfirmed="allow",
            on_unpriced="allow",
            reserve_output_tokens=4096,
        ),
    )
    anthropic, gemini = settings.credentials.entries
    assert anthropic == Credential("anthropic", "api.anthropic.com", ("x-api-key",), None, "ANTHROPIC_API_KEY", None,
                                   "capsem-placeholder-anthropic", ("ANTHROPIC_API_KEY",))  # fmt: skip
    assert (gemini.query, gemini.file, gemini.placeholder, gemini.agent_env) == (
        "key", str(Path("~/gemini.key").expanduser()), "capsem-gemini-x", ("GEMINI_API_KEY", "GOOGLE_API_KEY"))  # fmt: skip
    assert settings.origins["budgets"] == settings.origins["credentials"] == str(config)
    assert parse(settings.as_dict()) == settings  # `capsem config show` prints what reads back the same
    assert settings.as_dict()["budgets"]["one-run"] == {"scope": "session", "limit_usd": 0.0, "warn_at": None,
                                                        "provider": "openai", "on_unconfirmed": "allow",
                                                        "on_unpriced": "allow", "reserve_output_tokens": 4096}  # fmt: skip
    assert load(overrides={"budgets": {"x": {"scope": "day", "limit_usd": 1}}}).budgets.entries == (
        Budget("x", "day", 1.0),)  # fmt: skip


def test_secret_rules_are_checked_and_carried_to_the_recorder(tmp_path):
    from addons.spec import capture_settings, spec_of
    from capsem.redact import scrubber_for

    config = tmp_path / "config.yaml"
    config.write_text("redaction: {rules: [{id: acme, regex: 'acme_([a-z]+', keywords: [acme_]}]}")
    with pytest.raises(SettingsError) as bad:
        load(config)
    assert str(bad.value).startswith(f"{config}: redaction.rules[1].regex does not compile: missing )")
    config.write_text("redaction: {rules: [{id: acme, regex: '\\b(acme_[a-z0-9]{16})', keywords: [acme_]}],"
                      " disabled_rules: [generic-api-key, slack-app-token]}")  # fmt: skip
    capture = load(config).capture
    spec = msgspec.msgpack.decode(msgspec.msgpack.encode(spec_of(capture, session_id="s", db_path="d",
                                  main_db_path="m", mode="run")), type=RecorderSpec)  # fmt: skip
    assert capture_settings(spec) == capture  # what the recorder process gets
    scrub = scrubber_for(capture_settings(spec)).scrub
    assert (
        scrub("key acme_0123456789abcdef here")
        == f"key [redacted {hash_value('acme_0123456789abcdef')}] here"
    )
    slack = "xapp-1-A0123ABC-1234567890-" + "a1b2c3d4e5f6" * 3
    assert scrub(slack) == slack  # switched off
