"""Files shared with a message: fetched by the adapter into the conversation's workspace, then
loaded as tables (CSV, TSV, Excel, Parquet, JSON) that the agent can query."""

from __future__ import annotations

import asyncio
import logging

from adapters.base import Attachments, Responder
from adapters.download import AttachmentError
from agent_core.data.conversation import TABLES_FILE
from agent_core.data.errors import UnsupportedUploadType, UploadError
from agent_core.data.ingest import LoadedTable, load_upload, tables_of_file
from agent_core.data.upload_limits import UploadLimits
from agent_core.messages import InboundMessage
from agent_core.run_context import RunDeps
from agent_core.workspace.backend import WorkspaceError, sanitize_filename
from agent_core.workspace.local import workspace_for

log = logging.getLogger(__name__)


async def ingest_attachments(
    responder: Responder, msg: InboundMessage, ctx: RunDeps, limits: UploadLimits
) -> list[str]:
    """Fetch and load each attachment; returns one note per file for the model to read.

    A file that cannot be fetched or read gets a note naming it and the reason; the question
    is answered all the same. A file already loaded in this conversation (a retried delivery
    of the same message) is neither fetched nor loaded again.
    """
    if not isinstance(responder, Attachments):
        return [f"{a.name}: could not be fetched (this platform does not share files)." for a in msg.attachments]
    workspace = workspace_for(ctx.data_dir, ctx.thread_id)
    database = await workspace.pull_private(TABLES_FILE)  # the tables loaded so far
    notes: list[str] = []
    loaded = False
    for attachment in await responder.resolve_attachments(msg):
        virtual = f"/uploads/{sanitize_filename(attachment.name)}"
        tables = await asyncio.to_thread(tables_of_file, database, attachment.file_id) if attachment.file_id else []
        if tables:
            notes.extend(_table_notes(attachment.name, tables))
            continue
        try:
            dest = await workspace.real_path(virtual, must_exist=False)
            path = await responder.fetch_attachment(msg, attachment, dest, limits.max_bytes)
            await workspace.commit(virtual)
        except (AttachmentError, WorkspaceError) as exc:
            notes.append(f"{attachment.name}: could not be fetched ({exc}).")
            continue
        try:
            tables = await asyncio.to_thread(
                load_upload, database, path, attachment.name, limits, file_id=attachment.file_id
            )
        except UnsupportedUploadType:
            notes.append(f"{attachment.name}: saved as {virtual} (not a table format).")
            continue
        except UploadError as exc:
            notes.append(f"{attachment.name}: saved as {virtual} but not loaded: {exc}")
            continue
        except Exception:  # one unreadable file must not fail the whole turn
            log.exception("upload %s could not be loaded", attachment.file_id or "(no id)")
            notes.append(f"{attachment.name}: saved as {virtual} but could not be read as a table.")
            continue
        notes.extend(_table_notes(attachment.name, tables))
        loaded = True
    if loaded:
        await workspace.push_private(TABLES_FILE)
    return notes


async def fetch_conversation_tables(ctx: RunDeps) -> None:
    """Bring the conversation's uploaded tables here before a turn: with workspaces in object
    storage, another replica may have loaded them (a no-op for the local directory)."""
    await workspace_for(ctx.data_dir, ctx.thread_id).pull_private(TABLES_FILE)


def _table_notes(name: str, tables: list[LoadedTable]) -> list[str]:
    notes = []
    for table in tables:
        columns = ", ".join(f"{c.name} {c.type}" for c in table.columns[:30])
        sheet = f" (sheet {table.sheet})" if table.sheet else ""
        notes.append(
            f"{name}{sheet}: loaded as table `{table.table_name}` with "
            f"{table.row_count:,} rows; columns: {columns}."
        )
    return notes
