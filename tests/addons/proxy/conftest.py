"""The addon in-process: `Capsem(recorder=RecorderThread)` in mitmproxy's test context, its session started."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mitmproxy.test import taddons

from addons.proxy.capture import Capsem
from addons.recorder.thread import RecorderThread
from tests.conftest import only_session


@contextmanager
def started(addon: Capsem) -> Iterator[Chain]:
    """`addon` configured in mitmproxy's test context with its session started, as its chain; done
    on the way out."""
    with taddons.context(addon) as tctx:
        tctx.configure(addon)
        addon.running()
        yield Chain(addon)
        if addon.session is not None:
            addon.done()


@pytest.fixture
def capsem(capsem_home):
    with started(Capsem(recorder=RecorderThread)) as addon:
        yield addon


def finish(addon: Capsem, home: Path) -> Path:
    """End the session; the path of its session.db."""
    addon.done()
    return only_session(home)


FLOW_HOOKS = frozenset({
    "requestheaders", "request", "responseheaders", "response", "error", "websocket_message", "websocket_end",
    "client_connected", "client_disconnected", "server_connect", "server_connected", "server_connect_error",
    "tls_start_server", "tls_established_server", "tls_failed_server", "tls_failed_client", "http_connect_error",
})  # fmt: skip
"""The hooks of mitmproxy's that capsem's addons implement (the lifecycle ones are `Capsem`'s alone)."""


class Chain:
    """`addon` as mitmdump runs it: a hook called here runs on every addon of `addon.chain` that
    has it, in order, and waits for one that returns a coroutine before the next (as mitmproxy's
    addon manager does); anything else is `addon`'s own attribute."""

    def __init__(self, addon: Capsem) -> None:
        self.addon = addon

    def __getattr__(self, name: str):
        if name not in FLOW_HOOKS:
            return getattr(self.addon, name)

        def call(*args):
            chain = [one for one in self.addon.chain if hasattr(one, name)]
            for i, one in enumerate(chain):
                result = getattr(one, name)(*args)
                if asyncio.iscoroutine(result):
                    return _then(result, [getattr(rest, name) for rest in chain[i + 1 :]], args)
            return None

        return call


async def _then(first, rest, args) -> None:
    await first
    for hook in rest:
        result = hook(*args)
        if asyncio.iscoroutine(result):
            await result
