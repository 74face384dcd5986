"""The mitmdump side of capsem: the addons in the proxy process.

They only classify, copy and enqueue (`handover.py`); nothing here imports `addons.recorder`
(`tests/test_imports.py`), so loading the addon loads no writer, builder or protocol parser.
"""
