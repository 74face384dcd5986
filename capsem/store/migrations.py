"""Named migrations, as llm and sqlite-utils keep them: a step is a function `mNNN_what(conn)`
registered with `@MIGRATIONS.migration` (its name is the key, written once); `migrate(conn,
migrations)` applies the steps not yet recorded in `_capsem_migrations`, each inside one
transaction together with its record, so a failed step stays pending. `PRAGMA user_version`
mirrors the number applied. A database written by a newer capsem (unknown steps) is refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

Migration = Callable[[sqlite3.Connection], None]


class Migrations(list[tuple[str, Migration]]):
    """One database's steps, in order: (name, function) pairs."""

    def migration(self, step: Migration) -> Migration:
        """Register `step` under its function name (`m007_items`)."""
        if any(name == step.__name__ for name, _ in self):
            raise ValueError(f"migration {step.__name__} is registered twice")
        self.append((step.__name__, step))
        return step


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run `;`-separated DDL inside the caller's transaction (executescript would commit)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def migrate(conn: sqlite3.Connection, migrations: list[tuple[str, Migration]]) -> list[str]:
    """Apply pending migrations in order; return the names applied.

    Raises:
        RuntimeError: when the database was written by a newer capsem (unknown migrations).
    """
    conn.execute("CREATE TABLE IF NOT EXISTS _capsem_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    done = {row[0] for row in conn.execute("SELECT name FROM _capsem_migrations")}
    known = {name for name, _ in migrations}
    if done - known:
        raise RuntimeError(f"database has newer migrations than this capsem knows: {sorted(done - known)}")
    applied = []
    for name, step in migrations:
        if name in done:
            continue
        with conn:  # one transaction: the step and its record
            conn.execute("BEGIN IMMEDIATE")  # another process may be migrating the same file: take turns
            if conn.execute("SELECT 1 FROM _capsem_migrations WHERE name = ?", (name,)).fetchone():
                continue  # it applied this step while we waited
            step(conn)
            conn.execute(
                "INSERT INTO _capsem_migrations VALUES (?, strftime('%Y-%m-%dT%H:%M:%SZ','now'))", (name,)
            )
        applied.append(name)
    conn.execute(f"PRAGMA user_version = {len(migrations)}")
    return applied
