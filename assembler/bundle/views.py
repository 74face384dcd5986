"""The bundle's views: the seed's four, extended over the capture tables, plus cost_summary.

- `execution_timeline`: every step of every session in one stream: prompts rendered and
  executed, tools invoked (snapshots), model calls, tool calls and their results, MCP calls,
  file events and process anomalies. `step_order` numbers a session's steps in time order and
  `prompt_number` counts its prompts (claude-mem's execution_traces): a prompt starts with a
  PromptRendered event or with a model call that opens a new tool loop (`trace_id`). Within one
  timestamp, results come before the model call that carries them, and tool calls after it.
- `token_summary`: tokens per session and model, from model calls and executed prompts.
- `cost_summary`: estimated cost per session and model (NULL prices are counted, never guessed).
- `tool_summary`: calls and success rate per session and tool, from snapshots, captured tool
  calls (success = a non-error result) and MCP calls.
- `error_log`: ERROR/WARNING/CRITICAL logs, failed tools, tool results flagged as errors, HTTP
  errors, truncated streams, model errors, MCP errors, process anomalies and import problems.
"""

from __future__ import annotations

import sqlite3

VIEWS: dict[str, str] = {
    "execution_timeline": """
WITH events AS (
  SELECT session_id, timestamp, 0 AS phase, 'prompt_rendered' AS event_type, 'prompt' AS trace_type,
         prompt_name AS name, char_count AS detail, NULL AS success, 1 AS starts_prompt,
         'prompt_events' AS source_table, rowid AS row_ref
  FROM prompt_events WHERE event_type = 'rendered'
  UNION ALL
  SELECT session_id, timestamp, 2, 'tool_invoked', 'tool', tool_name, result_message, result_success, 0,
         'tool_invocations', rowid
  FROM tool_invocations
  UNION ALL
  SELECT session_id, timestamp, 3, 'prompt_executed', 'prompt', prompt_name, total_tokens,
         CASE WHEN result IS NOT NULL THEN 1 ELSE 0 END, 0, 'prompt_events', rowid
  FROM prompt_events WHERE event_type = 'executed'
  UNION ALL
  SELECT m.session_id, m.timestamp, 1, 'model_call', 'model', COALESCE(m.model, m.provider),
         COALESCE(m.input_tokens, '?') || ' in / ' || COALESCE(m.output_tokens, '?') || ' out'
           || COALESCE(', ' || m.stop_reason, '') || COALESCE(', ' || m.error_type, ''),
         CASE WHEN m.status_code >= 400 OR m.error_type IS NOT NULL OR m.complete = 0 THEN 0 ELSE 1 END,
         CASE WHEN m.trace_id IS NULL OR m.id = (SELECT MIN(x.id) FROM model_calls x
              WHERE x.session_id = m.session_id AND x.trace_id = m.trace_id) THEN 1 ELSE 0 END,
         'model_calls', m.rowid
  FROM model_calls m
  UNION ALL
  SELECT t.session_id, COALESCE(t.timestamp, m.timestamp), 2, 'tool_call',
         CASE WHEN t.origin = 'mcp' THEN 'mcp' ELSE 'tool' END, t.tool_name, substr(t.arguments, 1, 200),
         NULL, 0, 'tool_calls', t.rowid
  FROM tool_calls t LEFT JOIN model_calls m ON m.session_id = t.session_id AND m.id = t.model_call_id
  UNION ALL
  SELECT r.session_id, COALESCE(r.timestamp, m.timestamp), 0, 'tool_result', 'tool', r.tool_name,
         substr(r.content_preview, 1, 200), 1 - COALESCE(r.is_error, 0), 0, 'tool_responses', r.rowid
  FROM tool_responses r LEFT JOIN model_calls m ON m.session_id = r.session_id AND m.id = r.model_call_id
  UNION ALL
  SELECT session_id, timestamp, 2, 'mcp_call', 'mcp', server_name || COALESCE(':' || tool_name, ''), method,
         CASE WHEN error_message IS NOT NULL OR decision IN ('denied', 'error') THEN 0 ELSE 1 END, 0,
         'mcp_calls', rowid
  FROM mcp_calls
  UNION ALL
  SELECT session_id, timestamp, 4, 'file_event', 'file', path, action || COALESCE(' ' || size || ' bytes', ''),
         NULL, 0, 'fs_events', rowid
  FROM fs_events
  UNION ALL
  SELECT session_id, first_ts, 4, 'anomaly', 'anomaly', kind, severity || COALESCE(': ' || detail, ''), 0, 0,
         'proc_anomalies', rowid
  FROM proc_anomalies
)
SELECT session_id,
       SUM(starts_prompt) OVER w AS prompt_number,
       ROW_NUMBER() OVER w AS step_order,
       timestamp, event_type, trace_type, name, detail, success, source_table, row_ref
FROM events
WINDOW w AS (PARTITION BY session_id ORDER BY timestamp, phase, row_ref ROWS UNBOUNDED PRECEDING)
ORDER BY timestamp, session_id, step_order
""",
    "token_summary": """
SELECT session_id, 'model_calls' AS source, provider, COALESCE(model, '') AS model,
       COUNT(*) AS call_count, COUNT(DISTINCT COALESCE(trace_id, id)) AS prompt_count,
       SUM(input_tokens) AS total_input_tokens, SUM(output_tokens) AS total_output_tokens,
       SUM(COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0)) AS total_tokens
FROM model_calls GROUP BY session_id, provider, COALESCE(model, '')
UNION ALL
SELECT session_id, 'prompt_events', adapter, '', COUNT(*), COUNT(*),
       SUM(input_tokens), SUM(output_tokens), SUM(total_tokens)
FROM prompt_events WHERE event_type = 'executed' GROUP BY session_id, adapter
""",
    "cost_summary": """
SELECT session_id, provider, COALESCE(model, '') AS model, COUNT(*) AS call_count,
       SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,
       SUM(json_extract(usage_details, '$.cache_read')) AS cache_read_tokens,
       SUM(json_extract(usage_details, '$.cache_write')) AS cache_write_tokens,
       ROUND(SUM(estimated_cost_usd), 6) AS estimated_cost_usd,
       SUM(estimated_cost_usd IS NULL) AS unpriced_calls,
       GROUP_CONCAT(DISTINCT price_source) AS price_sources
FROM model_calls GROUP BY session_id, provider, COALESCE(model, '')
""",
    "tool_summary": """
WITH results AS (
  SELECT session_id, call_id, MAX(is_error) AS is_error FROM tool_responses GROUP BY session_id, call_id
), calls AS (
  SELECT session_id, 'tool_invocations' AS source, tool_name, result_success AS ok FROM tool_invocations
  UNION ALL
  SELECT t.session_id, 'tool_calls', t.tool_name,
         CASE WHEN r.is_error IS NULL THEN NULL ELSE 1 - r.is_error END
  FROM tool_calls t LEFT JOIN results r ON r.session_id = t.session_id AND r.call_id = t.call_id
  UNION ALL
  SELECT session_id, 'mcp_calls', server_name || ':' || COALESCE(tool_name, method),
         CASE WHEN error_message IS NOT NULL OR decision IN ('denied', 'error') THEN 0 ELSE 1 END
  FROM mcp_calls
)
SELECT session_id, source, tool_name, COUNT(*) AS call_count,
       SUM(ok = 1) AS success_count, SUM(ok = 0) AS failure_count, SUM(ok IS NULL) AS no_result_count,
       ROUND(100.0 * SUM(ok = 1) / COUNT(*), 1) AS success_rate
FROM calls GROUP BY session_id, source, tool_name
""",
    "error_log": """
SELECT timestamp, level, logger, event, message,
       COALESCE(json_extract(context, '$.error'), json_extract(context, '$.err'), json_extract(context, '$.exception'),
                json_extract(context, '$.exc_info')) AS error_detail, session_id,
       'log' AS kind, 'logs' AS source_table, id AS row_ref
FROM logs WHERE level IN ('ERROR', 'WARNING', 'CRITICAL')
UNION ALL
SELECT timestamp, 'ERROR', adapter, 'tool_failed', tool_name || ': ' || COALESCE(result_message, 'failed'),
       result_message, session_id, 'tool_failed', 'tool_invocations', rowid
FROM tool_invocations WHERE result_success = 0
UNION ALL
SELECT timestamp, 'ERROR', 'capsem', 'tool_error', COALESCE(tool_name, call_id) || ': '
       || COALESCE(substr(content_preview, 1, 200), ''), content_preview, session_id, 'tool_error',
       'tool_responses', rowid
FROM tool_responses WHERE is_error = 1
UNION ALL
SELECT timestamp, CASE WHEN status_code >= 500 OR status_code IS NULL THEN 'ERROR' ELSE 'WARNING' END, 'capsem',
       'http_error', COALESCE(method, '') || ' ' || domain || COALESCE(path, '') || ' -> '
       || COALESCE(status_code, 'no response'), error, session_id, 'http_error', 'net_events', rowid
FROM net_events WHERE status_code >= 400 OR error IS NOT NULL
UNION ALL
SELECT timestamp, 'ERROR', 'capsem', 'truncated_stream', provider || ' ' || COALESCE(model, '')
       || ': response ended early' || COALESCE(' (' || error_type || ')', ''), error_message, session_id,
       'truncated_stream', 'model_calls', rowid
FROM model_calls WHERE complete = 0
UNION ALL
SELECT timestamp, 'ERROR', 'capsem', 'model_error', provider || ' ' || COALESCE(model, '') || ': ' || error_type,
       error_message, session_id, 'model_error', 'model_calls', rowid
FROM model_calls WHERE error_type IS NOT NULL AND COALESCE(complete, 1) != 0 AND COALESCE(status_code, 200) < 400
UNION ALL
SELECT timestamp, 'ERROR', 'capsem', 'mcp_error', server_name || ' ' || method || COALESCE(' ' || tool_name, ''),
       error_message, session_id, 'mcp_error', 'mcp_calls', rowid
FROM mcp_calls WHERE error_message IS NOT NULL OR decision IN ('denied', 'error')
UNION ALL
SELECT first_ts, CASE severity WHEN 'critical' THEN 'CRITICAL' ELSE 'WARNING' END, 'procdiag', kind,
       kind || ' in ' || COALESCE(name, 'pid ' || pid, '?') || COALESCE(' (' || value || ' vs ' || threshold || ')', ''),
       detail, session_id, 'anomaly', 'proc_anomalies', rowid
FROM proc_anomalies WHERE severity IN ('warning', 'critical')
UNION ALL
SELECT imported_at, 'WARNING', 'bundle', 'import_error', path || ': ' || errors || ' records skipped', warnings,
       NULL, 'import_error', 'sources', id
FROM sources WHERE errors > 0
ORDER BY timestamp
""",
}


def create_views(conn: sqlite3.Connection) -> None:
    """(Re)create every view."""
    for name, sql in VIEWS.items():
        conn.execute(f"DROP VIEW IF EXISTS {name}")
        conn.execute(f"CREATE VIEW {name} AS {sql.strip()}")
