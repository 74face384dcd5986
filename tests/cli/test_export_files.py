"""`capsem export har|jsonl|parquet` on sessions built with the recorder (an Anthropic tool loop
with planted secrets, an MCP call, a WebSocket turn) and on the session recorded through real
mitmdump: the HAR validates against HAR 1.2 and reads back with a HAR library, JSONL records hold
each call's whole items, Parquet reads back in DuckDB with the session databases' row counts,
no planted secret is in any export, and bad input gets a one-line error."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import duckdb
import jsonschema
import pyarrow.parquet as pq
import zstandard
from haralyzer import HarEntry, HarParser

from assembler.sessiondb import db_file
from capsem.store.bodies import read_body
from capsem.store.schema import STORAGE_TABLES
from capsem.store.schema import connect as connect_db
from tests.bundle.conftest import devtools
from tests.cli.conftest import recorded_id, run, session_db
from tests.cli.export_session import NEEDLE, SECRETS, build_session

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "har" / "har-1.2.schema.json").read_text())
SID = "20261123-120000-e0e0"


def gzip_db(db: Path) -> Path:
    with open(db, "rb") as src, gzip.open(db.with_name("session.db.gz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    for name in ("session.db", "session.db-wal", "session.db-shm"):
        db.with_name(name).unlink(missing_ok=True)
    return db.with_name("session.db.gz")


def counts(db: Path) -> dict[str, int]:
    """Rows per table and view, but the compressed storage (exported decoded: bodies, item_contents)."""
    conn = connect_db(db, readonly=True)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                            "AND name NOT IN ('sqlite_sequence', '_capsem_migrations')")
                 if r[0] not in STORAGE_TABLES]  # fmt: skip
        return {n: conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        conn.close()


# --- HAR ------------------------------------------------------------------------------------------


def test_har_validates_reads_back_with_whole_bodies_and_websocket_messages(capsem_home, tmp_path):
    db = build_session(capsem_home, SID)
    out = tmp_path / "run.har"
    said = run("export", "har", SID, "-o", str(out))
    assert f"wrote {out}: 6 entries of session {SID}" in said
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    har = HarParser.from_file(out)  # a HAR library reads it back, bodies and times included
    assert (har.version, har.creator["name"]) == ("1.2", "capsem")
    read = [HarEntry(e) for e in har.har_data["entries"]]
    assert [e.url for e in read] == ["https://api.anthropic.com/v1/messages"] * 3 + [
        "https://pypi.org/simple/requests/?a=1&b=", "http://127.0.0.1:8000/mcp",
        "wss://api.openai.com/v1/responses"]  # fmt: skip
    assert [e.status for e in read] == [200, 200, 200, 0, 200, 101] and read[0].startTime.tzinfo is not None
    conn = sqlite3.connect(db)
    try:
        for e, (table, row_id) in zip(read[:3] + read[4:5], [("model_calls", 1), ("model_calls", 2),
                                                              ("model_calls", 3), ("mcp_calls", 1)],
                                      strict=True):  # fmt: skip
            assert e.request.text.encode() == read_body(conn, row_id, "request", table)[0]
            assert e.response.text.encode() == read_body(conn, row_id, "response", table)[0]
    finally:
        conn.close()
    entries = doc["log"]["entries"]
    kept = entries[:3] + entries[4:5]
    assert all(e["request"]["postData"]["comment"].startswith("whole decoded body") for e in kept)
    assert all(e["response"]["content"]["comment"].startswith("whole decoded body") for e in kept)
    lost = entries[3]  # a failed request: no answer, its error said
    assert lost["comment"] == "error: connection refused" and lost["_capsem"]["decision"] == "error"
    assert lost["request"]["queryString"] == [{"name": "a", "value": "1"}, {"name": "b", "value": ""}]
    first = entries[0]
    assert {"name": "x-api-key", "value": first["request"]["headers"][1]["value"]} in first["request"][
        "headers"
    ]
    assert first["request"]["headers"][1]["value"].startswith("hash:")
    assert first["timings"]["send"] + first["timings"]["wait"] + first["timings"]["receive"] == first["time"]
    ws = entries[5]
    assert ws["_resourceType"] == "websocket"
    kinds = [(m["type"], json.loads(m["data"])["type"]) for m in ws["_webSocketMessages"]]
    assert kinds == [("send", "response.create"), ("receive", "response.created"),
                     ("receive", "response.output_text.delta"), ("receive", "response.completed")]  # fmt: skip


IMPORT_IN_DEVTOOLS = """(async () => {
  const HAR = await import('./models/har/har.js');
  const requests = HAR.Importer.Importer.requestsFromHARLog(new HAR.HARFormat.HARLog(JSON.parse(%s).log));
  const out = [];
  for (const r of requests) {
    const content = await r.requestContentData();
    out.push({url: r.url(), status: r.statusCode, type: r.resourceType().name(),
              sent: (await r.requestFormData()) || null, received: content.text ?? null, frames: r.frames().length});
  }
  return JSON.stringify(out);
})()"""


def devtools_import(har: str, profile: Path) -> list[dict]:
    """`har` read by Chromium's own DevTools HAR importer (the code behind Network → Import HAR)."""
    with devtools(profile) as page:
        page.call("Page.enable")
        page.call("Page.navigate", url="devtools://devtools/bundled/devtools_app.html")
        page.wait_event("Page.loadEventFired")
        got = page.call("Runtime.evaluate", expression=IMPORT_IN_DEVTOOLS % json.dumps(har), awaitPromise=True,
                        returnByValue=True)  # fmt: skip
    assert "exceptionDetails" not in got["result"], got
    return json.loads(got["result"]["result"]["value"])


