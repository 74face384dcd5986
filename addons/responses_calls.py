"""The OpenAI Responses API's output items that are tool calls the agent runs, and their results:
one list for the parser (`tool_calls`), the conversation items and the tool rules (`toolhold`).

A function or freeform (custom) tool carries a `name`; Codex's `local_shell` and the API's own
`shell` and `apply_patch` tools do not: they are named here, and their arguments are the item's
`action` or `operation`. Dependency-free: the proxy's tool rules import it at mitmdump's start.
"""

from __future__ import annotations

from typing import Any

CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call", "shell_call", "apply_patch_call")
RESULT_TYPES = tuple(f"{kind}_output" for kind in CALL_TYPES)
_NAMES = {"local_shell_call": "local_shell", "shell_call": "shell", "apply_patch_call": "apply_patch"}
_ARGUMENTS = {"custom_tool_call": "input", "local_shell_call": "action", "shell_call": "action",
              "apply_patch_call": "operation"}  # fmt: skip


def call_name(item: dict[str, Any]) -> str:
    """The tool a call item names (its `name`, else its type's tool)."""
    name = item.get("name")
    return name if isinstance(name, str) and name else _NAMES.get(str(item.get("type")), "")


def call_arguments(item: dict[str, Any]) -> Any:
    """What a call item passes its tool: `arguments` (JSON text), a freeform tool's `input`, a
    shell call's `action`, a patch's `operation`."""
    return item.get(_ARGUMENTS.get(str(item.get("type")), "arguments"))
