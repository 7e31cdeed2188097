"""Data access for the agent: SQL guard, demo database, upload workspaces, configured sources.

Names the model sees when querying DuckDB through :func:`run_duckdb_query`: uploaded tables
unqualified (``orders_2026``), the demo table as ``demo.sales``.
"""
