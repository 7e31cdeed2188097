"""The access policy the governance tests share, as the operator's YAML: East sellers
(``slack:U01EAST``) see the East's orders of source ``dwh``, finance (``slack:U02FIN``) sees all
of them, and the ``default`` group may use the source too. Each test adds what it checks: hidden
columns granted to finance, a finance-only ``hr`` source, channels bound to a group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def sales_policy(
    *,
    hidden_columns: Sequence[str] = (),
    granted_columns: Sequence[str] | None = None,
    hr_source: bool = False,
    channels: Mapping[str, str] | None = None,
) -> str:
    """The policy file's text; ``granted_columns`` (default: ``hidden_columns``) are finance's."""
    lines = [
        "groups:",
        "  east_sales: [slack:U01EAST]",
        "  finance: [slack:U02FIN]",
        "sources:",
        "  dwh:",
        "    groups: [east_sales, finance, default]",
        "    tables:",
        "      orders:",
        "        row_filters:",
        "          east_sales: \"region = 'East'\"",
        '          finance: "true"',
    ]
    if hidden_columns:
        granted = hidden_columns if granted_columns is None else granted_columns
        lines.append(f"        hidden_columns: [{', '.join(hidden_columns)}]")
        lines.append(f"        column_grants: {{finance: [{', '.join(granted)}]}}")
    if hr_source:
        lines += ["  hr:", "    groups: [finance]"]
    if channels:
        lines += ["channels:", *(f"  {channel}: {group}" for channel, group in channels.items())]
    return "\n".join(lines) + "\n"


# East sellers alone, seeing the East's orders (no finance, no default group).
EAST_ONLY_POLICY = """\
groups:
  east_sales: [slack:U01EAST]
sources:
  dwh:
    groups: [east_sales]
    tables:
      orders:
        row_filters:
          east_sales: "region = 'East'"
"""
