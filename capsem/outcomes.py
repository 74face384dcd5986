"""What went wrong in a session and where capsem stepped in, as SQL over session.db: one definition
that the rollup (main.db counts), the run summary, `list-sessions`, `inspect-session`, `tail` and the
web pages all share, so that each counts and names the same things.

An error is one of:
- a model call that failed (HTTP >= 400, no answer, or an error event in its stream);
- any other request that failed or got an HTTP error (>= 400) from upstream, connections that never
  reached the provider included (capsem's own refusals are not errors: they are interventions; nor
  is the emulator's answer for a host it does not play, `NOT_EMULATED`: it is listed apart);
- a tool result the agent marked as an error.

An intervention is a request capsem denied (a policy rule or a budget: `matched_rule` says which),
warned about or asked about, and a credential placeholder capsem refused to replace.
"""

from __future__ import annotations

import sqlite3

FAILED_MODEL_CALL = (
    "(status_code IS NULL OR status_code >= 400 OR error_type IS NOT NULL OR error_message IS NOT NULL)"
)
"""`model_calls` rows that failed."""

NOT_EMULATED = (
    "(CASE WHEN json_valid(n.response_headers) THEN json_extract(n.response_headers, '$.server') END"
    " = 'not-emulated (capsem)'"
    " AND EXISTS (SELECT 1 FROM session_meta WHERE key = 'emulated' AND value = 'true'))"
)
"""`net_events n` rows answered by capsem's provider emulator for something it does not play (another
host's content, a git repository: `capsem.emulator.housekeeping`): under `--emulator`, an artefact of
the emulation, not the agent's error; shown apart. Only in a session answered by the emulator or a
replay (session_meta `emulated`): anywhere else the header is one any server could send, and such
a request is an error like any other."""

FAILED_REQUEST = (
    "(n.decision = 'error' OR (n.status_code >= 400 AND n.decision NOT IN ('denied', 'asked'))) "
    "AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.net_event_id = n.id) "
    f"AND NOT COALESCE({NOT_EMULATED}, 0)"
)
"""`net_events n` rows that failed and are not a model call (those count as the model call), nor
`NOT_EMULATED`."""

FAILED_TOOL = "is_error = 1"
"""`tool_responses` rows the agent marked as errors."""

INTERVENED = ("denied", "warned", "asked")
"""`net_events.decision` values that mean capsem stepped in."""

OTHER_ERRORS_SQL = f"""(SELECT COUNT(*) FROM net_events n WHERE {FAILED_REQUEST})
  + (SELECT COUNT(*) FROM tool_responses WHERE {FAILED_TOOL})"""
"""A scalar expression: the session's errors that are not failed model calls (the totals count
those in their one pass over model_calls)."""

ERRORS_SQL = f"""(SELECT COUNT(*) FROM model_calls WHERE {FAILED_MODEL_CALL})
  + {OTHER_ERRORS_SQL}"""
"""A scalar expression: the session's number of errors."""


def refused_placeholders(conn: sqlite3.Connection) -> int:
    """Credential placeholders capsem refused to replace (0 for a session.db older than brokering)."""
    try:
        return conn.execute("SELECT COUNT(*) FROM substitution_events WHERE outcome = 'refused'").fetchone()[
            0
        ]
    except sqlite3.OperationalError:
        return 0