def test_har_opens_in_chromium_devtools(capsem_home, tmp_path):
    build_session(capsem_home, SID)
    out = tmp_path / "run.har"
    run("export", "har", "-o", str(out))
    doc = json.loads(out.read_text())
    requests = devtools_import(out.read_text(), tmp_path / "profile")
    assert [(r["url"], r["status"], r["type"]) for r in requests] == [
        (e["request"]["url"], e["response"]["status"], e["_resourceType"]) for e in doc["log"]["entries"]
    ]
    for r, e in zip(requests[:3], doc["log"]["entries"], strict=False):
        assert (r["sent"], r["received"]) == (
            e["request"]["postData"]["text"],
            e["response"]["content"]["text"],
        )
    assert requests[5]["type"] == "websocket" and requests[5]["frames"] == 4


def test_har_of_a_real_recording_and_previews(home, tmp_path):
    """The mitmdump recording (streamed Anthropic, OpenAI Chat): one entry per flow, valid; a flow
    without a kept body carries its preview, marked as one."""
    sid = recorded_id(home)
    conn = sqlite3.connect(session_db(home))
    conn.execute("DELETE FROM event_body_blobs WHERE row_id = 1 AND source_table = 'model_calls'")
    conn.commit()
    flows = conn.execute("SELECT COUNT(*) FROM net_events").fetchone()[0]
    conn.close()
    out = tmp_path / "real.har"
    run("export", "har", sid[:12], "-o", str(out))
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert len(doc["log"]["entries"]) == flows
    first, second = doc["log"]["entries"][:2]
    assert first["request"]["postData"]["comment"].startswith("preview: the first ")
    assert "whole bodies are kept for model and MCP calls only" in first["request"]["postData"]["comment"]
    # the next request's body was stored on top of the missing one: its preview, and why
    assert (
        "the whole body cannot be read: body 3 is built on body 1" in second["request"]["postData"]["comment"]
    )
    assert second["response"]["content"]["comment"].startswith("whole decoded body")
    assert all(e["response"]["content"].get("text") for e in doc["log"]["entries"])


