"""The compiled ledger path (capsem/native/ledgerpath.c) chains exactly what the Python loop does.

`chain_rows` encodes each row as `capsem.store.ledger.encoded` does (msgspec's msgpack, a bool as
its integer, an integral float as an integer) and chains it; on a row holding a value it does not
encode it stops there for the Python loop. Both are compared here on generated rows whose values
sit on every boundary of msgpack's encodings, and the ledger's `rows` with the compiled path on
and off.
"""

from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsem import native
from capsem.store import ledger as ledger_module
from capsem.store.ledger import Ledger, _chain, _Shape, genesis, shape_prefix

pytestmark = pytest.mark.skipif(native.chain_rows is None, reason=f"fast path: {native.why_not}")

_EDGES = [0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
          2**64 - 1]  # fmt: skip
EDGE_INTS = [*_EDGES, *(-v for v in _EDGES if v <= 2**63), -33, -129, -32769, -(2**31) - 1, -(2**63)]
EDGE_FLOATS = [0.0, -0.0, 1.5, 3.0, -7.0, 2.0**63, -(2.0**63), 2.0**62, 1e20, math.inf, -math.inf, math.nan]
SIZES = [0, 1, 31, 32, 255, 256, 65535, 65536]
EDGE_VALUES = [None, True, False, *EDGE_INTS, *EDGE_FLOATS, *("é" * (n // 2) + "a" * (n % 2) for n in SIZES),
               *(b"\x00" * n for n in SIZES)]  # fmt: skip
"""A value on each boundary of msgpack's encodings (fixint, 8/16/32/64 bits, str8/16/32...)."""
REFUSED = [2**64, -(2**63) - 1, "lone \ud800 half"]
"""Values msgspec refuses: the compiled path hands them to the Python loop, which raises."""
VALUES = (
    st.sampled_from(EDGE_VALUES)
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.binary()
    | st.text(alphabet=st.characters(blacklist_categories=["Cs"]))
)
ROWS = st.lists(
    st.lists(VALUES | st.just([1, 2]) | st.just(bytearray(b"x")), max_size=20).map(tuple), max_size=6
)


def _python(shape: _Shape, rows: list[tuple], chain: bytes) -> tuple[bytes, list[tuple]] | type[Exception]:
    out: list[tuple] = []
    try:
        return _chain(shape, "t", rows, chain, out), out
    except Exception as exc:  # (msgspec refuses some values: the compiled path must hand them back)
        return type(exc)


def _compiled(shape: _Shape, rows: list[tuple], chain: bytes) -> tuple[bytes, list[tuple]] | type[Exception]:
    out: list[tuple] = []
    done = 0
    try:
        while done < len(rows):
            chain, done = native.chain_rows(shape.prefix, rows, done, -1 if shape.key is None else shape.key, chain,
                                            "t", shape.id, out, hashlib.sha256)  # fmt: skip
            if done < len(rows):  # a value it does not encode: the Python loop takes that row
                chain = _chain(shape, "t", rows[done : done + 1], chain, out)
                done += 1
        return chain, out
    except Exception as exc:
        return type(exc)


def _same(a, b) -> bool:
    """Equal results (NaN keys compare by identity in tuples, so compare digests and keys' reprs)."""
    if isinstance(a, type) or isinstance(b, type):
        return a == b
    return a[0] == b[0] and [(t, repr(k), s, d, c) for t, k, s, d, c in a[1]] == [
        (t, repr(k), s, d, c) for t, k, s, d, c in b[1]
    ]


@settings(max_examples=1500, deadline=None)
@given(rows=ROWS, key=st.sampled_from([None, 0, 3]))
def test_chain_rows_chains_what_the_python_loop_chains(rows, key):
    shape = _Shape(7, shape_prefix("t", [f"c{i}" for i in range(4)]), key, True)
    rows = [r for r in rows if key is None or len(r) > key]
    start = genesis("s")
    assert _same(_compiled(shape, rows, start), _python(shape, rows, start))


@pytest.mark.parametrize("value", EDGE_VALUES + REFUSED, ids=repr)
def test_each_boundary_value_chains_as_in_python(value):
    shape = _Shape(2, shape_prefix("t", ["a", "b"]), 0, True)
    rows = [(value, "x"), ("y", value)]
    result = _compiled(shape, rows, genesis("s"))
    assert _same(result, _python(shape, rows, genesis("s")))
    assert isinstance(result, tuple) == (value not in REFUSED)


def test_it_stops_at_a_value_it_does_not_encode():
    shape = _Shape(1, shape_prefix("t", ["a"]), None, True)
    rows = [(1,), ([2],), (3,)]
    out: list[tuple] = []
    chain, done = native.chain_rows(shape.prefix, rows, 0, -1, genesis("s"), "t", 1, out, hashlib.sha256)
    assert done == 1 and len(out) == 1
    assert chain == _chain(shape, "t", rows[:1], genesis("s"), [])


def test_the_ledger_chains_the_same_with_the_compiled_path_off(monkeypatch):
    rows = [(i, f"row {i}", i * 0.5, i % 2 == 0, None, b"\x01" * i, "x" * (40 * i)) for i in range(60)]
    rows.insert(30, (99, "odd one", [1], True, None, b"", ""))  # a value msgspec encodes as an array

    class Conn:  # `rows` asks the connection only for a new shape's key column
        def execute(self, sql: str):
            return [(0, "id", "INTEGER", 0, None, 1)]

    def chained() -> tuple[bytes, list]:
        ledger = Ledger("s", None)
        ledger.rows(Conn(), "t", ("id", "a", "b", "c", "d", "e", "f"), rows)  # type: ignore[arg-type]
        return ledger.chain, list(ledger._entries)

    on = chained()
    monkeypatch.setattr(ledger_module.native, "chain_rows", None)
    off = chained()
    assert len(on[1]) == len(rows) == len(off[1])
    assert on == off
