"""The session store's room: what every write of a session.db and main.db's chain of sessions
goes through to be provable (`ledger.py`: the hash chain over every row written; `keys.py`: the
Ed25519 key that signs its heads; `sessions_chain.py`: main.db's chain of sessions;
`verify.py`: recomputing all of it).

The writer itself (`capsem/store/writer.py: SessionWriter`) feeds the ledger in its commit;
see docs/ARCHITECTURE.md, "Proving the record".
"""
