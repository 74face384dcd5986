"""Brokered credentials (pure): the placeholders of a request and what is done with each; reading
the real values at start; the agent's environment under `capsem run --broker`.

(The hooks applying a plan are in tests/addons/proxy/test_guard.py; real SDKs in tests/e2e.)"""

from __future__ import annotations

import pytest

from addons.messages import Substitution
from addons.proxy.credentials import Broker, Brokered, broker_env, load_secrets
from capsem.settings import Credential, SettingsError, parse

ANTHROPIC_KEY = "sk-ant-api03-REALanthropicKEY000000000000"
OPENAI_KEY = "sk-proj-REALopenaiKEY/with+odd=chars"
GEMINI_KEY = "AIzaREALgeminiKEY00000000000000000000"


def entry(
    name: str, host: str, *, header: str | tuple[str, ...] | None = None, query: str | None = None
) -> Credential:
    headers = (header,) if isinstance(header, str) else header
    return Credential(name=name, host=host, header=headers, query=query, env=name.upper() + "_KEY", file=None,
                      placeholder=f"capsem-placeholder-{name}", agent_env=(name.upper() + "_API_KEY",))  # fmt: skip


@pytest.fixture
def broker() -> Broker:
    return Broker([
        Brokered(entry("anthropic", "api.anthropic.com", header="x-api-key"), ANTHROPIC_KEY),
        Brokered(entry("openai", "*.openai.com", header="authorization"), OPENAI_KEY),
        Brokered(entry("gemini", "generativelanguage.googleapis.com", query="key"), GEMINI_KEY),
    ])  # fmt: skip


def plan(
    broker: Broker, host: str, headers=(), *, query: str = "", path: str = "/v1/x", scheme: str = "https"
):
    return broker.plan(scheme=scheme, host=host, path=path, query=query, headers=list(headers))


def test_the_placeholder_is_replaced_where_the_key_goes_on_its_own_host(broker):
    done = plan(
        broker, "api.anthropic.com", [("X-Api-Key", "capsem-placeholder-anthropic"), ("accept", "*/*")]
    )
    assert done.headers == {"x-api-key": [ANTHROPIC_KEY]} and done.query is None
    assert done.events == (Substitution("anthropic", "header x-api-key", "substituted"),)
    bearer = plan(broker, "API.OpenAI.com", [("authorization", "Bearer capsem-placeholder-openai")])
    assert bearer.headers == {"authorization": [f"Bearer {OPENAI_KEY}"]}  # the scheme word stays
    keyed = plan(
        broker, "generativelanguage.googleapis.com", query="alt=sse&key=capsem-placeholder-gemini&x=%20"
    )
    assert keyed.query == f"alt=sse&key={GEMINI_KEY}&x=%20" and keyed.headers == {}  # the rest byte for byte
    assert keyed.events == (Substitution("gemini", "query key", "substituted"),)
    odd = plan(broker, "api.openai.com", query="token=capsem-placeholder-openai")
    assert odd.events[0].outcome == "refused"  # the openai key goes in a header, not the query


def test_a_placeholder_anywhere_else_is_never_replaced_and_is_recorded_refused(broker):
    stolen = plan(broker, "evil.example", [("x-api-key", "capsem-placeholder-anthropic")],
                  query="k=capsem-placeholder-gemini", path="/upload/capsem-placeholder-openai")  # fmt: skip
    assert stolen.headers == {} and stolen.query is None  # everything goes on unchanged
    assert stolen.events == (
        Substitution("anthropic", "header x-api-key", "refused",
                     "evil.example is not a host of this credential (api.anthropic.com)"),
        Substitution("gemini", "query k", "refused",
                     "evil.example is not a host of this credential (generativelanguage.googleapis.com)"),
        Substitution("openai", "path", "refused", "evil.example is not a host of this credential (*.openai.com)"),
    )  # fmt: skip
    wrong_header = plan(broker, "api.anthropic.com", [("x-goog-api-key", "capsem-placeholder-anthropic")])
    assert wrong_header.headers == {} and wrong_header.events[0].reason == (
        "the key goes in header authorization or header x-api-key, not in header x-goog-api-key"
    )
    clear = plan(broker, "api.anthropic.com", [("x-api-key", "capsem-placeholder-anthropic")], scheme="http")
    assert clear.headers == {} and "plain http" in clear.events[0].reason
    other = plan(broker, "api.openai.com", [("x-api-key", "capsem-placeholder-anthropic")])
    assert other.events[0].reason == "api.openai.com is not a host of this credential (api.anthropic.com)"


