"""Imported at start-up by every Python process of the streaming benchmark's "(8) capsem, no
ledger" mitmdump (its PYTHONPATH holds this folder): the session writer's `ledger` keyword then
defaults to False, so that mitmdump's recorder keeps no hash chain and signs no heads.

For comparison in the benchmark only: capsem has no switch for the ledger (it is always on), and
this adds none. The benchmark checks that the session it recorded has no ledger rows.
"""

from capsem.store.writer import SessionWriter

SessionWriter.__init__.__kwdefaults__["ledger"] = False
