"""The ledger against a session recorded through a real mitmdump (tool loops with the real
anthropic and openai SDKs, a request denied by policy): it verifies, and each tampering the
ledger issue lists makes `capsem verify` fail naming what changed; an attestation verifies with
`cryptography` alone (the README's lines, run as written) and fails after one payload byte."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.testclient import TestClient

from assembler.demo import anthropic_loop, openai_loop
from assembler.view.app import create_app
from capsem.ids import new_session_id
from capsem.store.ledger import key_column, unpack
from tests.cli.conftest import run
from tests.conftest import emulated_client, environ

ROOT = Path(__file__).resolve().parents[2]
DENY = "policy:\n  rules:\n    - {name: no-groq, action: deny, host: api.groq.com}\n"


@dataclass(frozen=True)
class Recorded:
    home: Path
    session_id: str


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, emulator) -> Recorded:
    home = tmp_path_factory.mktemp("ledger-home")
    work = tmp_path_factory.mktemp("ledger-work")
    (home / "config.yaml").write_text(DENY)
    session_id = new_session_id()
    with environ(CAPSEM_HOME=str(home)), emulated_client(emulator, work, session_id) as client:
        anthropic_loop(client, lambda _msg: None)
        openai_loop(client, lambda _msg: None)
        denied = client.post(
            "https://api.groq.com/openai/v1/chat/completions", json={"model": "llama", "messages": []}
        )
        assert denied.status_code == 403
    return Recorded(home, session_id)


@pytest.fixture
def home(recorded, capsem_home) -> Path:
    """A copy of the recorded CAPSEM_HOME for this test to damage (CAPSEM_HOME points at it)."""
    shutil.copytree(recorded.home, capsem_home)
    return capsem_home


def db_of(home: Path, session_id: str) -> Path:
    return home / "sessions" / session_id / "session.db"


def sql(db: Path, *statements: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        out = [row for s in statements for row in conn.execute(s).fetchall()]
        conn.commit()
        return out
    finally:
        conn.close()


def test_a_recorded_session_verifies(home, recorded):
    db = db_of(home, recorded.session_id)
    counts = sql(
        db,
        "SELECT (SELECT COUNT(*) FROM tool_calls), (SELECT COUNT(*) FROM tool_responses), "
        "(SELECT COUNT(*) FROM net_events WHERE decision = 'denied'), (SELECT SUM(last_seq) FROM ledger_heads WHERE final)",
    )[0]
    assert counts[0] and counts[1] and counts[2] == 1 and counts[3] > 20  # the triggers ran; a denied call
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        assert 'class="badge ledger verified"' in client.get(f"/s/{recorded.session_id}").text
    assert "Ledger: verifies: " in run("inspect-session", recorded.session_id, "--strict")
    assert "✗" not in run("list-sessions")
    out = run("verify", recorded.session_id)
    assert re.search(
        rf"{recorded.session_id}  verified  [\d,]+ rows in [\d,]+ signed batches, signed end", out
    )
    assert "main.db chain          verified  1 entry" in out
    assert run("verify", "--all") == out
    doc = json.loads(run("verify", recorded.session_id, "--json"))
    (session,) = doc["sessions"]
    assert doc["ok"] is True and session["state"] == "verified" and session["signed_end"] is True
    assert session["problems"] == [] and session["rows"] > 20 and len(session["head_sha256"]) == 64
    assert doc["main_chain"] == {"state": "verified", "entries": 1, "problems": []}


def test_a_changed_cost_is_named(home, recorded):
    db = db_of(home, recorded.session_id)
    ((call_id,),) = sql(db, "SELECT MIN(id) FROM model_calls WHERE estimated_cost_usd IS NOT NULL")
    sql(db, f"UPDATE model_calls SET estimated_cost_usd = estimated_cost_usd / 10 WHERE id = {call_id}")
    out = run("verify", recorded.session_id, code=1)
    assert f"FAILED    model_calls id {call_id}: changed" in out
    doc = json.loads(run("verify", recorded.session_id, "--json", code=1))  # the same exit code
    (session,) = doc["sessions"]
    assert doc["ok"] is False and session["state"] == "failed"
    first = session["problems"][0]
    assert (first["what"], first["table"], first["key"]) == ("changed", "model_calls", call_id)
    # shown where sessions are looked at: inspect-session, list-sessions, the session page
    problem = f"does not verify: model_calls id {call_id}: changed (does not match entry"
    assert f"Ledger: {problem}" in run("inspect-session", recorded.session_id, "--strict", code=1)
    listing = run("list-sessions")
    assert " ✗" in listing and "✗ = does not verify (1 session)" in listing
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        page = client.get(f"/s/{recorded.session_id}").text
    assert 'class="badge ledger error"' in page and problem in page


def test_a_deleted_denied_call_is_named(home, recorded):
    db = db_of(home, recorded.session_id)
    ((net_id,),) = sql(db, "SELECT id FROM net_events WHERE decision = 'denied'")
    sql(db, f"DELETE FROM net_events WHERE id = {net_id}")
    assert f"FAILED    net_events id {net_id}: removed" in run("verify", recorded.session_id, code=1)


def test_an_inserted_row_is_named(home, recorded):
    db = db_of(home, recorded.session_id)
    sql(
        db,
        "INSERT INTO net_events (timestamp, domain, decision) VALUES ('2026-01-01T00:00:00Z', 'x.test', 'allowed')",
    )
    ((new_id,),) = sql(db, "SELECT MAX(id) FROM net_events")
    assert f"FAILED    net_events id {new_id}: added" in run("verify", recorded.session_id, code=1)


def test_a_cut_last_batch_is_noticed(home, recorded):
    """The last batch that held rows goes, with its entries and every head from it on: what is
    left links and is signed, but the session says it stopped and its signed end is gone."""
    db = db_of(home, recorded.session_id)
    ((batch, packed),) = sql(db, "SELECT batch, entries FROM ledger ORDER BY batch DESC LIMIT 1")
    conn = sqlite3.connect(db)
    shapes = {sid: (t, json.loads(c)) for sid, t, c in conn.execute("SELECT * FROM ledger_shapes")}
    for table, key, shape, _digest, _chain in unpack(packed, {sid: t for sid, (t, _) in shapes.items()}):
        columns = shapes[shape][1]
        conn.execute(f"DELETE FROM {table} WHERE {columns[key_column(conn, table, columns)]} = ?", (key,))
    conn.commit()
    conn.close()
    sql(db, f"DELETE FROM ledger WHERE batch >= {batch}", f"DELETE FROM ledger_heads WHERE batch >= {batch}")
    out = run("verify", recorded.session_id, code=1)
    cut = f"cut (main.db's chain recorded batch {batch + 1}; the session ends at batch {batch - 1})"
    assert f"{recorded.session_id}  FAILED    {cut}" in out


def test_a_removed_session_directory_is_noticed(home, recorded):
    shutil.rmtree(home / "sessions" / recorded.session_id)
    out = run("verify", "--all", code=1)
    assert (
        f"{recorded.session_id}  FAILED    missing (in main.db's chain but its session directory is gone)"
        in out
    )
    assert "missing" in run("verify", recorded.session_id, code=1)


def test_a_session_retention_culled_is_not_missing(home, recorded):
    from assembler.retention import cull_session
    from capsem.rollup import open_main

    main = open_main(home / "main.db")
    cull_session(main, recorded.session_id, "test")
    main.close()
    assert not (home / "sessions" / recorded.session_id).exists()
    out = run("verify", "--all")
    assert f"{recorded.session_id}  ok        culled by retention (recorded in main.db's chain)" in out
    assert "main.db chain          verified  2 entries" in out


def test_a_swapped_ledger_pub_fails_every_signature(home, recorded):
    other = Ed25519PrivateKey.generate().public_key()
    (home / "ledger.pub").write_bytes(
        other.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    out = run("verify", recorded.session_id, code=1)
    assert "signature" in out and "does not hold under ledger.pub" in out


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- verify-attestation -->", 1)[1].split("<!-- /verify-attestation -->", 1)[0]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def test_an_attestation_verifies_with_cryptography_alone(home, recorded, monkeypatch):
    monkeypatch.chdir(home)  # the README's lines read run.intoto.json and ledger.pub where they run
    run("export", "attestation", recorded.session_id, "-o", "run.intoto.json")
    code = readme_snippet()
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # exactly the README's lines
    statement = scope["statement"]
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    head = sql(db_of(home, recorded.session_id), "SELECT head FROM ledger_heads ORDER BY batch DESC LIMIT 1")[
        0
    ][0]
    assert statement["subject"][0] == {"name": f"capsem-ledger-head:{recorded.session_id}",
                                       "digest": {"sha256": head.hex()},
                                       "annotations": statement["subject"][0]["annotations"]}  # fmt: skip
    predicate = statement["predicate"]
    assert predicate["totals"]["model_calls"] >= 4 and predicate["request_decisions"]["denied"] == 1
    assert [d["matched_rule"] for d in predicate["decisions"]["net_events"]] == ["no-groq"]
    assert "verified" in run("verify", "run.intoto.json")

    envelope = json.loads((home / "run.intoto.json").read_text())
    body = bytearray(base64.b64decode(envelope["payload"]))
    body[body.index(b'"denied":1') + len('"denied":')] = ord("0")  # one byte: no call was denied
    envelope["payload"] = base64.b64encode(bytes(body)).decode()
    (home / "run.intoto.json").write_text(json.dumps(envelope))
    with pytest.raises(InvalidSignature):
        exec(compile(code, "README.md", "exec"), {})
    assert "FAILED" in run("verify", "run.intoto.json", code=1)
    doc = json.loads(run("verify", "run.intoto.json", "--json", code=1))
    assert doc["ok"] is False and [a["state"] for a in doc["attestations"]] == ["failed"]
    assert "sessions" not in doc  # an attestation named alone checks no session
