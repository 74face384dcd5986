"""The addon in-process: `Capsem(in_process=True)` in mitmproxy's test context, its session started."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy.test import taddons

from addons.capture import Capsem
from tests.conftest import only_session


@pytest.fixture
def capsem(capsem_home):
    addon = Capsem(in_process=True)
    with taddons.context(addon) as tctx:
        tctx.configure(addon)
        addon.running()
        yield addon
        if addon.session is not None:
            addon.done()


def finish(addon: Capsem, home: Path) -> Path:
    """End the session; the path of its session.db."""
    addon.done()
    return only_session(home)
