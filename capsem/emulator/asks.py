"""What a request demands of its answer's form, read per API: a JSON answer (and its schema), or
a tool call (`tool_choice`); and the tools it declares, custom (freeform) ones included.

Real agents depend on these: Gemini CLI's routing classifier and next-speaker check ask for JSON
with `responseJsonSchema` and retry (for minutes) when they get prose; Claude Code and SDK apps
force a tool for structured output. `script.plan` honours what is found here in every scenario.
"""

from __future__ import annotations

from typing import Any

from capsem.emulator.agent import NO_ASK, Ask, Tool


def _json_format(fmt: Any, schema_key: str = "schema") -> Ask | None:
    """A `{type: json_schema, schema}` / `{type: json_object}` format object."""
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else fmt
        return Ask(json=True, schema=inner.get(schema_key))
    if fmt.get("type") == "json_object":
        return Ask(json=True)
    return None


def anthropic(req: dict[str, Any]) -> Ask:
    """`tool_choice` (`tool` forces one, `any` requires one, `none`), structured outputs
    (`output_format`, or `output_config.format`)."""
    config = req.get("output_config") if isinstance(req.get("output_config"), dict) else {}
    found = _json_format(req.get("output_format")) or _json_format(config.get("format"))
    if found is not None:
        return found
    choice = req.get("tool_choice") if isinstance(req.get("tool_choice"), dict) else {}
    kind = choice.get("type")
    if kind == "tool" and isinstance(choice.get("name"), str):
        return Ask(tool_choice="forced", forced=choice["name"])
    return Ask(tool_choice={"any": "required", "none": "none"}.get(kind, "auto"))


def _openai_choice(choice: Any) -> Ask:
    if choice in ("none", "required"):
        return Ask(tool_choice=choice)
    if isinstance(choice, dict):
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return Ask(tool_choice="forced", forced=name)
    return NO_ASK


def openai_chat(req: dict[str, Any]) -> Ask:
    """`response_format` (json_schema, json_object), then `tool_choice`."""
    return _json_format(req.get("response_format")) or _openai_choice(req.get("tool_choice"))


def responses(req: dict[str, Any]) -> Ask:
    """`text.format` (json_schema, json_object), then `tool_choice`."""
    text = req.get("text") if isinstance(req.get("text"), dict) else {}
    return _json_format(text.get("format")) or _openai_choice(req.get("tool_choice"))


def responses_tools(req: dict[str, Any], items: list[Any]) -> list[Tool]:
    """The Responses tools: `tools`, and those an input item of type `additional_tools` adds
    (Codex CLI), namespaces flattened; function tools with their parameters, custom ones freeform."""
    found: list[Tool] = []

    def add(tools: Any) -> None:
        for t in tools if isinstance(tools, list) else []:
            if not isinstance(t, dict):
                continue
            if t.get("type") == "namespace":
                add(t.get("tools"))
            elif t.get("type") in ("function", "custom") and isinstance(t.get("name"), str):
                found.append(
                    Tool(t["name"], t.get("parameters"), t["type"] == "custom", t.get("description") or "")
                )

    add(req.get("tools"))
    for item in items:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            add(item.get("tools"))
    return found


def gemini(req: dict[str, Any]) -> Ask:
    """`generationConfig` (`responseMimeType: application/json`, `responseSchema`,
    `responseJsonSchema`), then `toolConfig.functionCallingConfig` (`ANY`, `NONE`)."""
    config = req.get("generationConfig") if isinstance(req.get("generationConfig"), dict) else {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is not None or config.get("responseMimeType") == "application/json":
        return Ask(json=True, schema=schema)
    tool_config = req.get("toolConfig") if isinstance(req.get("toolConfig"), dict) else {}
    calling = tool_config.get("functionCallingConfig") or {}
    mode = str(calling.get("mode", "")).upper() if isinstance(calling, dict) else ""
    if mode == "NONE":
        return Ask(tool_choice="none")
    if mode == "ANY":
        names = calling.get("allowedFunctionNames") or []
        if len(names) == 1:
            return Ask(tool_choice="forced", forced=names[0])
        return Ask(tool_choice="required")
    return NO_ASK
