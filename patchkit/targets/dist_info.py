"""A dist-info folder (PEP 376, the wheel spec) read as files, as ``importlib.metadata`` reads it,
without importing it (``importlib.metadata`` and the email package it brings cost a command about
10 ms): RECORD's rows by its CSV reader (a quoted path with a comma in it is one path; a row's path
as its ``PackagePath``, its hash and size), and METADATA's Version header as its email parser
gives it (``header``).  Nothing of the distribution is imported or run.

Each file is read through ``bounded.read_file``: a regular file within a cap (a FIFO, a device
or a 3 GB file is a BadInput naming it, never a hang), decoded as UTF-8 with bad bytes replaced.
The tests hold both against ``importlib.metadata`` on real and generated files.

METADATA is a block of email headers, then the long description (the core metadata
specification).  ``header`` reads one header as ``email.feedparser`` with the compat32 policy and
``importlib.metadata`` give it: the headers end at the first line that is neither a header nor a
continuation (a blank line among them), a ``From `` line is skipped, a header's name is matched in
any case and the first wins, a continuation keeps its line ending, and a value over several lines
is dedented as ``importlib.metadata`` does.
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


# What starts a header line (feedparser's headerRE: "From ", a name of printable ASCII but ":"
# then ":", or a space or tab that continues the header above).
_NAME = frozenset(chr(c) for c in range(0x21, 0x7F)) - {":"}


def version(folder: Path) -> str | None:
    """The ``Version`` header of the dist-info ``folder``'s METADATA; None when it has no METADATA
    or no version.  BadInput naming it when it is no regular file or larger than its cap."""
    try:
        data = read_file(folder / "METADATA", TEXT_CAP, "METADATA")
    except FileNotFoundError:
        return None
    found = header(data.decode("utf-8", "replace"), "Version")
    return (found.strip() or None) if found is not None else None


def _header_line(line: str) -> bool:
    if line.startswith(("From ", " ", "\t")):
        return True
    name, colon, _ = line.partition(":")
    return bool(colon) and _NAME.issuperset(name)


def header(text: str, name: str) -> str | None:
    """The value of the first header ``name`` (in any case) of the email headers that begin
    ``text``, as ``importlib.metadata`` gives it; None when there is none."""
    lines = []
    for line in _lines(text):
        if not _header_line(line):
            break
        lines.append(line)
    wanted, found, current = name.lower(), None, None  # current: the lines of the header being read
    for number, line in enumerate(lines):
        if line[0] in " \t":
            if current is not None:
                current.append(line)
            continue
        if current is not None and found is None and current[0].split(":", 1)[0].lower() == wanted:
            found = _value(current)
        current = None
        if line.startswith("From "):
            if number == len(lines) - 1 and number:  # the first line of the body, pushed back
                break
            continue  # the envelope's line, or one misplaced: not a header
        if line.find(":") > 0:
            current = [line]
    if current is not None and found is None and current[0].split(":", 1)[0].lower() == wanted:
        found = _value(current)
    return found


def _lines(text: str):
    """The lines of ``text`` with their ends, split at ``\r\n``, ``\r`` or ``\n`` (as the parser's
    input, a StringIO with ``newline=''``, splits them), one at a time."""
    start, size = 0, len(text)
    while start < size:
        cr, lf = text.find("\r", start), text.find("\n", start)
        end = min(i for i in (cr, lf) if i >= 0) if cr >= 0 or lf >= 0 else size - 1
        if text.startswith("\r\n", end):
            end += 1
        yield text[start:end + 1]
        start = end + 1


def _value(lines: list[str]) -> str:
    """A header's value from its lines (compat32's ``header_source_parse``), dedented where it spans
    several as ``importlib.metadata`` dedents it (``_adapters.Message``)."""
    value = (lines[0].split(":", 1)[1].lstrip(" \t") + "".join(lines[1:])).rstrip("\r\n")
    if "\n" not in value:
        return value
    import textwrap

    return textwrap.dedent(" " * 8 + value)
