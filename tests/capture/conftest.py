"""The addon in-process: `Capsem(recorder=RecorderThread)` in mitmproxy's test context, its session started."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mitmproxy.test import taddons

from addons.proxy.capture import Capsem
from addons.recorder.thread import RecorderThread
from tests.conftest import only_session


@contextmanager
def started(addon: Capsem) -> Iterator[Capsem]:
    """`addon` configured in mitmproxy's test context with its session started; done on the way out."""
    with taddons.context(addon) as tctx:
        tctx.configure(addon)
        addon.running()
        yield addon
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


class Chain:
    """The addons `addons/capsem_addon.py` registers for `addon`: a hook called on it runs on every
    addon that has it, in order, as mitmproxy's addon manager does."""

    def __init__(self, addon: Capsem) -> None:
        self.addons = [addon, addon.connections]

    def __getattr__(self, hook: str):
        def call(*args):
            for one in self.addons:
                if hasattr(one, hook):
                    getattr(one, hook)(*args)

        return call
