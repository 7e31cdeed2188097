"""The schema catalog of the configured data sources, and search over it.

A refresh reads every source's tables and columns (names, types, comments, row counts, sample
values of low-cardinality columns) through the source's read-only connection and stores them in
the service database (`tables`, `store`); `search` ranks tables, verified example queries and
metric descriptions for a question by BM25 over tokenized text (`text`), so the model asks for
the few tables it needs instead of reading a whole warehouse's schema.
"""
