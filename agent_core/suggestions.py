"""Suggested prompts for a person opening a conversation with the agent: examples built from the
governed metrics they may see (the sources open to them in a DM, under the access policy), so a
suggestion never leads to data they cannot read."""

from __future__ import annotations

from agent_core.config import AgentConfig
from agent_core.data.source_config import is_allowed
from agent_core.governance.audience import Identity
from agent_core.governance.enforce import is_source_open
from agent_core.i18n import Language, t
from agent_core.semantic.model import DEMO_SOURCE

MAX_PROMPTS = 4


def metric_prompts(config: AgentConfig, identity: Identity, language: Language, limit: int = MAX_PROMPTS) -> list[str]:
    """Up to `limit` questions about the governed metrics `identity` may read."""
    from agent_core.semantic.loader import load_semantic_layer

    layer = load_semantic_layer(config.semantic_dir, config.datasources)
    names: list[str] = []
    for source, semantics in sorted(layer.sources.items()):
        cfg = config.datasources.get(source)
        if cfg is None:
            if source != DEMO_SOURCE:
                continue
        elif not is_allowed(cfg, identity.channel, identity.user):
            continue
        if not is_source_open(config.access_policy, source, identity):
            continue
        names += [m.label or m.name for m in semantics.metrics]
    return [_question(language, index, name) for index, name in enumerate(dict.fromkeys(names))][:limit]


def _question(language: Language, index: int, metric: str) -> str:
    """Two kinds of question, alternating: why it moved, and its trend."""
    if index % 2 == 0:
        return t(language, "How did {metric} change last week, and why?", metric=metric)
    return t(language, "Show {metric} by week over the last quarter", metric=metric)
