"""A dist-info folder (PEP 376, the wheel spec) read as files with ``importlib.metadata``:
RECORD's rows by its CSV reader (a quoted path with a comma in it is one path); METADATA's
Version header is read by ``metadata.py``, as this parser reads it, without importing it.
Nothing of the distribution is imported or run.

``importlib.metadata`` asks a ``Distribution`` for the text of each file through
``read_text``, its documented extension point: ``DistInfo`` answers through
``bounded.read_file``, so each file is a regular file read within a cap (a FIFO, a device or a
3 GB file is a BadInput naming it, never a hang), decoded as UTF-8 with bad bytes replaced.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from importlib.metadata import Distribution, PackagePath
from pathlib import Path

from patchkit.bounded import read_file
from patchkit.errors import BadInput
from patchkit.targets.import_path import TEXT_CAP  # METADATA's cap, as for every small text file of an environment

RECORD_CAP = 64 << 20  # torch's RECORD is a few MiB, FlashInfer 0.7.4's 2 MiB


class MalformedRecord(BadInput):
    """A RECORD that is read but whose rows are not CSV rows of path, hash and size."""


class DistInfo(Distribution):
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
        (importlib.metadata's ``read_text('')`` for a bare egg-info file is None)."""
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

    def locate_file(self, path) -> Path:
        """Where a path of RECORD is: relative to the folder that holds the dist-info."""
        return self.folder.parent / path


def record(folder: Path, paths: Iterable[str] | None = None, mentioning: tuple[str, ...] = ()) -> list[PackagePath] | None:
    """The rows of the dist-info's RECORD (each a ``PackagePath`` with its ``hash`` and ``size``):
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
        rows = dist.files or []
        return rows if wanted is None else [row for row in rows if str(row) in wanted]
    except csv.Error as exc:
        raise MalformedRecord(str(Path(folder) / "RECORD"), f"unreadable RECORD: not CSV ({exc})") from None
    except (TypeError, ValueError):  # importlib.metadata's make_file(name, hash, size) given another row
        raise MalformedRecord(str(Path(folder) / "RECORD"), "unreadable RECORD: a row that is not path,hash,size "
                                                     "(a blank line, more than three columns or a size that is no number)") from None
