"""The DuckDB run store: runs, per-request records, timelines, studies and trials."""
