"""A dist-info folder (PEP 376, the wheel spec) read as files: RECORD's rows as ``importlib.metadata``
reads them (its CSV reader: a quoted path with a comma in it is one path; a row's path as its
``PackagePath``, its hash and size), without importing it (``importlib.metadata`` and the email
package it brings cost a command about 10 ms); METADATA's Version header is read by
``metadata.py``.  Nothing of the distribution is imported or run.

Each file is read through ``bounded.read_file``: a regular file within a cap (a FIFO, a device
or a 3 GB file is a BadInput naming it, never a hang), decoded as UTF-8 with bad bytes replaced.
The tests hold the rows against ``importlib.metadata``'s on real and generated RECORDs.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from patchkit.bounded import read_file
from patchkit.errors import BadInput
from patchkit.targets.import_path import TEXT_CAP  # as for every small text file of an environment

RECORD_CAP = 64 << 20  # torch's RECORD is a few MiB, FlashInfer 0.7.4's 2 MiB


class MalformedRecord(BadInput):
    """A RECORD that is read but whose rows are not CSV rows of path, hash and size."""


class DistInfo:
    """The dist-info folder ``folder``; each file read once, within ``TEXT_CAP`` (RECORD: ``RECORD_CAP``).

    ``lines``: when given, RECORD's text is only the lines it keeps, a superset of the rows a
    caller needs: a RECORD lists every file of a package (FlashInfer's some 15,000), and parsing
    them all costs 50 ms where a command needs the rows of a few files."""

    def __init__(self, folder: Path, lines: Callable[[str], bool] | None = None) -> None:
        self.folder = Path(folder)
        self._lines = lines
        self._texts: dict[str, str | None] = {}

    def read_text(self, filename: str) -> str | None:
        """The text of the dist-info's file ``filename``, None when there is none; BadInput naming
        it when it is no regular file or larger than its cap.  Only files of the folder itself
        (as importlib.metadata's ``read_text`` answers: '' for a bare egg-info file is None)."""
        if not filename or "/" in filename or filename in (".", ".."):
            return None
        if filename not in self._texts:
            cap = RECORD_CAP if filename == "RECORD" else TEXT_CAP
            try:
                data = read_file(self.folder / filename, cap, filename)
            except FileNotFoundError:
                data = None
            text = None if data is None else data.decode("utf-8", "replace")
            if text is not None and filename == "RECORD" and self._lines is not None:
                text = "".join(filter(self._lines, text.splitlines(True)))
            self._texts[filename] = text
        return self._texts[filename]


class FileHash:
    """A row's hash, as importlib.metadata splits it: ``sha256=<urlsafe base64>``."""

    def __init__(self, spec: str) -> None:
        self.mode, _, self.value = spec.partition("=")


class RecordRow(PurePosixPath):
    """A row of RECORD: its path (a ``PurePosixPath``, as importlib.metadata's ``PackagePath``), its
    ``hash`` (a ``FileHash``, None when the row gives none) and its ``size`` (None when none)."""

    hash: FileHash | None
    size: int | None


def _row(name: str, hash: str | None = None, size: str | None = None) -> RecordRow:
    """importlib.metadata's ``make_file``: TypeError for a row of no or more than three columns,
    ValueError for a size that is no number."""
    row = RecordRow(name)
    row.hash = FileHash(hash) if hash else None
    row.size = int(size) if size else None
    return row


def _files(dist: DistInfo) -> list[RecordRow] | None:
    """The rows of RECORD as importlib.metadata's ``Distribution.files`` makes them (a dist-info
    without RECORD: its SOURCES.txt's lines, each one path; None without either)."""
    text = dist.read_text("RECORD")
    lines = text and text.splitlines()
    if not lines:
        sources = dist.read_text("SOURCES.txt")
        lines = sources and [f'"{line}"' for line in sources.splitlines()]
    return None if lines is None else [_row(*row) for row in csv.reader(lines)]


def record(folder: Path, paths: Iterable[str] | None = None, mentioning: tuple[str, ...] = ()) -> list[RecordRow] | None:
    """The rows of the dist-info's RECORD (each a ``RecordRow`` with its ``hash`` and ``size``):
    only those of ``paths`` when given, else only those whose line mentions one of ``mentioning``
    when given (the rows of every ``.so``).  None when it has none; BadInput naming it when it
    cannot be read, MalformedRecord when a row is not ``path,hash,size`` (a blank line, four
    columns, a size that is no number; among the lines that may be the rows asked for)."""
    wanted = None if paths is None else frozenset(paths)
    if wanted is not None:  # a path is the line up to its first comma, unless it is quoted
        dist = DistInfo(folder, lambda line: line.startswith('"') or line.split(",", 1)[0] in wanted)
    else:
        dist = DistInfo(folder, (lambda line: any(m in line for m in mentioning)) if mentioning else None)
    if dist.read_text("RECORD") is None:
        return None
    try:
        rows = _files(dist) or []
        return rows if wanted is None else [row for row in rows if str(row) in wanted]
    except csv.Error as exc:
        raise MalformedRecord(str(Path(folder) / "RECORD"), f"unreadable RECORD: not CSV ({exc})") from None
    except (TypeError, ValueError):  # importlib.metadata's make_file(name, hash, size) given another row
        raise MalformedRecord(str(Path(folder) / "RECORD"), "unreadable RECORD: a row that is not path,hash,size "
                                                     "(a blank line, more than three columns or a size that is no number)") from None
