"""The caps on one uploaded file, and how sizes are told to the user.

:class:`UploadLimits` is the configuration edge of ingestion (``BA_MAX_UPLOAD_MB`` sets
``max_bytes``; the archive limits of an .xlsx derive from it).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

# Excel's own limit on the text of one cell: a longer string was not written by a spreadsheet.
EXCEL_MAX_CELL_CHARS = 32_767
_MiB = 1024 * 1024
_GiB = 1024 * _MiB
_DEFAULT_MAX_BYTES = 50 * _MiB


class UploadLimits(BaseModel):
    """Caps applied to one uploaded file.

    ``max_bytes`` (BA_MAX_UPLOAD_MB) caps the file as uploaded. An .xlsx is a zip archive, so
    that caps only its *compressed* size: a 144 KB workbook can unpack to gigabytes. Before
    openpyxl parses anything the archive is checked against the limits below; those left unset
    are derived from ``max_bytes``:

    * ``max_uncompressed_bytes``: all members together unpack to at most 20 × ``max_bytes``,
      and never more than 1 GiB. Real workbooks compress 5-16:1 (sheet XML is repetitive).
    * ``max_compression_ratio``: no member over 1 MiB unpacked may be compressed better than
      100:1 (real sheets: 5-20:1; a decompression bomb: ~1000:1).
    * ``max_shared_strings_bytes``: openpyxl holds the whole shared-string table in memory,
      so it may unpack to at most 10 × ``max_bytes``, and never more than 256 MiB.
    * ``max_cell_chars``: 32,767 characters, Excel's own limit for one cell. Checked before the
      parse on the XML text (no text run may be longer than that many characters could be
      written as) and again on every parsed cell.
    * ``max_cells``: the rows × columns a parse may produce over all sheets, counting the empty
      cells openpyxl fills in for a sheet's declared dimension: ``max_bytes`` / 2 (real .xlsx
      files need about 3 compressed bytes per cell), and at least one million.
    """

    max_bytes: int = Field(default=_DEFAULT_MAX_BYTES, gt=0)
    max_rows: int = Field(default=1_000_000, gt=0)  # per table (sheet)
    # The three below default to values derived from max_bytes (see _derive_unpacked_limits).
    max_uncompressed_bytes: int = Field(default=min(20 * _DEFAULT_MAX_BYTES, _GiB), gt=0)
    max_compression_ratio: float = Field(default=100.0, gt=1)
    max_shared_strings_bytes: int = Field(default=min(10 * _DEFAULT_MAX_BYTES, 256 * _MiB), gt=0)
    max_cell_chars: int = Field(default=EXCEL_MAX_CELL_CHARS, gt=0)
    max_cells: int = Field(default=max(_DEFAULT_MAX_BYTES // 2, 1_000_000), gt=0)

    @model_validator(mode="before")
    @classmethod
    def _derive_unpacked_limits(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        try:
            max_bytes = int(data.get("max_bytes") or _DEFAULT_MAX_BYTES)
        except (TypeError, ValueError):
            return data  # the field's own validation reports it
        derived = {
            "max_uncompressed_bytes": min(20 * max_bytes, _GiB),
            "max_shared_strings_bytes": min(10 * max_bytes, 256 * _MiB),
            "max_cells": max(max_bytes // 2, 1_000_000),
        }
        return {**derived, **{k: v for k, v in data.items() if v is not None}}
