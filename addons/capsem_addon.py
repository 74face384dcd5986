"""capsem: record every LLM call an agent makes.

Usage: mitmdump -s addons/capsem_addon.py   (with capsem installed in mitmdump's Python)

The addons run in this order for every hook (mitmproxy calls them in the order listed):
`Capsem` (addons/proxy/capture.py: the session, the flows' messages, policy, guardrails) then
`Connections` (addons/proxy/connection_hooks.py: client processes, failed CONNECT tunnels).
"""

from addons.proxy.capture import Capsem

capture = Capsem()
addons = [capture, capture.connections]
