"""A normalized dump of what capture writes, to show a refactoring changed no row, body or export.

`python -m tests.golden OUT` records three sessions with the code as it stands: the export tests'
in-process session (a tool loop, a subagent, a refused request, an MCP call, a WebSocket turn), the
recorded fixture streams fed through the recorder in 7-byte chunks, and `capsem demo` (a real
mitmdump against the emulator). It writes every table of each session.db (blobs decompressed) and
its HAR and JSONL exports, with what differs from run to run (ids drawn at random, clocks, ports,
pids, paths) replaced by stable tokens. Run it before and after a change and `diff` the two files.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from addons.messages import Route
from capsem.packed import unzstd
from tests.cli.export_session import build_session
from tests.recording import RecorderHarness, ended, head, response

ROOT = Path(__file__).resolve().parent.parent
CAPSEM = str(Path(sys.executable).parent / "capsem")
FIXTURES = ROOT / "tests" / "fixtures"
STREAMS = {
    "anthropic": ("anthropic", "/v1/messages", "api.anthropic.com"),
    "openai_chat": ("openai", "/v1/chat/completions", "api.openai.com"),
    "openai_responses": ("openai", "/v1/responses", "api.openai.com"),
    "gemini": (
        "gemini",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        "generativelanguage.googleapis.com",
    ),
}
VOLATILE = re.compile(
    r"\b\d{8}-\d{6}-[0-9a-f]{4}\b"  # session ids
    r"|\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?Z?\b"  # ISO times
    r"|/tmp/[^\s\"',]+"  # paths
    r"|\b1[0-9]{9}(?:\.\d+)?\b"  # unix times
    r"|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"  # uuids (mitmproxy flow ids)
    r"|127\.0\.0\.1:\d+"  # client addresses
    r"|\b\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT"  # Date headers
)
CLOCK_COLUMNS = re.compile(
    r"(^|_)(at|time|timestamp|duration|ms|port|pid|ts|started|ended|seconds|latency)(_|$)"
)
# In the demo the emulator's answers carry random ids, so their hashes differ from run to run.
DEMO_VOLATILE = re.compile(
    r"(^|_)(at|time|timestamp|duration|ms|port|pid|ts|started|ended|seconds|latency|hash|sha256)(_|$)"
)


def fixture_session(folder: Path) -> Path:
    """Every recorded fixture stream through the recorder, in 7-byte chunks, at fixed times."""
    rec = RecorderHarness(folder)
    t = 1_800_000_000.0
    for api, (provider, path, host) in STREAMS.items():
        for i, sse in enumerate(sorted((FIXTURES / api).glob("*.sse"))):
            key, t = f"{api}{i}", t + 1
            req = head(key, started=t, host=host, path=path)
            resp = response(200, "text/event-stream", started=t + 0.01)
            route = Route(provider, api)
            rec.open(req, resp, route, "sse")
            data = sse.read_bytes()
            for n in range(0, len(data), 7):
                rec.chunk(key, t + 0.02 + n / 1e6, data[n : n + 7])
            rec.close(ended(req, resp=resp, at=t + 0.5, route=route, streamed=True, response_size=len(data),
                            request_body=json.dumps({"model": "m", "stream": True}).encode()))  # fmt: skip
    rec.writer.commit()
    rec.shutdown()
    return folder / "session.db"


def _cell(name: str, value: object, ids: dict[str, str]) -> object:
    if isinstance(value, bytes):
        try:
            text = unzstd(value)
        except Exception:
            text = None
        return _text(text, ids) if text is not None else f"<{len(value)} bytes>"
    if CLOCK_COLUMNS.search(name) and isinstance(value, (int, float)):
        return "<clock>"
    if name == "chunks" and isinstance(value, str):  # response_chunks: [[decoded end, ms], ...]
        return json.dumps([[end, "<clock>"] for end, _ in json.loads(value)])
    if isinstance(value, str):
        return _text(value, ids)
    return value


def _text(text: str, ids: dict[str, str]) -> str:
    text = VOLATILE.sub("<v>", text)
    return re.sub(
        r"\b(?:[0-9a-f]{12}|[0-9a-f]{16})\b", lambda m: ids.setdefault(m.group(), f"<id{len(ids)}>"), text
    )


def dump_db(db: Path, out: list[str], volatile: bool) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ids: dict[str, str] = {}
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    for table in names:
        cur = conn.execute(f'SELECT * FROM "{table}"')  # names from sqlite_master
        cols = [d[0] for d in cur.description]
        lines = []
        for row in cur:
            cells = {c: _cell(c, v, ids) for c, v in zip(cols, row, strict=True)}
            if volatile:
                cells = {c: ("<clock>" if DEMO_VOLATILE.search(c) else v) for c, v in cells.items()}
            lines.append(json.dumps(cells, sort_keys=True, default=str))
        out.append(f"== {db.parent.name[-4:] if not volatile else 'demo'}/{table} ({len(lines)} rows)")
        out.extend(sorted(lines) if volatile else lines)
    conn.close()


def exports(home: Path, session: str, out: list[str]) -> None:
    env = {**os.environ, "CAPSEM_HOME": str(home)}
    for kind in ("har", "jsonl"):
        run = subprocess.run([CAPSEM, "export", kind, session],
                             env=env, capture_output=True, text=True, check=False)  # fmt: skip
        ids: dict[str, str] = {}
        out.append(f"== export {kind} {session[-4:]} rc={run.returncode}")
        out.append(
            _text(
                re.sub(r'"(time|startedDateTime|[a-z_]*_at|[a-z_]*ms)": [0-9.]+', r'"\1": 0', run.stdout), ids
            )
        )


def main(target: str) -> None:
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        db = build_session(home, t0=1_800_000_000.0)
        dump_db(db, out, volatile=False)
        exports(home, db.parent.name, out)
        fixtures = home / "sessions" / "20261123-120000-f1f1"
        fixtures.mkdir(parents=True)
        dump_db(fixture_session(fixtures), out, volatile=False)
        demo_home = home / "demo"
        subprocess.run([CAPSEM, "demo"], env={**os.environ, "CAPSEM_HOME": str(demo_home)},
                       check=True, capture_output=True)  # fmt: skip
        (demo,) = (demo_home / "sessions").iterdir()
        dump_db(demo / "session.db", out, volatile=True)
    Path(target).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
