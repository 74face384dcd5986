"""Exports of capsem's sessions to the engines a team already runs: OpenTelemetry (OTLP, GenAI
semantic conventions), HAR, JSONL and Parquet."""
