"""The start-up check of the model settings: one free call (`models.retrieve`) tells a wrong
key (401/403) or an unknown model name (404) from a slow or unreachable endpoint.

A rejected key or model is logged at ERROR naming the variable to fix and counted in
``ba_agent_model_errors``; an endpoint that does not answer in time is only "unverified": the
service runs on, and model calls say for themselves when they fail.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from pydantic import BaseModel

from agent_core.config import AgentConfig
from agent_core.model_errors import ModelErrorKind, error_kind

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 10.0


class ModelCheck(BaseModel):
    """What the check found, as `/readyz` shows it."""

    state: Literal["pending", "ok", "rejected", "unverified", "off"]
    detail: str = ""


async def check_model(config: AgentConfig, timeout_s: float = CHECK_TIMEOUT_S) -> ModelCheck:
    """Ask the endpoint about the configured model with the configured key (in a thread: the
    SDK is imported there, so the accepting process does not wait for it)."""
    if not config.model_configured:
        return ModelCheck(state="off", detail="ANTHROPIC_API_KEY is not set")
    result = await asyncio.to_thread(_retrieve, config, timeout_s)
    where = config.base_url or "api.anthropic.com"
    if result.state == "ok":
        log.info("model check: %s via %s accepted the key and the model", config.model, where)
    elif result.state == "rejected":
        log.error("model check: %s; the bot cannot answer until this is fixed", result.detail)
    else:
        log.warning("model check: %s via %s could not be verified: %s", config.model, where, result.detail)
    return result


def _retrieve(config: AgentConfig, timeout_s: float) -> ModelCheck:
    import anthropic

    from agent_core.metrics import MODEL_ERRORS

    key = config.api_key.get_secret_value() if config.api_key else "not-set"
    client = anthropic.Anthropic(api_key=key, base_url=config.base_url, max_retries=0, timeout=timeout_s)
    try:
        with client:
            client.models.retrieve(config.model)
    except anthropic.APIStatusError as exc:
        kind = error_kind(exc.status_code)
        if kind is ModelErrorKind.AUTHENTICATION:
            MODEL_ERRORS.labels(config.model, kind.value).inc()
            return ModelCheck(state="rejected", detail=f"ANTHROPIC_API_KEY was rejected ({exc.status_code})")
        if kind is ModelErrorKind.NOT_FOUND:
            MODEL_ERRORS.labels(config.model, kind.value).inc()
            return ModelCheck(state="rejected", detail=f"BA_MODEL {config.model!r} does not exist at this endpoint (404)")
        return ModelCheck(state="unverified", detail=f"the endpoint answered {exc.status_code}")
    except anthropic.APITimeoutError:
        return ModelCheck(state="unverified", detail=f"no answer within {timeout_s:g} s")
    except anthropic.APIConnectionError as exc:
        return ModelCheck(state="unverified", detail=f"cannot connect ({type(exc.__cause__ or exc).__name__})")
    return ModelCheck(state="ok")
