"""capsem: record every LLM call an agent makes.

Usage: mitmdump -s addons/capsem_addon.py   (with capsem installed in mitmdump's Python)

mitmproxy calls every hook on these addons in this order (`Capsem.chain`, addons/proxy/):
`Flows` (flows.py: each open flow's state), `Connections` (connection_hooks.py: client processes,
failed CONNECT tunnels), `PolicyGate` (policy_gate.py), `Guard` (guard.py: brokered credentials,
budgets), `Capsem` (capture.py: the session, the recorder, the messages it is handed); then
`ScrubbedLogs` (logs.py: every line mitmdump writes goes through the scrubber).
"""

from addons.proxy.capture import Capsem
from addons.proxy.logs import ScrubbedLogs

capsem = Capsem()
addons = [*capsem.chain, ScrubbedLogs(lambda: capsem.settings)]
