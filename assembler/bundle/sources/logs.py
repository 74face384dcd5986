"""JSON-lines logs into `logs`: the six-key structured format and generic JSON lines.

The six-key format (weakincentives `collect_all_logs`: timestamp, level, logger, event,
message, context) maps column for column. A generic line (structlog, pino, bunyan, python-json-
logger...) is mapped by the usual key names; whatever is not mapped goes to `context`, and the
whole line is kept in `raw`. A line's session is explicit when its context names one
(`context.session_id`, `context.run_context.session_id`); otherwise correlation decides later.
"""

from __future__ import annotations

from typing import IO, Any

from assembler.bundle.sources.base import SourceContext, as_text, dumps, json_lines, normalize_ts

TIME_KEYS = ("timestamp", "ts", "time", "@timestamp", "datetime", "asctime", "created", "date")
LEVEL_KEYS = ("level", "levelname", "severity", "lvl", "log.level", "loglevel")
LOGGER_KEYS = ("logger", "logger_name", "name", "component", "module", "source")
EVENT_KEYS = ("event", "event_type", "evt", "type")
MESSAGE_KEYS = ("message", "msg", "text", "log", "body")
LEVEL_NAMES = {
    "warn": "WARNING", "warning": "WARNING", "err": "ERROR", "error": "ERROR", "fatal": "CRITICAL",
    "critical": "CRITICAL", "crit": "CRITICAL", "info": "INFO", "debug": "DEBUG", "trace": "DEBUG",
    "notice": "INFO", "emerg": "CRITICAL", "alert": "CRITICAL",
}  # fmt: skip
# pino / bunyan numeric levels
LEVEL_NUMBERS = {10: "DEBUG", 20: "DEBUG", 30: "INFO", 40: "WARNING", 50: "ERROR", 60: "CRITICAL"}


def normalize_level(value: Any) -> str:
    """DEBUG, INFO, WARNING, ERROR or CRITICAL where the value maps to one; else upper-cased text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return LEVEL_NUMBERS.get(int(value) // 10 * 10, str(value))
    text = str(value or "INFO").strip()
    return LEVEL_NAMES.get(text.lower(), text.upper())


def session_of(context: Any) -> str | None:
    """An explicit session id in a log context, or None."""
    if not isinstance(context, dict):
        return None
    for holder in (context, context.get("run_context")):
        if isinstance(holder, dict) and isinstance(holder.get("session_id"), str) and holder["session_id"]:
            return holder["session_id"]
    return None


def _pop_first(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """Pop the first non-empty value under `keys` (empty ones before it are dropped too)."""
    for key in keys:
        if key in obj:
            value = obj.pop(key)
            if value not in (None, ""):
                return value
    return None


def map_generic(obj: dict[str, Any], default_logger: str) -> dict[str, Any]:
    """A generic JSON log line as `logs` columns (unmapped keys become the context)."""
    rest = dict(obj)
    context = rest.pop("context", None)
    when = _pop_first(rest, TIME_KEYS)
    level = _pop_first(rest, LEVEL_KEYS)
    log_name = _pop_first(rest, LOGGER_KEYS)
    event = _pop_first(rest, EVENT_KEYS)
    message = _pop_first(rest, MESSAGE_KEYS)
    if isinstance(context, dict):
        context = {**rest, **context} if rest else context
    elif context is not None:
        context = {**rest, "context": context}
    else:
        context = rest
    return {
        "timestamp": normalize_ts(when),
        "level": normalize_level(level),
        "logger": as_text(log_name) or default_logger,
        "event": as_text(event),
        "message": as_text(message) if message is not None else as_text(event) or dumps(obj),
        "context": context,
    }


def import_logs(ctx: SourceContext, stream: IO[bytes]) -> None:
    """Every JSON line of `stream` into `logs`."""
    default_logger = ctx.path.name
    for number, obj, text in json_lines(ctx, stream):
        if not isinstance(obj, dict):
            ctx.malformed(number, f"a JSON {type(obj).__name__}, not an object")
            continue
        row = map_generic(obj, default_logger)
        if row["timestamp"] is None and obj.get("timestamp") not in (None, ""):
            ctx.warn(f"line {number}: timestamp {obj.get('timestamp')!r} is not a time; kept in raw")
        session_id = session_of(row["context"])
        ctx.insert(
            "logs",
            {
                **row,
                "context": dumps(row["context"]),
                "session_id": session_id,
                "correlation": "explicit" if session_id else None,
                "source_id": ctx.source_id,
                "line": number,
                "raw": text,
            },
        )