def test_bodies_another_capsem_stored_differently_fall_back_to_previews(capsem_home, tmp_path):
    db = build_session(capsem_home, SID)
    conn = sqlite3.connect(db)
    conn.execute(
        "ALTER TABLE body_chunks RENAME COLUMN frame TO frame_elsewhere"
    )  # a layout this reader lacks
    conn.commit()
    conn.close()
    out = tmp_path / "run.har"
    run("export", "har", "-o", str(out))
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    comment = doc["log"]["entries"][0]["request"]["postData"]["comment"]
    assert (
        comment.startswith("preview: the first ")
        and "the whole body cannot be read: no such column" in comment
    )
    run("export", "parquet", "-o", str(tmp_path / "wh"))
    bodies = pq.read_table(tmp_path / "wh" / "bodies.parquet", columns=["body", "error"]).to_pylist()
    assert bodies and all(b["body"] is None and "no such column" in b["error"] for b in bodies)


# --- JSONL ----------------------------------------------------------------------------------------


def test_jsonl_one_record_per_call_with_its_items_and_tool_results(capsem_home, tmp_path):
    build_session(capsem_home, SID)
    build_session(capsem_home, "20261120-090000-a1a1", t0=1763629200.0)
    text = run("export", "jsonl", SID, "20261120-090000-a1a1", "-o", "-")
    records = [json.loads(line) for line in text.splitlines()]
    assert [(r["session_id"], r["model_call_id"]) for r in records] == [
        (SID, 1), (SID, 2), (SID, 3), (SID, 4), ("20261120-090000-a1a1", 1), ("20261120-090000-a1a1", 2),
        ("20261120-090000-a1a1", 3), ("20261120-090000-a1a1", 4)]  # fmt: skip
    second = records[1]
    assert second["event_id"] and second["trace_id"] == records[0]["trace_id"]
    assert second["turn_id"] == records[0]["turn_id"] and second["parent"] is None
    assert second["model"] == "claude-sonnet-4-5" and second["usage"]["input_tokens"] == 180
    assert second["cost"]["usd"] > 0
    assert [(i["kind"], i["role"], i["new"]) for i in second["input"]] == [
        ("system", "system", False), ("tool_definition", None, False), ("message", "user", False),
        ("message", "assistant", True), ("tool_call", "assistant", True), ("tool_result", "user", True)]  # fmt: skip
    assert second["input"][3]["content"]["content"][0] == {"text": "Reading it.", "type": "text"}
    assert second["input"][4]["content"]["type"] == "tool_use"  # each tool call and result an item of its own
    assert second["input"][0]["content"] == "You are terse."
    assert [o["kind"] for o in second["output"]] == ["text", "tool_call"] and second["output"][0][
        "content"
    ] == "Done."
    sub = records[2]  # the subagent: in the turn of the call that started it, its parent the Task call
    assert sub["model"] == "claude-haiku-4-5" and sub["turn_id"] == second["turn_id"]
    assert sub["parent"] == {"tool_call_id": 2, "tool_call_event_id": second["tool_calls"][0]["event_id"],
                             "model_call_id": 2, "tool_name": "Task"}  # fmt: skip
    assert [i["content"] for i in sub["input"]][-1] == {"content": "Count the files in src", "role": "user"}
    (tool,) = records[0]["tool_calls"]
    assert tool["tool_name"] == "read_env" and tool["arguments"] == {"path": ".env"}
    assert tool["result"]["whole"] and "GITHUB_TOKEN=[redacted" in json.dumps(tool["result"]["content"])
    assert records[0]["output"][1]["kind"] == "tool_call"
    lean = [json.loads(line) for line in run("export", "jsonl", "--only-new", SID).splitlines()]
    assert [("content" in i, i["new"]) for i in lean[1]["input"]] == [(False, False)] * 3 + [(True, True)] * 3
    assert lean[1]["input"][3] == second["input"][3] and lean[0] == records[0]
    out = tmp_path / "calls.jsonl"
    said = run("export", "jsonl", "--since", "2026-11-21", "-o", str(out))
    assert "wrote" in said and "4 model calls from 1 session" in said
    assert len(out.read_text().splitlines()) == 4


