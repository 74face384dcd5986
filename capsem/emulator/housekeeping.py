"""The agents' own traffic beside their model calls: settings, feature flags, telemetry.

Under `capsem run --emulator` every request an agent makes reaches the emulator (mitmdump runs
in upstream mode towards it), not only its model calls. Answering those with 404 made a real
agent's session look broken: Claude Code showed 9 errors, 8 of them its settings and telemetry
endpoints; Gemini CLI re-sent its Clearcut log 9 times. So:

- `answer()` gives the endpoints the CLIs call what the real service gives a client with an API
  key and nothing configured: empty settings, no restrictions, no feature flags, telemetry
  accepted (a `Reply`), in the shape each CLI parses;
- `not_emulated()` answers everything else the emulator does not play (another host's content, a
  git repository, a plugin catalog): a 404 whose `server` header is `NOT_EMULATED_SERVER`, which
  capsem's outcomes count apart from the agent's errors (`capsem.outcomes.NOT_EMULATED`). A path
  under a model API's own prefix (`/v1/…`) still gets the provider's 404: that is an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from capsem.emulator.reply import Reply, json_reply

NOT_EMULATED_SERVER = "not-emulated (capsem)"
"""The `server` header of an answer for something the emulator does not play (kept verbatim in
`net_events.response_headers`: `server` is on the header allowlist). It must not contain an
emulator placeholder key (`capsem-emulator` is Gemini's under `--emulator`): stored text is
scrubbed of the agent's keys."""

_API_PATH = re.compile(
    r"(?:/[\w.-]+)*/(?:v1|v1beta|v1alpha|v1internal|v2)(?:[/:]|$)|/api/(?:chat|generate|tags)$"
)
"""Paths a model API serves: an unknown one is the provider's own 404 (an error), not housekeeping."""


def _empty(status: int = 200) -> Callable[[str], Reply]:
    return lambda _type: json_reply(status, {})


def _otlp(content_type: str) -> Reply:
    """An OTLP/HTTP export accepted: an empty Export*ServiceResponse, in the request's encoding."""
    if "protobuf" in content_type:
        return Reply(200, [("content-type", "application/x-protobuf")], b"")
    return json_reply(200, {})


# (host, method, path pattern, answer from the request's content type). Claude Code's endpoints on
# api.anthropic.com, answered as for an API-key client of an organization that configured nothing.
_ENDPOINTS: list[tuple[str, str, re.Pattern[str], Callable[[str], Reply]]] = [
    ("api.anthropic.com", "GET", re.compile(r"/api/claude_code/settings"), lambda _t: Reply(204, [], b"")),
    ("api.anthropic.com", "GET", re.compile(r"/api/claude_code/policy_limits"),
     lambda _t: json_reply(200, {"restrictions": {}})),
    ("api.anthropic.com", "POST", re.compile(r"/api/eval/[\w-]+"),  # GrowthBook remote evaluation
     lambda _t: json_reply(200, {"features": {}})),
    ("api.anthropic.com", "GET", re.compile(r"/api/claude_cli/bootstrap"), _empty()),
    ("api.anthropic.com", "GET", re.compile(r"/api/claude_code_penguin_mode"),
     lambda _t: json_reply(200, {"enabled": False})),
    ("api.anthropic.com", "GET", re.compile(r"/api/directory/server-urls"), lambda _t: json_reply(200, {"urls": []})),
    ("api.anthropic.com", "GET", re.compile(r"/api/claude_code/organizations/metrics_enabled"),
     lambda _t: json_reply(200, {"metrics_logging_enabled": False})),
    ("api.anthropic.com", "POST", re.compile(r"/api/event_logging/(?:v2/)?batch"), _empty()),
    # Gemini CLI's Clearcut log: `[next_request_wait_millis]`, as Clearcut's JSON format answers
    ("play.googleapis.com", "POST", re.compile(r"/log"),
     lambda _t: Reply(200, [("content-type", "application/json")], json.dumps(["-1"]).encode())),
    # OpenTelemetry exports (Codex CLI's metrics to ab.chatgpt.com, any OTLP/HTTP collector)
    ("*", "POST", re.compile(r"(?:/[\w.-]+)*/v1/(?:metrics|traces|logs)"), _otlp),
]  # fmt: skip


def answer(method: str, host: str, path: str, content_type: str) -> Reply | None:
    """The real service's answer to one of the agents' own non-model requests, or None."""
    for want_host, want_method, pattern, reply in _ENDPOINTS:
        if want_host in ("*", host) and method == want_method and pattern.fullmatch(path):
            return reply(content_type)
    return None


def not_emulated(method: str, host: str, path: str) -> Reply | None:
    """A 404 for what the emulator does not play (None for a model API's path: its own 404)."""
    if _API_PATH.match(path):
        return None
    message = (
        f"capsem's emulator does not play {host or 'this host'}: {method} {path} (nothing left the machine)"
    )
    return json_reply(404, {"error": {"type": "not_emulated", "message": message}},
                      headers=[("server", NOT_EMULATED_SERVER)])  # fmt: skip
