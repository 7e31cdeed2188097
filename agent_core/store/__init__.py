"""Persistence: database engine, tables, and the thread store."""