# --- Parquet --------------------------------------------------------------------------------------


def test_parquet_reads_back_in_duckdb_with_the_row_counts(home, tmp_path):
    build_session(home, SID)
    old = build_session(home, "20261120-090000-a1a1", t0=1763629200.0)
    expected: dict[str, int] = {}
    for db in (session_db(home), home / "sessions" / SID / "session.db", old):
        for table, n in counts(db).items():
            expected[table] = expected.get(table, 0) + n
    gzip_db(old)  # a vacuumed session is exported from its archive
    out = tmp_path / "warehouse"
    said = run("export", "parquet", "-o", str(out))
    assert "from 3 sessions" in said
    con = duckdb.connect()
    for table, n in expected.items():
        got = con.execute(
            f"SELECT COUNT(*), COUNT(DISTINCT session_id) FROM '{out / table}.parquet'"
        ).fetchone()
        assert got[0] == n, table
    assert con.execute(f"SELECT COUNT(*) FROM '{out}/sessions.parquet'").fetchone()[0] == 3
    # every kept body, decoded whole
    assert (
        con.execute(f"SELECT COUNT(*) FROM '{out}/bodies.parquet'").fetchone()[0]
        == expected["event_body_blobs"]
    )
    where = "source_table = 'model_calls' AND row_id = 2 AND direction = 'request'"
    body = con.execute(f"SELECT body, utf8, error FROM '{out}/bodies.parquet' WHERE session_id = ? AND {where}",
                       [SID]).fetchone()  # fmt: skip
    conn = sqlite3.connect(home / "sessions" / SID / "session.db")
    assert body == (read_body(conn, 2)[0].decode(), True, None)
    conn.close()
    cost = con.execute(f"SELECT session_id, SUM(estimated_cost_usd), SUM(input_tokens) FROM '{out}/model_calls.parquet' "
                       "GROUP BY 1 ORDER BY 1").fetchall()  # fmt: skip
    assert [c[0] for c in cost] == sorted([recorded_id(home), SID, "20261120-090000-a1a1"])
    assert (
        con.execute(f"SELECT typeof(input_tokens) FROM '{out}/model_calls.parquet' LIMIT 1").fetchone()[0]
        == "BIGINT"
    )
    run("export", "parquet", "--since", "2026-11-21", "-o", str(out))
    assert (
        con.execute(f"SELECT COUNT(DISTINCT session_id) FROM '{out}/net_events.parquet'").fetchone()[0] == 2
    )
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_parquet_keeps_values_that_do_not_fit_their_column_and_older_schemas(capsem_home, tmp_path):
    db = build_session(capsem_home, SID)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE net_events SET port = 'not-a-port' WHERE id = 1")  # SQLite allows it
    conn.commit()
    conn.close()
    old = build_session(capsem_home, "20261120-090000-a1a1", t0=1763629200.0)
    conn = sqlite3.connect(old)
    conn.execute("DROP INDEX idx_model_calls_turn_id")
    conn.execute("ALTER TABLE model_calls DROP COLUMN turn_id")  # as an older capsem wrote it
    conn.commit()
    conn.close()
    out = tmp_path / "wh"
    run("export", "parquet", "-o", str(out))
    ports = pq.read_table(out / "net_events.parquet", columns=["session_id", "port"]).to_pylist()
    assert {"session_id": SID, "port": "not-a-port"} in ports and {"session_id": SID, "port": "443"} in ports
    turns = pq.read_table(out / "model_calls.parquet", columns=["session_id", "turn_id"]).to_pylist()
    assert [t["turn_id"] is None for t in turns] == [True] * 4 + [False] * 4


# --- secrets --------------------------------------------------------------------------------------


