"""Excel (.xlsx) uploads as UTF-8 CSV files, one a non-empty sheet, read under hard limits.

An .xlsx is a zip archive of XML, so its upload size says little about what parsing it costs.
:func:`xlsx_sheets` first checks the archive against :class:`UploadLimits` (unpacked size,
compression ratio, shared-string table, longest text run), then parses it with openpyxl in
streaming mode under a cell budget, so a decompression bomb or a sheet declaring a million
empty rows is refused before it takes the memory it asks for.
"""

from __future__ import annotations

import csv
import zipfile
from collections.abc import Iterator, Sequence
from datetime import date, datetime
from datetime import time as dt_time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent_core.data.errors import MalformedUpload, UploadError, UploadTooLarge
from agent_core.data.upload_limits import UploadLimits
from agent_core.units import human_size


class SheetCsv(BaseModel):
    """One non-empty sheet, written as a UTF-8 CSV with its header first."""

    path: Path
    sheet: str
    sheet_index: int  # position in the workbook, for names of sheets without ASCII letters


def xlsx_sheets(
    file_path: Path, original_name: str, scratch: Path, limits: UploadLimits
) -> list[SheetCsv]:
    """Write each non-empty sheet as a UTF-8 CSV; DuckDB then detects column types.

    The archive is checked against the unpacked-size limits first (:func:`_check_xlsx_archive`),
    then parsed with openpyxl in streaming (read-only) mode under a cell budget. Anything the
    parser refuses — a corrupt zip, XML it cannot parse, a part it does not expect — is a
    :class:`MalformedUpload` naming the file, never an uncaught error.
    """
    try:
        _check_xlsx_archive(file_path, original_name, limits)
        return _parse_workbook(file_path, original_name, scratch, limits)
    except UploadError:
        raise
    except MemoryError as error:
        raise UploadTooLarge(
            f"{original_name} needs more memory to read than is available. Upload a smaller "
            "extract (fewer rows or columns)."
        ) from error
    except Exception as error:  # any parser failure on untrusted input
        # E.g. xml.etree.ElementTree.ParseError, a KeyError for a missing part, or another
        # format renamed to .xlsx.
        raise MalformedUpload(
            f"{original_name} is not a readable .xlsx workbook ({type(error).__name__}). "
            "Open it in Excel and save it again as .xlsx, or export the sheet as CSV."
        ) from error


def _parse_workbook(
    file_path: Path, original_name: str, scratch: Path, limits: UploadLimits
) -> list[SheetCsv]:
    # Imported here: openpyxl is only needed for Excel uploads and is slow to import.
    import openpyxl

    workbook = openpyxl.load_workbook(file_path, read_only=True, data_only=True)
    sheets: list[SheetCsv] = []
    try:
        # The declared used range of every sheet, before reading any row: a read-only sheet
        # yields that many rows and columns, filling in empty cells.
        declared = sum(_declared_cells(sheet) for sheet in workbook.worksheets)
        if declared > limits.max_cells:
            raise UploadTooLarge(
                f"{original_name} declares {declared:,} cells (rows × columns of its sheets); "
                f"the limit is {limits.max_cells:,}. Upload a smaller extract."
            )
        budget = _CellBudget(limits.max_cells)
        for index, sheet in enumerate(workbook.worksheets):
            csv_path = scratch / f"sheet_{index}.csv"
            written = _sheet_to_csv(
                sheet.iter_rows(values_only=True),
                csv_path,
                limits,
                f"{original_name} / {sheet.title}",
                budget,
            )
            if written:
                sheets.append(SheetCsv(path=csv_path, sheet=sheet.title, sheet_index=index))
    finally:
        workbook.close()
    if not sheets:
        raise MalformedUpload(f"{original_name} has no sheet with data.")
    return sheets


