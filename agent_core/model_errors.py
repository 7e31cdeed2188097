"""Why a model call failed: kinds shared by the model client and the start-up check (which
must not import the SDK up front)."""

from __future__ import annotations

from enum import StrEnum


class ModelErrorKind(StrEnum):
    """Why a model call failed, as the user is told and `/metrics` counts it."""

    AUTHENTICATION = "authentication"  # 401/403: the key is wrong or lacks permission
    NOT_FOUND = "not_found"  # 404: no such model (BA_MODEL) at this endpoint
    OVERLOADED = "overloaded"  # 429/529/5xx after the SDK's retries
    UNREACHABLE = "unreachable"  # no connection, or no answer within the timeout
    CONTEXT_OVERFLOW = "context_overflow"
    INVALID_REQUEST = "invalid_request"  # any other 4xx: a bug on our side

    @property
    def misconfigured(self) -> bool:
        """An operator must fix the settings; retrying will not help."""
        return self in (ModelErrorKind.AUTHENTICATION, ModelErrorKind.NOT_FOUND)


def error_kind(status: int) -> ModelErrorKind:
    """The kind of an HTTP error status from the Messages API."""
    if status in (401, 403):
        return ModelErrorKind.AUTHENTICATION
    if status == 404:
        return ModelErrorKind.NOT_FOUND
    if status in (408, 409, 429) or status >= 500:
        return ModelErrorKind.OVERLOADED
    return ModelErrorKind.INVALID_REQUEST
