"""Answers a real agent can act on: the `agent` scenario, which `capsem run --emulator` selects.

The default scenario (`auto`) fuzzes: tool arguments full of unicode, quotes and backslashes that
exercise capsem's decoders, but that no real tool accepts. Under `agent`, the emulator answers as a
model doing a small real task would:

1. a request that declares tools and carries no tool result yet gets one call of the agent's own
   shell tool (`Bash`, `shell`, `run_shell_command`, `exec_command`…) running `COMMAND`, which
   prints a greeting and writes it to `FILE` in the agent's working directory; an agent without
   one gets its write tool (`Write`, `write_file`…), a freeform `apply_patch`, Codex's code-mode
   `exec`, or else its first tool, with arguments that match the tool's JSON schema (required
   properties, types, enums, bounds);
2. once the request carries that tool's result, a final text;
   scenario `destroy` is the same with a destructive command (`DESTROY`: `rm -rf` of `DOOMED` in
   the agent's working directory) through the same shell tool, to try tool rules on; with the
   control `tools=2` it asks for the harmless `COMMAND` and the destructive one in parallel;
3. a request that asks for JSON (a response schema, `json_object`) gets JSON that matches the
   schema; a request that forces a tool (`tool_choice`) gets a call of that tool.

The answer depends only on what the request asks (the conversation, the tools, the model), never
on per-run noise such as session ids in metadata, so the same prompt gets the same answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

GREETING = "hello from capsem"
FILE = "capsem-hello.txt"
COMMAND = f"echo '{GREETING}' | tee {FILE}"
"""Harmless, and leaves a file to show for it."""
PATCH = f"*** Begin Patch\n*** Add File: {FILE}\n+{GREETING}\n*** End Patch\n"
CODE_MODE = f"const r = await tools.exec_command({{cmd: {json.dumps(COMMAND)}}});\ntext(r.output);\n"
"""Codex's code mode: its one `exec` tool runs JavaScript that calls the nested tools."""
DEFAULT_TEXT = "Done: capsem's emulator answered (no model was called)."
DOOMED = "capsem-doomed.txt"
DESTROY = f"rm -rf {DOOMED}"
"""Scenario `destroy`: what a tool rule should stop (a file the test puts in the workspace)."""


def destructive(tools: list[Tool]) -> tuple[Tool, str] | None:
    """The shell tool (or Codex's code-mode `exec`) and the arguments of a call running `DESTROY`
    (None: the agent has neither)."""
    tool = _shell_tool(tools) or _code_mode_tool(tools)
    if tool is None:
        return None
    text = _arguments(tool).replace(json.dumps(COMMAND)[1:-1], json.dumps(DESTROY)[1:-1])
    return tool, text.replace(f"Write a greeting to {FILE}", f"Remove {DOOMED}")


@dataclass(frozen=True)
class Tool:
    """A tool the request declares."""

    name: str
    schema: Any = None
    """JSON schema of its arguments (None: none given)."""
    freeform: bool = False
    """A custom tool (OpenAI Responses `type: custom`): its input is text, not JSON arguments."""
    description: str = ""


@dataclass(frozen=True)
class Ask:
    """What the request demands of the answer's form, beyond its content."""

    json: bool = False
    """A JSON answer is asked for (a response schema, `json_object`, `responseMimeType`)."""
    schema: Any = None
    """The JSON schema the answer must match (None: any JSON object)."""
    tool_choice: str = "auto"
    """`auto`, `none` (no tool call), `required` (some tool) or `forced` (the tool `forced`)."""
    forced: str | None = None


NO_ASK = Ask()

_SHELL = re.compile(r"bash|shell|exec_command|run_command|execute_command|terminal|^exec$", re.I)
_WRITE = re.compile(r"^(write|write_?file|create_?file|file_?write|save_?file)$", re.I)
_COMMAND_KEYS = ("command", "cmd", "script", "commands")
_PATH_KEYS = ("file_path", "path", "filepath", "filename", "file", "target_file", "absolute_path")
_CONTENT_KEYS = ("content", "contents", "text", "file_text", "data", "body")


def pick(tools: list[Tool], ask: Ask = NO_ASK) -> tuple[Tool, str] | None:
    """The tool to call and its arguments (JSON text, or the input of a freeform tool); None when
    the answer should be text."""
    if ask.tool_choice == "none" or not tools:
        return None
    if ask.tool_choice == "forced":
        forced = next((t for t in tools if t.name == ask.forced), None)
        return (forced, _arguments(forced)) if forced is not None else None
    for choose in (_shell_tool, _write_tool, _patch_tool, _code_mode_tool):
        found = choose(tools)
        if found is not None:
            return found, _arguments(found)
    return tools[0], _arguments(tools[0])


def _props(tool: Tool) -> dict[str, Any]:
    props = tool.schema.get("properties") if isinstance(tool.schema, dict) else None
    return props if isinstance(props, dict) else {}


def _key(tool: Tool, keys: tuple[str, ...]) -> str | None:
    props = {name.lower(): name for name in _props(tool)}
    return next((props[k] for k in keys if k in props), None)


def _shell_tool(tools: list[Tool]) -> Tool | None:
    return next(
        (t for t in tools if not t.freeform and _SHELL.search(t.name) and _key(t, _COMMAND_KEYS)), None
    )


def _write_tool(tools: list[Tool]) -> Tool | None:
    return next((t for t in tools if not t.freeform and _WRITE.match(t.name) and _key(t, _PATH_KEYS)), None)


