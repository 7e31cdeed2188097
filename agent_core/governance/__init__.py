"""Data permissions from chat identity: the access policy file and its enforcement.

- `policy`: the ``BA_ACCESS_POLICY`` file as typed models (light: settings import it);
- `loader`: reading the file with line numbers for every problem;
- `audience`: who an answer is for, and what of a protected table they may see;
- `row_filter`: the allowlisted SQL conditions a policy may filter rows with;
- `rewrite`: the syntax-tree rewrite that routes protected tables through their filters;
- `enforce`: the one call every data path makes before a query on a configured source runs;
- `columns`: the cached column lookups the rewrite needs for hidden columns;
- `audit`, `audit_table`: the append-only record of every data access;
- `approval`, `approval_store`, `approval_estimate`: queries that wait for a decision in the thread
  (the gate that asks is `agent_core.toolkit.approval_gate`);
- `catalog_access`: what of the schema catalog an audience may search.

Nothing is re-exported here, so importing the settings does not load the SQL parser.
"""