def _strings(value) -> list[str]:
    if isinstance(value, bytes):
        try:
            return [zstandard.ZstdDecompressor().decompress(value).decode("utf-8", "replace")]
        except zstandard.ZstdError:
            return [value.decode("utf-8", "replace")]
    return [str(value)] if value is not None else []


def test_no_planted_secret_in_any_export(capsem_home, tmp_path):
    db = build_session(capsem_home, SID)
    whole = b"".join(read_body(sqlite3.connect(db), i, d)[0] for i in (1, 2) for d in ("request", "response"))
    assert b"[redacted" in whole  # the bodies were kept, with the secrets replaced
    har, jsonl, wh = tmp_path / "s.har", tmp_path / "s.jsonl", tmp_path / "wh"
    run("export", "har", "-o", str(har))
    run("export", "jsonl", "-o", str(jsonl))
    run("export", "parquet", "-o", str(wh))
    texts = [har.read_text(), jsonl.read_text()]
    for path in wh.glob("*.parquet"):
        for row in pq.read_table(path).to_pylist():
            texts += [s for v in row.values() for s in _strings(v)]
    found = "\n".join(texts)
    assert "GITHUB_TOKEN=[redacted" in found and "x-api-key" in found
    for name, secret in SECRETS.items():
        assert secret not in found, name
    assert NEEDLE not in found


# --- bad input ------------------------------------------------------------------------------------


def test_errors_are_one_line_and_lose_nothing(capsem_home, tmp_path):
    build_session(capsem_home, SID)
    said = run("export", "har", "nosuchsession", "-o", str(tmp_path / "x.har"), code=1)
    assert "Error: no session.db or session.db.gz for session 'nosuchsession'" in said
    said = run("export", "jsonl", "20991231-000000-dead", code=1)
    assert "no session.db" in said
    said = run("export", "har", SID, "-o", str(tmp_path / "missing" / "x.har"), code=1)
    assert said == f"Error: cannot write {tmp_path / 'missing' / 'x.har'}: No such file or directory\n"
    said = run("export", "har", SID, "-o", str(tmp_path), code=1)
    assert "is a directory" in said
    assert (
        run("export", "jsonl", "--since", "2099-01-01", code=1)
        == "Error: no session with a database since 2099-01-01\n"
    )
    said = run("export", "parquet", "--since", "yesterday", "-o", str(tmp_path / "wh"), code=1)
    assert "--since 'yesterday' is not a date" in said
    blocker = tmp_path / "file"
    blocker.write_text("x")
    said = run("export", "parquet", "-o", str(blocker), code=2)  # click refuses a file for DIR
    # an existing export stays whole when a later one fails
    good = tmp_path / "good.jsonl"
    run("export", "jsonl", SID, "-o", str(good))
    before = good.read_bytes()
    broken = build_session(capsem_home, "20261122-080000-bad0", t0=1763798400.0)
    data = bytearray(broken.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # every page after the schema is garbage
    broken.write_bytes(bytes(data))
    said = run("export", "jsonl", SID, "20261122-080000-bad0", "-o", str(good), code=1)
    assert "Error: cannot read session 20261122-080000-bad0" in said and "Traceback" not in said
    assert good.read_bytes() == before
    said = run("export", "har", "20261122-080000-bad0", "-o", str(tmp_path / "b.har"), code=1)
    assert "Error: cannot read session 20261122-080000-bad0" in said
    assert not (tmp_path / "b.har").exists()
    wh = tmp_path / "wh"
    said = run("export", "parquet", "-o", str(wh), code=1)
    assert "skipped session 20261122-080000-bad0:" in said and "from 1 session (" in said
    assert duckdb.connect().execute(f"SELECT COUNT(*) FROM '{wh}/model_calls.parquet'").fetchone()[0] == 4
    gz = gzip_db(broken)
    gz.write_bytes(gz.read_bytes()[:100])  # a damaged archive
    said = run("export", "jsonl", "20261122-080000-bad0", code=1)
    assert "cannot decompress" in said and db_file("20261122-080000-bad0") == gz
