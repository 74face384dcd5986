"""Team budgets, leased: PostgreSQL grants each session a slice of what is left of a team budget,
in one transaction under the budget's row lock, and the proxy decides every call on its own slice
(`addons/proxy/team_budget.py`), never asking PostgreSQL in a call's path.

The rule that keeps the team under its limit: a grant never makes the leases of a budget's
period add up past the limit (an open lease counts what it was granted, or what it used if that
is more; a closed one what it used), a lease only grows while it is open, and a session spends
only within its grant (its calls reserve their most expensive outcome, as local budgets do). So
however many machines spend at once, the team's spend stays within the limit. A session that
ends closes its lease: what it was granted but did not use returns to the team. A session that
dies without closing keeps its grant until the period ends (never more than one slice unused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Grant:
    granted: float
    """What this session may spend of the budget this period (its whole lease)."""
    others: float
    """What the other leases of the period hold (granted or used)."""


def period_of(day: str, period: str) -> str:
    """The period key of a UTC day: `2026-11-28` (day) or `2026-11` (month)."""
    return day if period == "day" else day[:7]


def grant(conn: Any, name: str, period: str, limit: float, machine: str, session_id: str, *, used: float,
          want: float) -> Grant:  # fmt: skip
    """Grow this session's lease of budget `name` for `period` towards `want` (what it wants to be
    able to spend in all), within what the team has left; record what it has `used`."""
    with conn.transaction():  # the budget's row, upserted, stays locked until the commit: grants queue
        conn.execute("INSERT INTO capsem.budgets (name, period, limit_usd) VALUES (%s, %s, %s) "
                     "ON CONFLICT (name, period) DO UPDATE SET limit_usd = EXCLUDED.limit_usd",
                     (name, period, limit))  # fmt: skip
        others = conn.execute(
            "SELECT COALESCE(sum(CASE WHEN closed THEN used_usd ELSE GREATEST(granted_usd, used_usd) END), 0) "
            "FROM capsem.leases WHERE name = %s AND period = %s AND NOT (machine = %s AND session_id = %s)",
            (name, period, machine, session_id),
        ).fetchone()[0]  # fmt: skip
        row = conn.execute("SELECT granted_usd FROM capsem.leases WHERE name = %s AND period = %s AND machine = %s "
                           "AND session_id = %s", (name, period, machine, session_id)).fetchone()  # fmt: skip
        old = row[0] if row else 0.0
        new = max(old, min(want, limit - others))
        conn.execute(
            "INSERT INTO capsem.leases (name, period, machine, session_id, granted_usd, used_usd) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (name, period, machine, session_id) DO UPDATE SET "
            "granted_usd = EXCLUDED.granted_usd, used_usd = GREATEST(capsem.leases.used_usd, EXCLUDED.used_usd), "
            "renewed_at = now(), closed = FALSE",
            (name, period, machine, session_id, new, used),
        )  # fmt: skip
    return Grant(new, others)


def close(conn: Any, name: str, period: str, machine: str, session_id: str, used: float) -> None:
    """The session ended: its lease keeps what it used (`used`: spent plus what calls still hold),
    the rest returns to the team."""
    with conn.transaction():
        conn.execute("UPDATE capsem.leases SET used_usd = GREATEST(used_usd, %s), granted_usd = GREATEST(used_usd, "
                     "%s), closed = TRUE, renewed_at = now() WHERE name = %s AND period = %s AND machine = %s "
                     "AND session_id = %s", (used, used, name, period, machine, session_id))  # fmt: skip
