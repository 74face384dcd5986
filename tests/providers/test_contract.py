"""Every provider parser keeps the contract of `tests/providers/contract.py`."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addons.providers._common import as_int
from tests.providers import test_anthropic, test_openai_chat, test_openai_responses
from tests.providers.contract import Contract, same_answer, split_everywhere

CONTRACTS: dict[str, Contract] = {
    "anthropic": test_anthropic.CONTRACT,
    "openai_chat": test_openai_chat.CONTRACT,
    "openai_responses": test_openai_responses.CONTRACT,
}
STREAMS = [(p, name) for p, c in CONTRACTS.items() for name in sorted(c.streams)]
BODIES = [(p, name) for p, c in CONTRACTS.items() for name in sorted(c.bodies)]
PAIRS = [(p, s, b) for p, c in CONTRACTS.items() for s, b in c.pairs]


@pytest.mark.parametrize(("provider", "name"), STREAMS)
def test_a_stream_parses_the_same_split_anywhere_and_compressed(provider: str, name: str) -> None:
    split_everywhere(CONTRACTS[provider], name)


@pytest.mark.parametrize(("provider", "name"), BODIES)
def test_a_whole_body_parses_to_its_summary(provider: str, name: str) -> None:
    contract = CONTRACTS[provider]
    assert contract.parser.read_response(contract.fixture(name), 200) == contract.bodies[name]
    assert contract.read([contract.fixture(name)], framing=None) == contract.bodies[name]


@pytest.mark.parametrize(("provider", "stream", "body"), PAIRS)
def test_a_stream_and_the_same_answer_whole_agree(provider: str, stream: str, body: str) -> None:
    contract = CONTRACTS[provider]
    streamed = contract.read([contract.fixture(stream)])
    whole = contract.parser.read_response(contract.fixture(body), 200)
    assert same_answer(streamed, whole)[0] == same_answer(streamed, whole)[1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(provider=st.sampled_from(sorted(CONTRACTS)), data=st.binary(max_size=300), size=st.integers(1, 50))
def test_random_bytes_after_a_real_stream_never_raise_unguarded(
    provider: str, data: bytes, size: int
) -> None:
    contract = CONTRACTS[provider]
    body = contract.fixture(contract.fuzz_prefix)[:300] + data
    contract.read([body[i : i + size] for i in range(0, len(body), size)], guarded=False)


@pytest.mark.parametrize(
    ("value", "count"),
    [(7, 7), (7.0, 7), (" 12 ", 12), ("-3", -3), (True, None), (7.5, None), ("²", None), ("١٢", None),
     ("--5", None), ("5-", None), ("", None), (None, None), (float("inf"), None), (float("nan"), None)],
)  # fmt: skip
def test_a_count_is_read_from_ascii_digits_only(value, count):
    """What a stream says a count or an index is: a superscript or an Arabic-Indic digit, which
    `str.isdigit` accepts and `int` refuses or reads, is no count (a fuzzed `"content_index": "²"`
    made the OpenAI Responses reader raise)."""
    assert as_int(value) == count
