"""A local LLM provider emulator for tests and the demo.

It speaks the Anthropic Messages and OpenAI Chat Completions APIs the way the real services do
(streamed and not, every content encoding, controllable chunking, real error shapes), over HTTP
and HTTPS, and works as an upstream proxy so mitmdump can run with `--mode upstream:` while
clients keep their real base URLs. Every exchange is logged with the exact bytes received and
sent (request head and body, raw and decoded; response body as sent and decoded: see
`Server._log`) and the `expected` record, the truth tests compare a capture with. The emulator
shares no code with capsem (`addons`): its request decoder and event-stream encoder are its own.
Other APIs plug in as one line in `server.ROUTES` plus a module (Responses, Gemini, Ollama,
Bedrock/Vertex, WebSocket turns).

Per-request behaviour comes from the `x-emulator: key=value; ...` header merged over
`Emulator(defaults=...)`: scenario (auto, text, tool_call, thinking, error, midstream_error,
malformed, agent: answers a real agent can act on, which `capsem run --emulator` selects:
`agent.py`, and destroy: the same asking for `rm -rf capsem-doomed.txt`, for tool rules),
status, kind, tools, redacted_thinking, cache_read, cache_write, cache_write_1h,
reasoning, text, encoding, lie_encoding, chunk, delay_ms, truncate, model_suffix, seed.
Also served: `GET /v1/models`, `POST /v1/messages/count_tokens`, the agents' own housekeeping
endpoints (settings, feature flags, telemetry: `housekeeping.py`; other hosts get a 404 marked
"not emulated"), and the admin endpoints `GET|DELETE /_emulator/exchanges`, `GET /_emulator/health`.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

from capsem.emulator.server import Server

__all__ = ["FRIENDLY_TEXT", "Emulator"]

FRIENDLY_TEXT = (
    "This answer comes from capsem's built-in emulator: no model was called and nothing was spent. "
    "Record a real agent with: capsem run -- AGENT"
)
"""What every text answer says under `capsem run --emulator` and `capsem demo` (`defaults={"text": ...}`);
the tests keep the default script, whose multibyte and backslash anchor exercises the decoders."""


class Emulator:
    """Runs the emulator on 127.0.0.1 in a background thread with its own event loop."""

    def __init__(self, defaults: dict[str, Any] | None = None, host: str = "127.0.0.1", port: int = 0,
                 tls_port: int = 0, server: Server | None = None) -> None:  # fmt: skip
        self.server = server or Server(defaults)
        self.host = host
        self._ports = (port, tls_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="capsem-emulator", daemon=True)
        self._servers: list[asyncio.base_events.Server] = []
        self.port = 0
        self.tls_port = 0

    def start(self) -> Emulator:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    async def _start(self) -> None:
        plain = await asyncio.start_server(self.server.handle, self.host, self._ports[0])
        tls = await asyncio.start_server(
            lambda r, w: self.server.handle(r, w, "https"), self.host, self._ports[1],
            ssl=self.server.ca.sni_context(),
        )  # fmt: skip
        self._servers = [plain, tls]
        self.port = plain.sockets[0].getsockname()[1]
        self.tls_port = tls.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def _close() -> None:
            for srv in self._servers:
                srv.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(_close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self.server.ca.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def https_url(self) -> str:
        return f"https://{self.host}:{self.tls_port}"

    @property
    def proxy_url(self) -> str:
        """Use as an upstream proxy (CONNECT and absolute-form requests)."""
        return self.http_url

    @property
    def ca_path(self) -> str:
        return str(self.server.ca.ca_path)

    def exchanges(self) -> list[dict[str, Any]]:
        with self.server.lock:
            return copy.deepcopy(self.server.exchanges)

    def clear(self) -> None:
        with self.server.lock:
            self.server.exchanges.clear()
