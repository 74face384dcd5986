"""One mitmdump run = one session: its directory, its main.db row, its end.

`start()` recovers sessions whose recorder died (`running` in main.db, process gone →
`crashed`, rolled up from their session.db) and registers this one as `running`, then applies
the retention rules to older sessions in a background thread. `stop()` rolls it up and marks it
`stopped`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from capsem.ids import new_session_id, utc_now
from capsem.paths import session_db_path
from capsem.rollup import finish_session, open_main, recover_crashed, register_session

logger = logging.getLogger(__name__)


@dataclass
class Session:
    id: str
    mode: str = "mitmdump"
    command: str | None = None

    @property
    def db_path(self) -> Path:
        return session_db_path(self.id)

    @classmethod
    def start(
        cls, session_id: str | None = None, *, mode: str = "mitmdump", command: str | None = None
    ) -> Session:
        session = cls(session_id or new_session_id(), mode, command)
        session.db_path.parent.mkdir(parents=True, exist_ok=True)
        main = open_main()
        try:
            for crashed in recover_crashed(main, exclude=session.id):
                logger.warning(
                    "capsem: session %s was left running by a dead process; marked crashed", crashed
                )
            register_session(main, session.id, mode=mode, command=command, created_at=utc_now())
        finally:
            main.close()
        threading.Thread(target=_tidy_up, name="capsem-retention", daemon=True).start()
        return session

    def stop(self, status: str = "stopped") -> None:
        main = open_main()
        try:
            finish_session(main, self.id, status)
        finally:
            main.close()


def _tidy_up() -> None:
    """Start-up retention (culls, compression of old sessions); a failure is only a warning."""
    try:
        from assembler.retention import auto_retention

        report = auto_retention()
        if report and report.actions:
            logger.info("capsem: retention compressed %d and culled %d old sessions",
                        len(report.of("vacuum")), len(report.of("cull")))  # fmt: skip
        for error in report.errors if report else []:
            logger.warning("capsem: retention: %s", error)
    except Exception as exc:  # never let housekeeping disturb capture
        logger.warning("capsem: retention at start-up failed: %r", exc)