def _patch_tool(tools: list[Tool]) -> Tool | None:
    return next((t for t in tools if t.freeform and t.name == "apply_patch"), None)


def _code_mode_tool(tools: list[Tool]) -> Tool | None:
    return next((t for t in tools if t.freeform and "tools.exec_command" in t.description), None)


def arguments(tool: Tool) -> str:
    """The arguments the `agent` scenario gives a call of `tool` (JSON text, or a freeform input)."""
    return _arguments(tool)


def _arguments(tool: Tool) -> str:
    if tool.freeform:
        return (
            PATCH
            if tool.name == "apply_patch"
            else CODE_MODE
            if "tools.exec_command" in tool.description
            else GREETING
        )
    schema = tool.schema if isinstance(tool.schema, dict) else {"type": "object"}
    args = value(schema, root=schema)
    if not isinstance(args, dict):
        args = {}
    return json.dumps(args, ensure_ascii=False)


def json_answer(ask: Ask) -> str:
    """The text of a JSON answer: a value of the asked schema, or an object when none is given."""
    if isinstance(ask.schema, dict) and ask.schema:
        return json.dumps(value(ask.schema, root=ask.schema), ensure_ascii=False)
    return json.dumps({"answer": GREETING})


def final_text(results: list[str], text: str | None) -> str:
    """The answer once the tool results are in (or to a request without tools)."""
    said = text or DEFAULT_TEXT
    if not results:
        return said
    got = _plain(results[0])
    if GREETING in got:
        return f"Done: the command printed {GREETING!r} and wrote {FILE}. {said}"
    got = " ".join(got.split())
    return f"The tool returned: {got if len(got) <= 60 else got[:59] + '…'}. {said}"


def _plain(result: str) -> str:
    """A tool result's text: Gemini sends `{"output": …}`, Codex a list of `input_text` items."""
    try:
        obj = json.loads(result)
    except ValueError:
        return result
    if isinstance(obj, dict):
        obj = obj.get("output", obj.get("content", obj))
    if isinstance(obj, list):
        obj = " ".join(i.get("text", "") if isinstance(i, dict) else str(i) for i in obj)
    return obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)


# --- a value for a JSON schema, as a model would fill it in ----------------------------------------


def value(schema: Any, name: str = "", root: Any = None, depth: int = 0) -> Any:
    """A plausible value matching `schema`: const, then the first enum value, then the default;
    objects with their required properties (all of them when none are marked required), one-item
    arrays, numbers within bounds; strings chosen by the property's name (a path gets `FILE`,
    a command `COMMAND`)."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > 8:
        return _string(name, {})
    for combined in ("anyOf", "oneOf"):
        options = [o for o in schema.get(combined) or [] if _type(_resolve(o, root)) != "null"]
        if options:
            return value(options[0], name, root, depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            part = _resolve(part, root)
            if isinstance(part, dict):
                merged.setdefault("properties", {}).update(part.get("properties") or {})
                merged["required"] = [*merged.get("required", []), *(part.get("required") or [])]
                merged.setdefault("type", part.get("type"))
        return value(merged, name, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    kind = _type(schema)
    if kind == "object" or (kind is None and "properties" in schema):
        return _object(schema, root, depth)
    if kind == "array":
        count = max(1, int(schema.get("minItems") or 1))
        return [value(schema.get("items", {}), name, root, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        n = 1 if low is None else low + (1 if "minimum" not in schema else 0)
        high = schema.get("maximum")
        n = min(n, high) if high is not None else n
        return int(n) if kind == "integer" else n
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _string(name, schema)


def _object(schema: dict[str, Any], root: Any, depth: int) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required")
    names = [n for n in required if n in props] if isinstance(required, list) else list(props)
    if isinstance(required, list):  # a described shell tool says what it does (Claude's Bash, Gemini's)
        names += [n for n in ("description",) if n in props and n not in names and _key_is_command(props)]
        names += [n for n in required if n not in props]
    return {n: value(props.get(n, {"type": "string"}), n, root, depth + 1) for n in names}


def _key_is_command(props: dict[str, Any]) -> bool:
    return any(k in props for k in _COMMAND_KEYS)


def _string(name: str, schema: dict[str, Any]) -> Any:
    key = name.lower()
    if key in _COMMAND_KEYS:
        text = COMMAND
    elif key in _PATH_KEYS:
        text = FILE
    elif key in _CONTENT_KEYS:
        text = GREETING + "\n"
    elif key == "description":
        text = f"Write a greeting to {FILE}"
    elif schema.get("format") == "date-time":
        text = "2025-01-01T00:00:00Z"
    elif schema.get("format") == "date":
        text = "2025-01-01"
    elif schema.get("format") in ("uri", "url"):
        text = "https://example.com/"
    else:
        text = GREETING
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        text = text.ljust(low, ".")
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    return text


def _type(schema: Any) -> str | None:
    """The schema's type, lower-cased (Gemini writes `OBJECT`), the first non-null one of a list."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), None)
    return str(kind).lower() if kind else None


def _resolve(schema: Any, root: Any) -> Any:
    """Follow a local `$ref` (`#/$defs/X`, `#/definitions/X`)."""
    for _ in range(8):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not (isinstance(ref, str) and ref.startswith("#/") and isinstance(root, dict)):
            return schema
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        schema = target if isinstance(target, dict) else {}
    return schema
