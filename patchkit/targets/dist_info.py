"""The one reader of dist-info folders (PEP 376, the wheel spec): which distributions a site-packages
folder holds and their versions (``installed``, ``version``: as each folder's name says them,
``{name}-{version}.dist-info``, which the installed-project spec makes every installer write, both
normalized; names as ``packaging.utils.canonicalize_name`` gives them) and RECORD's rows (``record``:
CSV rows of path, hash and size, read with ``csv``).  Nothing of the distribution is imported or run.

RECORD is read through ``bounded.read_file``: a regular file within a cap (a FIFO, a device or a
3 GB file is a BadInput naming it, never a hang), decoded as UTF-8 with bad bytes replaced.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from patchkit.bounded import read_file
from patchkit.errors import BadInput
from patchkit.match import Pattern
from patchkit.values import Value

RECORD_CAP = 64 << 20  # torch's RECORD is a few MiB, FlashInfer 0.7.4's 2 MiB
_FOLDER = Pattern(r"(?P<name>[^-]+)-(?P<version>[^-]+)\.dist-info")
_NOT_A_ROW = ("unreadable RECORD: a row that is not path,hash,size (a blank line, more than three columns or a "
              "size that is no number)")


class MalformedRecord(BadInput):
    """A RECORD that is read but whose rows are not CSV rows of path, hash and size."""


class FileHash(Value):
    """A RECORD row's hash, ``sha256=<urlsafe base64, unpadded>``: its algorithm and its digest."""

    mode: str
    value: str


class RecordRow(Value):
    """A row of RECORD: a path relative to the site-packages folder, its hash and its size (each
    None where the row leaves it empty, as RECORD does for itself and for bytecode)."""

    path: str
    hash: FileHash | None
    size: int | None


def _record_text(folder: Path) -> str | None:
    """The text of the dist-info's RECORD, None when there is none; BadInput naming it when it is no
    regular file or larger than ``RECORD_CAP``."""
    try:
        data = read_file(folder / "RECORD", RECORD_CAP, "RECORD")
    except FileNotFoundError:
        return None
    return data.decode("utf-8", "replace")


def _row(fields: list[str]) -> RecordRow:
    """A CSV row of RECORD: path, then hash and size where given; ValueError when it is none."""
    if not 1 <= len(fields) <= 3:
        raise ValueError("not path,hash,size")
    path, digest, size = fields + [""] * (3 - len(fields))
    mode, _, value = digest.partition("=")
    return RecordRow(path, FileHash(mode, value) if digest else None, int(size) if size else None)


def installed(site: Path) -> list[tuple[str, str, Path]]:
    """(canonical name, version, folder) of each dist-info folder in ``site``, as its folder's name
    gives them, sorted by folder name; [] where ``site`` is no folder to read."""
    from packaging.utils import canonicalize_name

    try:
        names = sorted(os.listdir(site))
    except OSError:
        return []
    return [(canonicalize_name(m["name"]), m["version"], site / n) for n in names if (m := _FOLDER.fullmatch(n))]


def version_in(site: Path, name: str) -> str | None:
    """The version of the distribution ``name`` (any spelling PEP 503 takes as one) in ``site``, as its
    first dist-info folder names it; None when ``site`` has none."""
    from packaging.utils import canonicalize_name

    wanted = canonicalize_name(name)
    return next((version for found, version, _ in installed(site) if found == wanted), None)


def record(folder: Path, paths: Iterable[str] | None = None, mentioning: tuple[str, ...] = ()) -> list[RecordRow] | None:
    """The rows of the dist-info's RECORD: only those of ``paths`` when given, else only those whose
    line mentions one of ``mentioning`` when given (the rows of every ``.so``).  None when it has
    none; BadInput naming it when it cannot be read, MalformedRecord when a row is not
    ``path,hash,size`` (a blank line, four columns, a size that is no number; among the lines that
    may be the rows asked for).  A RECORD lists every file of a package (FlashInfer's some 15,000):
    only the lines that may be the rows asked for are parsed."""
    import csv

    text = _record_text(folder)
    if text is None:
        return None
    wanted = None if paths is None else frozenset(paths)
    lines = text.splitlines()
    if wanted is not None:  # a row of a path starts with it and a comma, or with a quote and it (CSV quotes a path with a comma)
        starts = tuple(f"{path}," for path in wanted) + tuple(f'"{path}' for path in wanted)
        lines = [line for line in lines if line.startswith(starts)]
    elif mentioning:
        lines = [line for line in lines if any(m in line for m in mentioning)]
    try:
        return [_row(fields) for fields in csv.reader(lines) if wanted is None or fields and fields[0] in wanted]
    except csv.Error as exc:
        raise MalformedRecord(str(Path(folder) / "RECORD"), f"unreadable RECORD: not CSV ({exc})") from None
    except ValueError:
        raise MalformedRecord(str(Path(folder) / "RECORD"), _NOT_A_ROW) from None


def version(folder: Path) -> str | None:
    """The version of the dist-info ``folder``, as its name says it (``sglang-0.5.9.dist-info``:
    ``0.5.9``), as ``installed`` reads every folder; None for a name that says none."""
    found = _FOLDER.fullmatch(folder.name)
    return found["version"] if found else None


def installed_versions(sites: list[Path]) -> dict[str, str]:
    """canonical distribution name -> version of what ``sites`` have installed, the first site
    that has a distribution winning (as on sys.path), and in a site its first dist-info."""
    found: dict[str, str] = {}
    for site in sites:
        for name, version, _ in installed(site):
            found.setdefault(name, version)
    return found
