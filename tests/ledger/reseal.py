"""For tests that make a defect in a session.db on purpose (a tool error, a pending call, a copy
under another id) and look at what other checks say of it: the ledger rebuilt as if the writer
had written the file as it now is, signed with the test's `$CAPSEM_HOME` key, and main.db's
chain of sessions rebuilt with the new head. Test code only: capsem never re-signs a record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from capsem.store.keys import signing_key
from capsem.store.ledger import Ledger
from capsem.store.sessions_chain import append, last_head
from capsem.store.verify import NOT_CHAINED


def reseal(db: Path) -> None:
    session_id = db.parent.name
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'ledger'").fetchone():
            return  # (an older schema, or a file made damaged on purpose)
        conn.execute("BEGIN IMMEDIATE")
        for table in ("ledger", "ledger_shapes", "ledger_heads"):
            conn.execute(f"DELETE FROM {table}")
        ledger = Ledger(session_id, signing_key())
        ledger.begin(conn)
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                            "AND name NOT LIKE 'sqlite_%' ORDER BY name")]  # fmt: skip
        for table in names:
            if table in NOT_CHAINED:
                continue
            cur = conn.execute(f'SELECT * FROM "{table}"')
            rows = [tuple(r) for r in cur]
            if rows:
                ledger.rows(conn, table, tuple(d[0] for d in cur.description), rows)
        ledger.seal(conn, final=True)
        conn.execute("COMMIT")
        head = last_head(conn)
    finally:
        conn.close()
    main_db = db.parent.parent.parent / "main.db"
    if not main_db.is_file():
        return
    main = sqlite3.connect(main_db, isolation_level=None)
    try:
        old = main.execute(
            "SELECT kind, session_id, batch, head FROM ledger_sessions ORDER BY seq"
        ).fetchall()
        if not any(sid == session_id for _, sid, _, _ in old):
            return
        main.execute("DELETE FROM ledger_sessions")
        for kind, sid, batch, value in old:
            append(
                main,
                kind,
                sid,
                head if sid == session_id else _Head(batch, value) if value is not None else None,
            )
    finally:
        main.close()


class _Head:
    def __init__(self, batch, head) -> None:
        self.batch, self.head = batch, head