def _declared_cells(sheet: Any) -> int:
    """Rows × columns of a read-only sheet's declared dimension (0 if it declares none)."""
    bounds = (sheet.min_row, sheet.min_column, sheet.max_row, sheet.max_column)
    if not all(isinstance(b, int) for b in bounds):
        return 0
    min_row, min_col, max_row, max_col = bounds
    return max(max_row - min_row + 1, 0) * max(max_col - min_col + 1, 0)


# Members of an .xlsx that openpyxl parses as XML; other members (images, binaries) are only
# counted towards the unpacked size.
_XML_MEMBER_SUFFIXES = (".xml", ".rels", ".vml")
_RATIO_EXEMPT_BYTES = 1024 * 1024  # small members (styles, themes) may compress well, harmlessly
_MAX_ARCHIVE_MEMBERS = 10_000
_SHARED_STRINGS_TYPE = (
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
)
# The most bytes one character of cell text can take in the XML: "_x000D_" (Excel's escape
# of a control character) is 7, "&#x10FFFF;" 10.
_MAX_XML_BYTES_PER_CHAR = 10


def _check_xlsx_archive(file_path: Path, original_name: str, limits: UploadLimits) -> None:
    """Refuse an .xlsx whose parse could expand far beyond its upload size, before parsing.

    Checks (see :class:`UploadLimits`): the number of members; their total unpacked size (as
    the zip directory declares it: Python's zipfile never yields more than a member's declared
    size, so the declaration is a hard bound); each large member's compression ratio; the
    shared-string table's unpacked size; and, streaming through each XML member in fixed-size
    blocks, that no text run (the bytes between two ``<``) is longer than the longest cell text
    Excel can write. The stream is read block by block, so this check itself uses bounded
    memory.
    """
    try:
        archive = zipfile.ZipFile(file_path)
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise MalformedUpload(f"{original_name} is not a readable .xlsx workbook.") from error
    with archive:
        members = archive.infolist()
        if len(members) > _MAX_ARCHIVE_MEMBERS:
            raise MalformedUpload(
                f"{original_name} is not a readable .xlsx workbook: its archive has "
                f"{len(members):,} members."
            )
        unpacked = sum(member.file_size for member in members)
        if unpacked > limits.max_uncompressed_bytes:
            raise UploadTooLarge(
                f"{original_name} unpacks to {human_size(unpacked)} (an .xlsx is a zip "
                f"archive); the limit is {human_size(limits.max_uncompressed_bytes)}. "
                "Upload a smaller extract (fewer rows or columns), or export it as CSV."
            )
        for member in members:
            ratio = member.file_size / max(member.compress_size, 1)
            if member.file_size > _RATIO_EXEMPT_BYTES and ratio > limits.max_compression_ratio:
                raise UploadTooLarge(
                    f"{original_name} was refused: its part {member.filename} unpacks "
                    f"{ratio:,.0f} times larger than it is stored (from "
                    f"{human_size(member.compress_size)} to {human_size(member.file_size)}), "
                    f"more than the {limits.max_compression_ratio:g}:1 a real workbook "
                    "reaches. Open it in Excel and save it again, or export it as CSV."
                )
        shared = _shared_strings_member(archive)
        if shared is not None and shared.file_size > limits.max_shared_strings_bytes:
            raise UploadTooLarge(
                f"{original_name}: its text cells unpack to {human_size(shared.file_size)}; "
                f"the limit is {human_size(limits.max_shared_strings_bytes)}. Upload a "
                "smaller extract, or export it as CSV."
            )
        longest_run = limits.max_cell_chars * _MAX_XML_BYTES_PER_CHAR
        for member in members:
            if member.filename.lower().endswith(_XML_MEMBER_SUFFIXES):
                if _has_text_run_over(archive, member, longest_run):
                    raise UploadTooLarge(
                        f"{original_name} was refused: it contains a text longer than "
                        f"{limits.max_cell_chars:,} characters (in {member.filename}), more "
                        "than one Excel cell can hold."
                    )


