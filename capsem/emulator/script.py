"""What the emulated model says: deterministic answers seeded by the request.

`plan()` reads a request (already parsed JSON, protocol-neutral bits passed in) and the
controls, and decides: text, thinking, tool calls with arguments built from the declared
tools' JSON schemas, and token counts. The same request always gives the same plan. Scenario
`agent` (what `capsem run --emulator` selects) leaves the answer to `agent.py`: a sensible call
of the agent's own tool, then a final text; every scenario honours a request's demand for JSON
and its `tool_choice` (`Ask`).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from capsem.emulator.agent import NO_ASK, Ask, Tool, destructive, final_text, json_answer, pick
from capsem.emulator.agent import arguments as _arguments_of

SENTENCES = [
    "Here is what I found.",
    "The file says ünïcode is fine — naïve café.",
    "Paris is 18°C 🌤️ today.",
    'He said "done" and left.',
    "Paths look like C:\\temp\\logs here.",
    "Emoji check: 🎉🚀 all good.",
    "Nothing else to report.",
]
# Every generated text holds this one: multibyte UTF-8, an emoji, a quote and a backslash.
ANCHOR = 'Naïve café says "ok" 🎉 at C:\\work\\out.'


@dataclass
class ToolPlan:
    call_id: str
    name: str
    arguments: str
    """Exact JSON text of the arguments (the input text of a freeform tool)."""
    freeform: bool = False
    """A custom tool's call (OpenAI Responses `custom_tool_call`)."""


@dataclass
class Plan:
    kind: str
    """text | tool_call"""
    text: str = ""
    thinking: str = ""
    redacted_thinking: bool = False
    tools: list[ToolPlan] = field(default_factory=list)
    input_tokens: int = 0
    """Uncached input (Anthropic meaning); cache numbers are separate."""
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    reasoning: int = 0


def rng_for(body: bytes) -> random.Random:
    return random.Random(hashlib.sha256(body).digest())


def seed_of(body: bytes, controls: dict[str, str], asked: Any) -> bytes:
    """What an answer's randomness (ids, stream splits, fuzz) is drawn from: the `seed` control;
    under scenario `agent`, what the request asks (`asked`: model, conversation, tools), so that a
    real agent's per-run noise (session ids in metadata) does not change the answer; else the body."""
    if "seed" in controls:
        return controls["seed"].encode()
    if controls.get("scenario") == "agent":
        return json.dumps(asked, sort_keys=True, ensure_ascii=False, default=str).encode()
    return body


def ident(rng: random.Random, prefix: str, length: int, alphabet: str | None = None) -> str:
    alphabet = alphabet or "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(rng.choice(alphabet) for _ in range(length))


def _value(rng: random.Random, name: str, schema: Any, i: int) -> Any:
    """A value for a tool argument: one of the schema's `enum` or `examples` (as a model would
    pick), else a made-up one whose strings carry unicode, quotes and a backslash."""
    if isinstance(schema, dict) and isinstance(schema.get("enum") or schema.get("examples"), list):
        return rng.choice(schema.get("enum") or schema["examples"])
    kind = schema.get("type") if isinstance(schema, dict) else "string"
    if kind in ("integer", "number"):
        return rng.randint(1, 50)
    if kind == "boolean":
        return True
    if kind == "array":
        return [_value(rng, name, schema.get("items", {}), i)]
    if kind == "object":
        return {}
    return f'{name} ünï "q{i}" \\ 🎉'


def arguments_for(rng: random.Random, schema: Any, i: int) -> str:
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    args = {name: _value(rng, name, sub, i) for name, sub in props.items()} if props else {}
    return json.dumps(args, ensure_ascii=bool(i % 2))  # odd calls use \\uXXXX escapes, even ones raw UTF-8


