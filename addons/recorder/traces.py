"""trace_id chaining across the turns of a tool loop, and de-duplication of tool results.

A model call that asks for tools leaves their call ids pending under its trace. The next
request that carries results for pending ids joins that trace; a call that asks for no tool
closes it. Results already recorded (an agent resends its whole history, or retries a
request) are not recorded again. Both maps are bounded (oldest entries dropped first).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

from addons.records import ToolResult


class TraceTracker:
    def __init__(self, max_entries: int = 10000) -> None:
        self.max_entries = max_entries
        self._pending: OrderedDict[str, str] = OrderedDict()
        self._answered: OrderedDict[str, None] = OrderedDict()
        self._names: OrderedDict[str, str] = OrderedDict()

    def trace_for(self, results: list[ToolResult]) -> str:
        """The trace a request joins: the one of its first pending call id, or a new one."""
        for result in results:
            trace = self._pending.get(result.call_id)
            if trace is not None:
                return trace
        return uuid.uuid4().hex[:16]

    def new_results(self, results: list[ToolResult]) -> list[ToolResult]:
        """The results not recorded before (first occurrence of each call id), marked as seen."""
        fresh = []
        for result in results:
            if result.call_id in self._answered:
                continue
            if result.tool_name is None:
                result.tool_name = self._names.get(result.call_id)
            self._remember(self._answered, result.call_id, None)
            fresh.append(result)
        return fresh

    def finish_call(self, trace: str, call_ids: list[tuple[str, str]]) -> None:
        """After a response: leave its (call_id, tool_name) pairs pending, or close the trace."""
        if call_ids:
            for call_id, name in call_ids:
                self._remember(self._pending, call_id, trace)
                self._remember(self._names, call_id, name)
        else:
            for call_id in [c for c, t in self._pending.items() if t == trace]:
                del self._pending[call_id]

    def _remember(self, table: OrderedDict, key: str, value) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self.max_entries:
            table.popitem(last=False)
