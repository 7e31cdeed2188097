"""Governed metrics: dbt Semantic Layer (MetricFlow) YAML read with ``dbt-semantic-interfaces``
(:mod:`.loader`), metric queries resolved against it (:mod:`.query`) and compiled to one SQL
statement per source dialect with sqlglot (:mod:`.compiler`, see its docstring for why not
MetricFlow itself)."""
