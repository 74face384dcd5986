from addons.recorder.traces import TraceTracker
from addons.records import ToolResult


def test_tool_loop_chains_and_closes():
    t = TraceTracker()
    first = t.trace_for([])
    t.finish_call(first, [("call_a", "read"), ("call_b", "grep")])
    second = t.trace_for([ToolResult("call_a", "x"), ToolResult("call_b", "y")])
    assert second == first
    fresh = t.new_results([ToolResult("call_a", "x"), ToolResult("call_b", "y")])
    assert [r.tool_name for r in fresh] == ["read", "grep"]
    t.finish_call(second, [])  # final answer closes the trace
    assert t.trace_for([ToolResult("call_a", "x")]) != first


def test_resent_results_are_not_new_again():
    t = TraceTracker()
    assert len(t.new_results([ToolResult("c1", "a")])) == 1
    assert t.new_results([ToolResult("c1", "a"), ToolResult("c2", "b")])[0].call_id == "c2"


def test_bounded():
    t = TraceTracker(max_entries=3)
    trace = t.trace_for([])
    t.finish_call(trace, [(f"c{i}", "t") for i in range(10)])
    assert t.trace_for([ToolResult("c0", "")]) != trace
    assert t.trace_for([ToolResult("c9", "")]) == trace
