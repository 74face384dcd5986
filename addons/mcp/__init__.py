"""MCP over HTTP: `jsonrpc` decides which requests are MCP (once, in mitmdump); `wire` parses
JSON-RPC messages and streams (pure); `ledger` turns them into
`mcp_calls` rows, ties answers that arrive on a separate stream to their requests and links
a model's `mcp__server__tool` call to the MCP call that ran it."""

from addons.mcp.wire import (
    McpRequest,
    McpResponse,
    StreamReader,
    exchange_key,
    header_call,
    initialize_name,
    learned_name,
    mcp_tool_name,
    parse_request,
    parse_response,
    preview,
    server_name,
    url_key,
)

__all__ = [
    "McpRequest",
    "McpResponse",
    "StreamReader",
    "exchange_key",
    "header_call",
    "initialize_name",
    "learned_name",
    "mcp_tool_name",
    "parse_request",
    "parse_response",
    "preview",
    "server_name",
    "url_key",
]