def test_plain_http_is_fine_to_a_loopback_host():
    local = Broker([Brokered(entry("local", "127.0.0.1", header="x-api-key"), "local-secret-value")])
    done = plan(local, "127.0.0.1", [("x-api-key", "capsem-placeholder-local")], scheme="http")
    assert done.headers == {"x-api-key": ["local-secret-value"]}


def test_only_whole_placeholders_count_and_requests_without_any_are_left_alone(broker):
    assert plan(broker, "api.anthropic.com", [("x-api-key", "sk-ant-the-agents-own-key")]) is None
    assert plan(broker, "api.anthropic.com", [("x-api-key", "capsem-placeholder-anthropic2")]) is None
    assert plan(broker, "api.anthropic.com", [("x-api-key", "my-capsem-placeholder-anthropic")]) is None
    assert Broker().plan(scheme="https", host="h", path="/", query="", headers=[("a", "b")]) is None


def test_repeated_headers_keep_their_order_and_count(broker):
    sent = [("authorization", "Basic x"), ("Authorization", "Bearer capsem-placeholder-openai")]
    done = plan(broker, "api.openai.com", sent)
    assert done.headers == {"authorization": ["Basic x", f"Bearer {OPENAI_KEY}"]}


def test_the_scrubber_learns_every_form_of_the_real_values(broker):
    assert {ANTHROPIC_KEY, OPENAI_KEY, "sk-proj-REALopenaiKEY%2Fwith%2Bodd%3Dchars"} <= set(broker.secrets)
    assert repr(broker.brokered[0]) == "Brokered('anthropic')"  # never the value


CONFIG = {
    "credentials": {"anthropic": {"host": "api.anthropic.com", "header": "x-api-key", "env": "TEST_REAL_KEY"}}
}


def test_real_values_are_read_from_capsems_environment_at_start(monkeypatch):
    monkeypatch.setenv("TEST_REAL_KEY", f"  {ANTHROPIC_KEY}\n")
    (loaded,) = load_secrets(parse(CONFIG, "config.yaml"))
    assert loaded.secret == ANTHROPIC_KEY and loaded.entry.agent_env == ("TEST_REAL_KEY",)
    monkeypatch.delenv("TEST_REAL_KEY")
    with pytest.raises(SettingsError) as missing:
        load_secrets(parse(CONFIG, "config.yaml"))
    assert str(missing.value) == (
        "config.yaml: credentials.anthropic.env names TEST_REAL_KEY, which is not set (or empty) in capsem's environment"
    )
    monkeypatch.setenv("TEST_REAL_KEY", "xx capsem-placeholder-anthropic")
    with pytest.raises(SettingsError, match=r"credentials\.anthropic\.placeholder occurs in the real value"):
        load_secrets(parse(CONFIG, "config.yaml"))


def test_a_key_file_must_exist_hold_a_value_and_be_readable_only_by_its_owner(tmp_path):
    key = tmp_path / "anthropic.key"
    config = {"credentials": {"a": {"host": "api.anthropic.com", "header": "x-api-key", "file": str(key)}}}
    settings = parse(config, "config.yaml")

    def refused() -> str:
        with pytest.raises(SettingsError) as error:
            load_secrets(settings)
        return str(error.value)

    assert refused() == f"config.yaml: credentials.a.file {key} does not exist"
    key.write_text(ANTHROPIC_KEY + "\n")
    key.chmod(0o644)
    assert (
        refused()
        == f"config.yaml: credentials.a.file {key} must be readable only by you (it is 644; chmod 600 {key})"
    )
    key.chmod(0o600)
    assert load_secrets(settings)[0].secret == ANTHROPIC_KEY
    key.write_text("\n")
    assert refused() == f"config.yaml: credentials.a.file {key} is empty"