def _shared_strings_member(archive: zipfile.ZipFile) -> zipfile.ZipInfo | None:
    """The shared-string table's member, found as openpyxl finds it: by its content type in
    ``[Content_Types].xml`` (the conventional ``xl/sharedStrings.xml`` as a fallback)."""
    import xml.etree.ElementTree as ElementTree

    names = {info.filename: info for info in archive.infolist()}
    manifest = names.get("[Content_Types].xml")
    if manifest is not None and manifest.file_size <= _RATIO_EXEMPT_BYTES:
        try:
            root = ElementTree.fromstring(archive.read(manifest))
        except (ElementTree.ParseError, zipfile.BadZipFile, ValueError, OSError):
            root = None  # openpyxl will refuse the file with the same problem
        if root is not None:
            for element in root.iter():
                if element.get("ContentType") == _SHARED_STRINGS_TYPE:
                    found = names.get((element.get("PartName") or "").lstrip("/"))
                    if found is not None:
                        return found
    return names.get("xl/sharedStrings.xml")


def _has_text_run_over(archive: zipfile.ZipFile, member: zipfile.ZipInfo, limit: int) -> bool:
    """Whether the member's XML has a run of more than ``2 × limit`` bytes without a ``<``.

    Well-formed XML has no ``<`` inside text or attribute values, so the gaps between ``<``
    bound the longest text node. Reading aligned blocks of ``limit + 1`` bytes, a block without
    any ``<`` proves a run longer than ``limit``; any run of ``2 × limit + 1`` bytes or more
    contains such a block. A C-level ``in`` test per block keeps this as fast as unzipping.
    """
    block_size = limit + 1
    try:
        with archive.open(member) as stream:
            while block := stream.read(block_size):
                if len(block) == block_size and b"<" not in block:
                    return True
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
        return False  # a damaged member: openpyxl will refuse the file with a clear message
    return False


class _CellBudget:
    """Cells a parse may still produce (over all sheets of one workbook)."""

    def __init__(self, cells: int) -> None:
        self.limit = cells
        self.left = cells


def _sheet_to_csv(
    rows: Iterator[Sequence[Any]],
    target: Path,
    limits: UploadLimits,
    label: str,
    budget: _CellBudget | None = None,
) -> bool:
    """Write a sheet's rows to CSV starting at its first non-empty row (the header).

    Returns False for a sheet without any data row. Raises :class:`UploadTooLarge` as soon as
    the row cap, the cell budget or the cell text limit is passed, so a huge sheet is never
    fully read.
    """
    budget = budget or _CellBudget(limits.max_cells)
    with target.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        width = 0
        data_rows = -1  # the header does not count
        for row in rows:
            # Blank rows count too (at least one cell each): a sheet may declare a million.
            budget.left -= max(len(row), 1)
            if budget.left < 0:
                raise UploadTooLarge(
                    f"{label}: the workbook has more than {budget.limit:,} cells (rows × "
                    "columns), the upload limit. Upload a smaller extract."
                )
            cells = [_excel_cell(value) for value in row]
            if any(len(cell) > limits.max_cell_chars for cell in cells):
                raise UploadTooLarge(
                    f"{label} has a cell with more than {limits.max_cell_chars:,} characters, "
                    "more than one Excel cell can hold."
                )
            if not any(cells):
                continue  # blank rows (often above the header or between blocks)
            if width == 0:
                # Trailing empty header cells are formatting leftovers, not columns.
                width = max(i + 1 for i, cell in enumerate(cells) if cell)
            writer.writerow((cells + [""] * width)[:width])
            data_rows += 1
            if data_rows > limits.max_rows:
                raise UploadTooLarge(
                    f"{label} has more than {limits.max_rows:,} rows, the upload limit."
                )
    return data_rows > 0


def _excel_cell(value: Any) -> str:
    """Excel cell value as CSV text that DuckDB's type detection reads back correctly."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == dt_time(0) else value.isoformat(sep=" ")
    if isinstance(value, (date, dt_time)):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
