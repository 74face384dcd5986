"""Log lines carry only what the record may carry: every line a capsem process logs goes through
the one scrubber (`capsem.redact.Scrubber`) before any handler writes it.

A policy rule that warns, a budget, a failed hook or a traceback may name a request's path, query,
header or body, which the database stores scrubbed; the session's `mitmdump.log` must not keep it
raw. One `ScrubbingFilter` per process sits on every handler of the root logger (mitmproxy's
terminal log in mitmdump, the recorder's stderr) and on `logging.lastResort` (the CLI sets no
handler): it scrubs the formatted message once, its traceback and stack included (an exception's
text may quote a body), and freezes the result into `record.msg` (no args, no `exc_info`), so
every handler after it writes the scrubbed text. The processes install it where they start:
mitmdump (`addons/proxy/logs.py`, which also puts mitmproxy's own flow lines through it), the
recorder (`addons/recorder/main.py`), the command line (`assembler/cli.py`).
"""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from capsem.scrubbers import configured_scrubber

if TYPE_CHECKING:
    from capsem.redact import Scrubber

SCRUBBED = "capsem_scrubbed"
"""The attribute a record carries once scrubbed (the next handler does not scrub it again)."""
UNSCRUBBABLE = "capsem: a log line could not be scrubbed; it is left out"


class ScrubbingFilter(logging.Filter):
    """Scrubs a record's whole text once and freezes it into the record (see the module doc)."""

    def __init__(self, scrubber: Scrubber | None = None) -> None:
        super().__init__()
        self._scrubber = scrubber
        self._lock = threading.Lock()
        self._making = threading.local()

    @property
    def scrubber(self) -> Scrubber | None:
        """The scrubber, made at the first line (a command that logs nothing never loads the rules);
        None while it is being made (a line logged meanwhile comes from loading the rules)."""
        if self._scrubber is None:
            if getattr(self._making, "on", False):
                return None
            self._making.on = True
            try:
                with self._lock:
                    if self._scrubber is None:
                        self._scrubber = configured_scrubber()
            finally:
                self._making.on = False
        return self._scrubber

    def use(self, scrubber: Scrubber) -> None:
        """Scrub with `scrubber` from now on (the recorder's, which knows the session's credentials)."""
        self._scrubber = scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, SCRUBBED, False):
            return True
        try:
            scrubber = self.scrubber
            if scrubber is None:
                return True
            record.msg = scrubber.scrub(full_text(record)) or ""
        except Exception:  # never raise into the caller of `logger.warning`; never write it raw
            record.msg = UNSCRUBBABLE
        record.args = None
        record.exc_info = record.exc_text = record.stack_info = None
        setattr(record, SCRUBBED, True)
        return True

    def scrub(self, text: str) -> str:
        """`text` scrubbed (for output that is no log record: mitmproxy's flow lines)."""
        scrubber = self.scrubber
        return (scrubber.scrub(text) or "") if scrubber is not None else text


_FORMATTER = logging.Formatter()


def full_text(record: logging.LogRecord) -> str:
    """The message with its traceback and stack, as a handler would write them."""
    text = record.getMessage()
    if record.exc_info and not record.exc_text:
        record.exc_text = _FORMATTER.formatException(record.exc_info)
    if record.exc_text:
        text = f"{text}\n{record.exc_text}"
    if record.stack_info:
        text = f"{text}\n{_FORMATTER.formatStack(record.stack_info)}"
    return text


_FILTER: ScrubbingFilter | None = None


def scrub_logs(scrubber: Scrubber | None = None, *, uncaught: bool = False) -> ScrubbingFilter:
    """Put this process's one `ScrubbingFilter` on every handler of the root logger and on
    `logging.lastResort` (again when called again: a handler added since gets it too).

    `scrubber`: the one to use (else the configured rules, made at the first line). `uncaught`:
    an exception no code caught (in any thread) is logged through it too, instead of being printed
    raw to stderr (mitmdump and the recorder; the CLI leaves the interpreter's hooks alone).
    """
    global _FILTER
    if _FILTER is None:
        _FILTER = ScrubbingFilter(scrubber)
    elif scrubber is not None:
        _FILTER.use(scrubber)
    for handler in [*logging.getLogger().handlers, logging.lastResort]:
        if handler is not None and _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
    if uncaught:
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread
    return _FILTER


_UNCAUGHT = logging.getLogger("capsem.uncaught")


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    _UNCAUGHT.error("capsem: uncaught %s", kind.__name__, exc_info=(kind, value, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    _UNCAUGHT.error("capsem: uncaught %s in thread %s", args.exc_type.__name__, name,
                    exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # fmt: skip


class ScrubbedStream(io.TextIOBase):
    """A text stream whose every write goes through `scrub` first (mitmproxy's flow lines, which
    it prints to stdout without the logging module)."""

    def __init__(self, stream: IO[str], scrub: Callable[[str], str]) -> None:
        super().__init__()
        self.stream = stream
        self._scrub = scrub

    def write(self, text: str) -> int:
        self.stream.write(self._scrub(text) if text.strip() else text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()
