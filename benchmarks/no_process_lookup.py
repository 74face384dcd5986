"""A `mitmdump -s` script for the benchmarks only: switches capsem's client-process lookup off.

Loaded after addons/capsem_addon.py, it replaces `ProcessResolver.lookup` (the call the capture
hooks make on every new client connection) with one that looks nothing up, so the new-connection
suite can show what the addon costs a connection without the lookup. Never used by the product.
"""

from __future__ import annotations

from addons.proxy.process import ProcessResolver


def _no_lookup(self: ProcessResolver, key: str, peer: object, server: object = None) -> bool:
    return False


ProcessResolver.lookup = _no_lookup  # type: ignore[method-assign,assignment]

addons: list[object] = []
