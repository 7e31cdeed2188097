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
    if not settings.datasources:
        return
    from agent_core.data.privileges import PrivilegedSourceError, verify_sources

    try:
        verify_sources(settings.datasources, logging.getLogger("gateway.datasources"))
    except PrivilegedSourceError as exc:
        raise StartupError(f"BA_DATASOURCES: {exc}") from None


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
