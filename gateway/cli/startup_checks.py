"""What every command that reads data checks before it starts: the operator's files parse and
the data sources' roles can only read. A failed check stops the command with a message naming
the setting (`ConfigError`, exit 2) or the reason (`StartupError`, exit 1)."""

from __future__ import annotations

import logging

from gateway.config import ConfigError, Settings


class StartupError(Exception):
    """The service cannot start as configured (port taken, unsafe data source…)."""


def verify_start_up(settings: Settings) -> None:
    """Metric definitions and examples parse; data sources whose database role can do more
    than read are refused (least privilege), unless the operator set `allow_privileged` for
    that source (then logged at WARNING every start)."""
    if settings.semantic_dir is not None:  # the bundled demo model is checked by the test suite
        verify_semantic_layer(settings)
    verify_examples_file(settings)
    verify_monitors_file(settings)
    if not settings.datasources:
        return
    from agent_core.governance.availability import PrivilegedSourceError, verify_sources

    try:
        verify_sources(settings.datasources, logging.getLogger("gateway.datasources"))
    except PrivilegedSourceError as exc:
        raise StartupError(f"BA_DATASOURCES: {exc}") from None
    verify_policy_names(settings)


def verify_policy_names(settings: Settings) -> None:
    """The tables and columns ``BA_ACCESS_POLICY`` names exist in their sources (a misspelt one
    would leave the real one open); views, child tables and partitions reading a protected table
    without being listed are logged at WARNING. A source that cannot be reached now is checked
    before its first use instead (`agent_core.governance.availability`)."""
    policy = settings.access_policy
    if policy is None:
        return
    from agent_core.data.errors import DataError
    from agent_core.governance.policy_catalog import check_policy_names

    log = logging.getLogger("gateway.datasources")
    errors: list[str] = []
    for name, governed in policy.sources.items():
        cfg = settings.datasources.get(name)
        if cfg is None:
            continue
        try:
            check = check_policy_names(cfg, governed)
        except DataError:
            continue
        errors += check.errors
        for warning in check.warnings:
            log.warning("BA_ACCESS_POLICY: %s", warning)
    if errors:
        raise ConfigError("BA_ACCESS_POLICY: " + "; ".join(errors))


def verify_semantic_layer(settings: Settings) -> None:
    """Read and validate every metric definition (``BA_SEMANTIC_DIR``)."""
    from agent_core.semantic.errors import SemanticModelError
    from agent_core.semantic.loader import load_semantic_layer

    try:
        load_semantic_layer(settings.semantic_dir, settings.datasources)
    except SemanticModelError as exc:
        raise ConfigError(f"BA_SEMANTIC_DIR: {exc}") from None


def verify_examples_file(settings: Settings) -> None:
    """Read and validate ``BA_EXAMPLES_FILE``."""
    if settings.examples_file is None:
        return
    from agent_core.catalog.examples import ExamplesFileError, load_examples

    try:
        load_examples(settings.examples_file, settings.datasources)
    except ExamplesFileError as error:
        raise ConfigError(str(error)) from None


def verify_monitors_file(settings: Settings) -> None:
    """Every monitor of ``BA_MONITORS_FILE`` names a chat platform this service knows, and a
    metric (with its source and dimensions) the semantic layer defines: a typo stops start-up
    instead of failing at the first run."""
    monitors = [m for m in settings.monitors if m.origin == "file"]
    if not monitors:
        return
    from agent_core.semantic.loader import load_semantic_layer
    from agent_core.semantic.query import metric_dimensions

    layer = load_semantic_layer(settings.semantic_dir, settings.datasources)
    platforms = sorted(platform.name for platform in settings.platforms)
    problems: list[str] = []
    for monitor in monitors:
        where = f"monitor {monitor.name!r}"
        if platforms and monitor.platform not in platforms:
            problems.append(f"{where}: no chat platform is called {monitor.platform!r} (platforms: {', '.join(platforms)})")
        holders = [
            s for name, s in sorted(layer.sources.items())
            if monitor.source in (None, name) and s.metric(monitor.metric) is not None
        ]  # fmt: skip
        if not holders:
            defined = ", ".join(sorted({m.name for s in layer.sources.values() for m in s.metrics})) or "none"
            on = f" on source {monitor.source!r}" if monitor.source else ""
            problems.append(f"{where}: no metric {monitor.metric!r} is defined{on} (metrics: {defined})")
            continue
        metric = holders[0].metric(monitor.metric)
        assert metric is not None
        known = metric_dimensions(holders[0], metric)
        unknown = [d for d in monitor.dimensions if d not in known]
        if unknown:
            problems.append(f"{where}: {monitor.metric} has no dimension {', '.join(unknown)} (dimensions: {', '.join(known)})")
    if problems:
        raise ConfigError("BA_MONITORS_FILE: " + "; ".join(problems))