def plan(
    *,
    body: bytes,
    controls: dict[str, str],
    declared: list[tuple[str, Any]] | list[Tool],
    has_results: bool,
    result_texts: list[str],
    prompt_chars: int,
    call_prefix: str,
    call_len: int,
    ask: Ask = NO_ASK,
) -> Plan:
    """Decide the answer. `declared` = the tools ((name, JSON schema) or `Tool`) in request order;
    `ask`: the JSON or tool call the request demands.

    The `seed` control replaces the body as the source of randomness, so that a streamed and a
    non-streamed request (whose bodies differ) get the same answer."""
    rng = rng_for(controls["seed"].encode() if "seed" in controls else body)
    scenario = controls.get("scenario", "auto")
    tools = [d if isinstance(d, Tool) else Tool(d[0], d[1]) for d in declared]
    if scenario in ("agent", "destroy"):
        p = _agent_plan(rng, tools, ask, controls, has_results, result_texts, call_prefix, call_len)
        return _counted(p, controls, prompt_chars)
    forced = [t for t in tools if t.name == ask.forced]
    if forced:  # the forced tool first
        tools = forced + [t for t in tools if t.name != ask.forced]
    declared = [(t.name, t.schema) for t in tools if not t.freeform]  # fuzz: JSON arguments only
    want_tools = scenario == "tool_call" or (
        scenario in ("auto", "thinking")
        and declared
        and ask.tool_choice != "none"
        and (not has_results or ask.tool_choice == "forced")
    )
    p = Plan(kind="tool_call" if want_tools and declared else "text")
    if "text" in controls:  # `repeat=N`: the text N times (a long answer without a long header)
        p.text = controls["text"] * max(1, int(controls.get("repeat", "1") or 1))
    elif p.kind == "text" and ask.json:
        p.text = json_answer(ask)
    elif p.kind == "text":
        chosen = [rng.choice(SENTENCES) for _ in range(rng.randint(1, 3))]
        chosen.insert(rng.randint(0, len(chosen)), ANCHOR)
        p.text = " ".join(chosen)
        if has_results:
            p.text = "Based on the tool results: " + "; ".join(r[:40] for r in result_texts) + ". " + p.text
    elif rng.random() < 0.5:
        p.text = "Let me check that."
    if scenario == "thinking":
        p.thinking = 'First, consider the question. Then ünïcode 🎉 and "quotes". Conclude.'
    p.redacted_thinking = controls.get("redacted_thinking") == "1"
    if p.kind == "tool_call":
        count = int(controls.get("tools", "1"))
        for i in range(count):
            name, schema = declared[i % len(declared)]
            p.tools.append(ToolPlan(ident(rng, call_prefix, call_len), name, arguments_for(rng, schema, i)))
    return _counted(p, controls, prompt_chars)


def _agent_plan(rng: random.Random, tools: list[Tool], ask: Ask, controls: dict[str, str], has_results: bool,
                result_texts: list[str], call_prefix: str, call_len: int) -> Plan:  # fmt: skip
    """Scenario `agent`: one sensible call of a declared tool, then (its result in) a final text."""
    chosen = None if has_results else pick(tools, ask)
    doomed = destructive(tools) if controls.get("scenario") == "destroy" and chosen is not None else None
    if doomed is not None:  # the shell tool told to destroy (after a harmless call with `tools=2`)
        shell, arguments = doomed
        harmless = _arguments_of(shell)
        calls = [ToolPlan(ident(rng, call_prefix, call_len), shell.name, arguments, shell.freeform)]
        if controls.get("tools") == "2":
            calls.insert(0, ToolPlan(ident(rng, call_prefix, call_len), shell.name, harmless, shell.freeform))
        return Plan(kind="tool_call", tools=calls)
    if chosen is not None:
        tool, arguments = chosen
        return Plan(kind="tool_call", tools=[ToolPlan(ident(rng, call_prefix, call_len), tool.name, arguments,
                                                      tool.freeform)])  # fmt: skip
    if ask.json:
        return Plan(kind="text", text=json_answer(ask))
    return Plan(kind="text", text=final_text(result_texts, controls.get("text")))


def _counted(p: Plan, controls: dict[str, str], prompt_chars: int) -> Plan:
    """The plan with its cache, reasoning and token numbers."""
    p.cache_read = int(controls.get("cache_read", 0))
    # cache_write is the total written; cache_write_1h the part of it with the 1h TTL
    p.cache_write_1h = int(controls.get("cache_write_1h", 0))
    p.cache_write = max(int(controls.get("cache_write", 0)), p.cache_write_1h)
    p.reasoning = int(controls.get("reasoning", 0))
    p.input_tokens = max(1, prompt_chars // 4)
    produced = len(p.text) + len(p.thinking) + sum(len(t.arguments) + len(t.name) for t in p.tools)
    p.output_tokens = max(1, produced // 4) + p.reasoning
    return p


def fragments(rng: random.Random, text: str, *, min_len: int = 1, max_len: int = 6) -> list[str]:
    """Split `text` into pieces at awkward places (right after backslashes, inside escapes)."""
    out, i = [], 0
    while i < len(text):
        step = rng.randint(min_len, max_len)
        j = min(len(text), i + step)
        k = text.find("\\", i, j)
        if k != -1 and rng.random() < 0.7:
            j = k + 1  # cut right after a backslash
        out.append(text[i:j])
        i = j
    return out
