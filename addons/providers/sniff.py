"""Detection by request-body shape, for model calls on unknown paths (gateways, local servers).

Runs in the `request` hook, so it must be cheap: only POSTs with a JSON content type, no
content encoding, at most 1 MiB, on paths that are not known non-model endpoints.
"""

from __future__ import annotations

import json
import re

from addons.providers import Route, provider_for_host

MAX_SNIFF_BYTES = 1024 * 1024
_NOT_MODEL_CALLS = re.compile(
    r"count_?tokens|countTokens|/models/?$|embed|batch|health|/auth|oauth|/token", re.I
)


def sniff_route(host: str, path: str, content_type: str | None, content_encoding: str | None,
                body: bytes | None, *, port: int | None = None) -> Route | None:  # fmt: skip
    """The route of an unknown-path request whose body looks like a model call, else None."""
    if (not body or len(body) > MAX_SNIFF_BYTES or content_encoding or "json" not in (content_type or "").lower()
            or _NOT_MODEL_CALLS.search(path)):  # fmt: skip
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    model = obj.get("model") if isinstance(obj.get("model"), str) else ""
    messages = isinstance(obj.get("messages"), list)
    if isinstance(obj.get("contents"), list) or isinstance(obj.get("generationConfig"), dict):
        protocol = "gemini"
    elif messages and (("max_tokens" in obj and "system" in obj) or model.startswith("claude")):
        protocol = "anthropic"
    elif model and "input" in obj and not messages:
        protocol = "openai_responses"
    elif model and messages:
        protocol = "openai_chat"
    else:
        return None
    # an unknown host is "unknown": a vendor's prices would be a guess for whoever serves it
    return Route(provider_for_host(host, port) or "unknown", protocol)
