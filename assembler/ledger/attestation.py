"""`capsem export attestation`: a session as an in-toto Statement v1 in a DSSE envelope signed
with the ledger key, so anyone holding `ledger.pub` can check it without capsem.

The Statement's subjects are the session's final chain head (its value is a SHA-256 digest,
named `capsem-ledger-head:<session>`) and session.db's own SHA-256; the predicate says what the
session was: the agent's command, workspace and git commit, models, calls, tokens, cost, every
decision that was not a plain allow (policy, budget, tool and MCP rules, approvals) with counts
of all, and the capture status. The envelope's signature is Ed25519 over DSSE's PAE
("DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in ASCII decimal).
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from capsem.store.keys import SigningKey, signature_holds
from capsem.store.ledger import Head

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://capsem.dev/attestation/session/v1"
HEAD_SUBJECT = "capsem-ledger-head:"


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding: what the signature covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def envelope(statement: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    body = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    sig = key.sign(pae(PAYLOAD_TYPE, body))
    return {"payload": base64.b64encode(body).decode(), "payloadType": PAYLOAD_TYPE,
            "signatures": [{"keyid": key.key_id, "sig": base64.b64encode(sig).decode()}]}  # fmt: skip


def open_envelope(data: dict[str, Any], public) -> dict[str, Any] | None:
    """The Statement when one signature holds under `public` (None otherwise)."""
    try:
        body = base64.b64decode(data["payload"], validate=True)
        signed = pae(data["payloadType"], body)
        sigs = [base64.b64decode(s["sig"]) for s in data["signatures"]]
    except (KeyError, TypeError, ValueError):
        return None
    if data["payloadType"] != PAYLOAD_TYPE or not any(signature_holds(public, s, signed) for s in sigs):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def statement(session_id: str, head: Head, db_digest: str, predicate: dict[str, Any]) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": HEAD_SUBJECT + session_id, "digest": {"sha256": head.head.hex()},
             "annotations": {"batch": head.batch, "entries": head.last_seq, "final": head.final}},
            {"name": f"sessions/{session_id}/session.db", "digest": {"sha256": db_digest}},
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }  # fmt: skip


_DECISIONS = (
    ("net_events", "SELECT id, timestamp, domain, method, path, decision, matched_rule FROM net_events "
                   "WHERE decision NOT IN ('allowed', 'allow') ORDER BY id"),
    ("mcp_calls", "SELECT * FROM mcp_calls WHERE decision NOT IN ('allowed', 'allow') ORDER BY id"),
    ("tool_calls", "SELECT id, timestamp, tool_name, decision FROM tool_calls "
                   "WHERE decision NOT IN ('allowed', 'allow') ORDER BY id"),
    ("approvals", "SELECT id, asked_at, decided_at, rule, decision, decided_by, method, host, path, mcp_server, "
                  "tool FROM approvals ORDER BY id"),
)  # fmt: skip
_MCP_KEEP = ("id", "timestamp", "server_name", "method", "tool_name", "decision", "matched_rule")


def _rows(conn: sqlite3.Connection, sql: str) -> list[dict[str, Any]]:
    try:
        return [dict(r) for r in conn.execute(sql)]
    except sqlite3.Error:
        return []


# Long: the predicate, one field group after another.
def predicate(conn: sqlite3.Connection, row: dict[str, Any] | None) -> dict[str, Any]:
    """What the session was, from its session.db (and main.db's row for the agent and capture)."""
    row = row or {}
    models = _rows(conn, "SELECT provider, model, COUNT(*) AS calls, SUM(input_tokens) AS input_tokens, "
                         "SUM(output_tokens) AS output_tokens, SUM(estimated_cost_usd) AS cost_usd "
                         "FROM model_calls GROUP BY provider, model ORDER BY provider, model")  # fmt: skip
    decisions: dict[str, list[dict[str, Any]]] = {}
    for table, sql in _DECISIONS:
        found = _rows(conn, sql)
        if table == "mcp_calls":
            found = [{k: r.get(k) for k in _MCP_KEEP if k in r} for r in found]
        decisions[table] = found
    counts = {
        r["decision"]: r["n"]
        for r in _rows(conn, "SELECT decision, COUNT(*) AS n FROM net_events GROUP BY 1")
    }
    return {
        "agent": {"command": row.get("command"), "mode": row.get("mode"), "workspace": row.get("workspace"),
                  "git": {"repo": row.get("git_repo"), "branch": row.get("git_branch"),
                          "commit": row.get("git_commit")}},
        "session": {"status": row.get("status"), "created_at": row.get("created_at"),
                    "stopped_at": row.get("stopped_at"), "capsem_version": row.get("capsem_version")},
        "models": models,
        "totals": {
            "model_calls": sum(m["calls"] for m in models),
            "input_tokens": sum(m["input_tokens"] or 0 for m in models),
            "output_tokens": sum(m["output_tokens"] or 0 for m in models),
            "cost_usd": sum(m["cost_usd"] or 0 for m in models),
            "requests": sum(counts.values()),
            "tool_calls": _count(conn, "tool_calls"),
            "mcp_calls": _count(conn, "mcp_calls"),
        },
        "request_decisions": counts,
        "decisions": decisions,
        "capture": {"status": row.get("capture_status"), "error": row.get("capture_error"),
                    "rows_lost": row.get("capture_rows_lost")},
    }  # fmt: skip


def _count(conn: sqlite3.Connection, table: str) -> int:
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    except sqlite3.Error:
        return 0
