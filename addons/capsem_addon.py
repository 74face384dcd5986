"""capsem: record every LLM call an agent makes.

Usage: mitmdump -s addons/capsem_addon.py   (with capsem installed in mitmdump's Python)
"""

from addons.proxy.capture import Capsem

addons = [Capsem()]
