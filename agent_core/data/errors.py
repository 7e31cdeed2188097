"""Typed errors of the data-access layer.

Every message is written for two readers: the model (which may retry with a corrected query or
tell the user) and the user (who sees it relayed in chat). So messages say what was refused and
why, in plain words, and never include stack traces or connection secrets.
"""

from __future__ import annotations


class DataError(Exception):
    """Base class of every error raised by ``agent_core.data``."""


class UnsafeSQLError(DataError):
    """The SQL was refused by the read-only guard; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SQLParseError(UnsafeSQLError):
    """The SQL could not be parsed, so it cannot be proven read-only and is refused."""


class QueryTimeout(DataError):
    """A query ran longer than its time limit and was cancelled."""


class QueryFailed(DataError):
    """The database rejected or failed a (guarded) query; the message is the database's own."""


class TableNotFound(DataError):
    """A table named by the caller does not exist."""


class UploadError(DataError):
    """An uploaded file could not be loaded; nothing from it was stored."""


class UploadTooLarge(UploadError):
    """An uploaded file exceeds the byte or row limit."""


class UnsupportedUploadType(UploadError):
    """An uploaded file is of a type that cannot be loaded as a table."""


class MalformedUpload(UploadError):
    """An uploaded file is of a supported type but its content cannot be read."""


class DataSourceConfigError(DataError):
    """The operator's data-source configuration is invalid; the message names the source."""


class DataSourceNotAllowed(DataError):
    """The data source exists but is not open to this channel or user."""
