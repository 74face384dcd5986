"""Full-text search over every session: an FTS5 index in `$CAPSEM_HOME/search.db`.

The index is brought up to date before each search, one session at a time: a session is
(re)indexed when its database file (`session.db` with its WAL, or `session.db.gz`) changed size
or mtime since it was indexed, and dropped when its database is gone. Indexed: conversation
items (messages, thinking, answers, tool calls with their arguments, tool results; each item once,
at the call that first sent it), tool arguments and results from the older tables when a session
has no items, and MCP request and response payloads.
"""

from __future__ import annotations

import html
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from assembler.sessiondb import SessionDbError, db_file, open_path
from assembler.view.queries import readable, tables
from capsem.paths import capsem_home, sessions_dir
from capsem.store.schema import connect

INDEXED_KINDS = ("message", "tool_call", "tool_result", "thinking", "text")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS indexed (session_id TEXT PRIMARY KEY, file TEXT NOT NULL, size INTEGER NOT NULL,
                                    mtime REAL NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(session_id UNINDEXED, call_id UNINDEXED, kind UNINDEXED,
                                                  label UNINDEXED, text, tokenize = 'unicode61');
"""


@dataclass(frozen=True)
class Hit:
    session_id: str
    call_id: int | None
    kind: str
    label: str
    snippet: str
    """The matching text with the words found between « and »."""

    @property
    def snippet_html(self) -> str:
        return html.escape(self.snippet).replace("«", "<mark>").replace("»", "</mark>")


def index_path() -> Path:
    return capsem_home() / "search.db"


def _stamp(path: Path) -> tuple[int, float]:
    """Size and mtime of a database file with its WAL (a recording session grows its WAL)."""
    size, mtime = 0, 0.0
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
        except OSError:
            continue
        size += st.st_size
        mtime = max(mtime, st.st_mtime)
    return size, mtime


def _documents(conn: sqlite3.Connection) -> Iterator[tuple[int | None, str, str, str]]:
    """(call id, kind, label, text) of everything searchable in one session.db."""
    found = tables(conn)
    if {"model_items", "item_contents"} <= found:
        seen: set[str] = set()
        marks = ", ".join("?" * len(INDEXED_KINDS))
        rows = conn.execute(f"SELECT model_call_id, kind, tool_name, content_hash FROM model_items WHERE kind IN "
                            f"({marks}) ORDER BY id", INDEXED_KINDS).fetchall()  # fmt: skip
        for call_id, kind, tool, content_hash in rows:
            if content_hash in seen:
                continue
            seen.add(content_hash)
            got = conn.execute("SELECT content FROM item_contents WHERE hash = ?", (content_hash,)).fetchone()
            if got is not None:
                yield call_id, kind.replace("_", " "), tool or "", readable(kind, got[0])
    else:
        if "model_calls" in found:
            for r in conn.execute("SELECT id, thinking_content, text_content FROM model_calls"):
                if r[1]:
                    yield r[0], "thinking", "", r[1]
                if r[2]:
                    yield r[0], "text", "", r[2]
        if "tool_calls" in found:
            for r in conn.execute("SELECT model_call_id, tool_name, arguments FROM tool_calls"):
                yield r[0], "tool call", r[1], r[2] or ""
        if "tool_responses" in found:
            for r in conn.execute("SELECT model_call_id, tool_name, content_preview FROM tool_responses"):
                yield r[0], "tool result", r[1] or "", r[2] or ""
    if "mcp_calls" in found:
        link = (
            "(SELECT model_call_id FROM tool_calls t WHERE t.mcp_call_id = m.id)"
            if "tool_calls" in found
            else "NULL"
        )
        for r in conn.execute(f"SELECT {link}, server_name, method, tool_name, request_preview, response_preview "
                              "FROM mcp_calls m"):  # fmt: skip
            label = f"{r[1]} {r[2]}" + (f" {r[3]}" if r[3] else "")
            text = "\n".join(x for x in (r[4], r[5]) if x)
            if text:
                yield r[0], "MCP", label, text


def _session_ids() -> list[str]:
    ids: set[str] = set()
    if sessions_dir().is_dir():
        ids |= {p.name for p in sessions_dir().iterdir() if p.is_dir()}
    try:
        from assembler.sessiondb import open_main

        with open_main() as conn:
            ids |= {r[0] for r in conn.execute("SELECT id FROM sessions")}
    except Exception:
        pass
    return sorted(ids)


def update_index(index: sqlite3.Connection) -> list[str]:
    """Index the sessions whose database changed since last time; drop those whose database is
    gone. Returns the sessions that could not be read (one line each)."""
    problems: list[str] = []
    known = {
        r[0]: (r[1], r[2], r[3]) for r in index.execute("SELECT session_id, file, size, mtime FROM indexed")
    }
    present: set[str] = set()
    for sid in _session_ids():
        path = db_file(sid)
        if path is None:
            continue
        present.add(sid)
        size, mtime = _stamp(path)
        if known.get(sid) == (str(path), size, mtime):
            continue
        try:
            with open_path(path) as conn:
                docs = list(_documents(conn))
        except (SessionDbError, sqlite3.Error, ValueError) as exc:
            problems.append(f"{sid}: {exc}")
            continue
        with index:
            index.execute("DELETE FROM docs WHERE session_id = ?", (sid,))
            index.executemany("INSERT INTO docs (session_id, call_id, kind, label, text) VALUES (?, ?, ?, ?, ?)",
                              [(sid, c, k, lab, t) for c, k, lab, t in docs])  # fmt: skip
            index.execute("INSERT OR REPLACE INTO indexed VALUES (?, ?, ?, ?)", (sid, str(path), size, mtime))
    with index:
        for sid in set(known) - present:
            index.execute("DELETE FROM docs WHERE session_id = ?", (sid,))
            index.execute("DELETE FROM indexed WHERE session_id = ?", (sid,))
    return problems


INDEX_VERSION = 2
"""How items are read as text (`readable`); an index written by another version is rebuilt (2: Gemini
parts read as text, no longer as JSON)."""


def open_index() -> sqlite3.Connection:
    conn = connect(index_path())
    conn.executescript(_SCHEMA)
    if conn.execute("PRAGMA user_version").fetchone()[0] != INDEX_VERSION:
        with conn:  # every session is indexed again at the next update
            conn.execute("DELETE FROM docs")
            conn.execute("DELETE FROM indexed")
        conn.execute(f"PRAGMA user_version = {INDEX_VERSION}")
    return conn


def fts_query(text: str) -> str:
    """The user's words as an FTS5 query: every word must appear (each quoted, so no operator
    or punctuation in them is read as syntax)."""
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def search(text: str, limit: int = 100) -> list[Hit]:
    """Hits for `text` across every session, best first (the index is updated first)."""
    query = fts_query(text)
    if not query:
        return []
    index = open_index()
    try:
        update_index(index)
        rows = index.execute(
            "SELECT session_id, call_id, kind, label, snippet(docs, 4, '«', '»', ' … ', 16) FROM docs "
            "WHERE docs MATCH ? ORDER BY rank LIMIT ?", (f"text : ({query})", limit)).fetchall()  # fmt: skip
    finally:
        index.close()
    return [Hit(r[0], int(r[1]) if r[1] is not None else None, r[2], r[3], r[4]) for r in rows]
