"""One mitmdump run = one session: its directory and its row in main.db, as mitmdump sees them.

mitmdump's own process only registers the session (`running`) and, if its recorder died, marks
it `crashed` with the reason. Everything that reads or writes session.db (recording, the rollup,
recovering sessions a dead process left `running`) happens in the recorder process, so a fault
there cannot take the agent's traffic down. Retention (compressing and culling old sessions) is
not the proxy's business either: `capsem run` and `capsem vacuum` apply it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capsem.ids import new_session_id, utc_now
from capsem.paths import main_db_path, session_db_path
from capsem.private import private_dir
from capsem.redact import Scrubber
from capsem.rollup import open_main, register_session


@dataclass
class Session:
    id: str
    mode: str = "mitmdump"
    command: str | None = None

    @property
    def db_path(self) -> Path:
        return session_db_path(self.id)

    @classmethod
    def register(
        cls,
        session_id: str | None = None,
        *,
        mode: str = "mitmdump",
        command: str | None = None,
        scrubber: Scrubber | None = None,
        emulated: bool = False,
    ) -> Session:
        """Create the session's directory (0700) and its `running` row in main.db (the command line
        scrubbed by `scrubber`)."""
        session = cls(session_id or new_session_id(), mode, command)
        private_dir(session.db_path.parent)
        main = open_main()
        try:
            register_session(
                main,
                session.id,
                mode=mode,
                command=command,
                created_at=utc_now(),
                scrubber=scrubber,
                emulated=emulated,
            )
        finally:
            main.close()
        return session

    def mark_failed(self, reason: str, rows_lost: int = 0) -> None:
        """The recorder died: the session is `crashed`, its capture `failed` (session.db is not read).

        Raises:
            sqlite3.Error: main.db cannot be written (a full disk): the caller logs what it knows.
        """
        main = open_main(main_db_path())
        try:
            main.execute(
                """UPDATE sessions SET status = 'crashed', stopped_at = COALESCE(stopped_at, ?),
                                       capture_status = 'failed', capture_error = ?,
                                       capture_rows_lost = MAX(capture_rows_lost, ?) WHERE id = ?""",
                (utc_now(), reason, rows_lost, self.id),
            )
        finally:
            main.close()
