"""Log lines through the one scrubber (`capsem/log_scrub.py`): the message, its arguments, its
traceback and stack, on every handler of the process, once."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator

import pytest

from capsem import log_scrub
from capsem.log_scrub import UNSCRUBBABLE, ScrubbedStream, ScrubbingFilter, scrub_logs
from capsem.redact import Scrubber

SLACK = "T0123ABCD/B0123ABCD/abcdefghijklmnopqrstuvwx"
TELEGRAM = "123456789:AAabcdefghijklmnopqrstuvwxyz0123456"
GITHUB = "ghp_" + "a1B2c3D4e5" * 3 + "123456"


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose two handlers write to one buffer, the filter on both."""
    out = io.StringIO()
    logger = logging.getLogger("tests.log_scrub")
    logger.propagate = False
    handlers = [logging.StreamHandler(out), logging.StreamHandler(out)]
    scrubbing = ScrubbingFilter(Scrubber())
    for handler in handlers:
        handler.addFilter(scrubbing)
        logger.addHandler(handler)
    try:
        yield logger, out
    finally:
        for handler in handlers:
            logger.removeHandler(handler)


def test_a_path_in_a_message_or_its_arguments_is_scrubbed_for_every_handler(logged):
    logger, out = logged
    logger.warning("capsem: policy rule watch warns: POST hooks.slack.com:443/services/%s", SLACK)
    logger.warning(f"GET api.telegram.org/bot{TELEGRAM}/getMe")
    written = out.getvalue()
    assert SLACK not in written and TELEGRAM not in written
    assert written.count("hooks.slack.com:443/services/[redacted hash:") == 2  # both handlers, scrubbed once
    assert written.count("api.telegram.org/bot[redacted hash:") == 2


def test_a_traceback_and_a_stack_are_scrubbed_with_the_message(logged):
    logger, out = logged
    try:
        raise ValueError(f'cannot parse {{"token": "{GITHUB}"}}')
    except ValueError:
        logger.warning("capsem: response hook failed", exc_info=True, stack_info=True)
    written = out.getvalue()
    assert GITHUB not in written
    assert "Traceback (most recent call last)" in written and "ValueError: cannot parse" in written
    assert "Stack (most recent call last)" in written


def test_a_line_that_cannot_be_formatted_is_left_out_never_raised(logged):
    logger, out = logged
    logging.raiseExceptions, before = False, logging.raiseExceptions
    try:
        logger.warning("%d rows of %s", GITHUB)  # wrong arguments: getMessage raises
    finally:
        logging.raiseExceptions = before
    assert GITHUB not in out.getvalue() and UNSCRUBBABLE in out.getvalue()


def test_the_process_filter_goes_on_every_root_handler_and_the_last_resort(monkeypatch):
    monkeypatch.setattr(log_scrub, "_FILTER", None)
    root = logging.getLogger()
    handler = logging.StreamHandler(io.StringIO())
    root.addHandler(handler)
    try:
        scrubbing = scrub_logs(Scrubber())
        assert scrubbing in handler.filters and scrubbing in logging.lastResort.filters
        assert scrub_logs() is scrubbing  # one per process
        late = logging.StreamHandler(io.StringIO())
        root.addHandler(late)
        scrub_logs()
        assert scrubbing in late.filters  # installed again: a handler added since gets it
        root.removeHandler(late)
    finally:
        root.removeHandler(handler)
        logging.lastResort.removeFilter(log_scrub._FILTER)


def test_an_uncaught_exception_in_a_thread_is_logged_scrubbed(monkeypatch, capsys):
    monkeypatch.setattr(log_scrub, "_FILTER", None)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    root = logging.getLogger()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root.addHandler(handler)
    try:
        scrub_logs(Scrubber(), uncaught=True)

        def fail() -> None:
            raise RuntimeError(f"body: {GITHUB}")

        thread = threading.Thread(target=fail, name="capsem-test")
        thread.start()
        thread.join()
    finally:
        root.removeHandler(handler)
        logging.lastResort.removeFilter(log_scrub._FILTER)
    assert "uncaught RuntimeError in thread capsem-test" in out.getvalue()
    assert GITHUB not in out.getvalue() + capsys.readouterr().err


def test_a_scrubbed_stream_scrubs_each_line_written():
    out = io.StringIO()
    stream = ScrubbedStream(out, ScrubbingFilter(Scrubber()).scrub)
    print(f"127.0.0.1:5000: POST https://hooks.slack.com/services/{SLACK}", file=stream)
    stream.flush()
    written = out.getvalue()
    assert (
        SLACK not in written
        and "hooks.slack.com/services/[redacted hash:" in written
        and written.endswith("]\n")
    )