def test_the_agent_gets_placeholders_and_no_variable_holding_a_real_value(broker):
    env = {"PATH": "/bin", "ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OLD_COPY": f"x={ANTHROPIC_KEY}",
           "GEMINI_API_KEY": GEMINI_KEY, "HOME": "/home/me"}  # fmt: skip
    out, removed = broker_env(env, broker.brokered)
    assert out == {"PATH": "/bin", "HOME": "/home/me", "ANTHROPIC_API_KEY": "capsem-placeholder-anthropic",
                   "OPENAI_API_KEY": "capsem-placeholder-openai", "GEMINI_API_KEY": "capsem-placeholder-gemini"}  # fmt: skip
    assert removed == ["OLD_COPY"]


def test_a_known_provider_takes_its_key_wherever_that_provider_accepts_it(broker):
    """Issue 25, point 3. As seen: anthropic 2.14 sends `Authorization: Bearer …`; an entry written as
    the README showed (`header: x-api-key`) refused every call's placeholder. Anthropic now takes
    x-api-key or Authorization, Gemini x-goog-api-key or ?key=, OpenAI only Authorization; never
    anywhere else, and never to another host."""
    bearer = plan(broker, "api.anthropic.com", [("authorization", "Bearer capsem-placeholder-anthropic")])
    assert bearer.headers == {"authorization": [f"Bearer {ANTHROPIC_KEY}"]}
    assert bearer.events == (Substitution("anthropic", "header authorization", "substituted"),)
    goog = plan(
        broker, "generativelanguage.googleapis.com", [("x-goog-api-key", "capsem-placeholder-gemini")]
    )
    assert goog.headers == {"x-goog-api-key": [GEMINI_KEY]}
    for host, headers, query in [
        ("api.anthropic.com", [], "key=capsem-placeholder-anthropic"),  # not a place Anthropic reads
        ("api.anthropic.com", [("x-goog-api-key", "capsem-placeholder-anthropic")], ""),
        ("generativelanguage.googleapis.com", [("authorization", "Bearer capsem-placeholder-gemini")], ""),
        ("api.openai.com", [("x-api-key", "capsem-placeholder-openai")], ""),  # OpenAI: Authorization only
        ("evil.example", [("authorization", "Bearer capsem-placeholder-anthropic")], ""),
    ]:
        done = plan(broker, host, headers, query=query)
        assert done.headers == {} and done.query is None and done.events[0].outcome == "refused", host
    custom = Broker([Brokered(entry("corp", "llm.corp.example", header="x-api-key"), "corp-secret-value")])
    assert (
        plan(custom, "llm.corp.example", [("authorization", "Bearer capsem-placeholder-corp")]).headers == {}
    )


def test_a_gateway_entry_takes_its_key_in_each_header_it_names():
    """Issue 35, item 10: an Anthropic- or OpenAI-compatible gateway on another host gets the key in
    `x-api-key` from one SDK and in `Authorization: Bearer` from another: `header:` may list both.
    Only those headers, only that host."""
    gateway = entry("gateway", "llm.gateway.example", header=("x-api-key", "authorization"))
    broker = Broker([Brokered(gateway, "gateway-secret-value")])
    keyed = plan(broker, "llm.gateway.example", [("x-api-key", "capsem-placeholder-gateway")])
    assert keyed.headers == {"x-api-key": ["gateway-secret-value"]}
    bearer = plan(broker, "llm.gateway.example", [("Authorization", "Bearer capsem-placeholder-gateway")])
    assert bearer.headers == {"authorization": ["Bearer gateway-secret-value"]}
    assert bearer.events == (Substitution("gateway", "header authorization", "substituted"),)
    for host, headers in [("llm.gateway.example", [("x-goog-api-key", "capsem-placeholder-gateway")]),
                          ("evil.example", [("x-api-key", "capsem-placeholder-gateway")])]:  # fmt: skip
        done = plan(broker, host, headers)
        assert done.headers == {} and done.events[0].outcome == "refused", host
    refused = plan(broker, "llm.gateway.example", [("x-goog-api-key", "capsem-placeholder-gateway")])
    assert (
        refused.events[0].reason
        == "the key goes in header authorization or header x-api-key, not in header x-goog-api-key"
    )
