"""The one reader of dist-info folders (PEP 376, the wheel spec): which distributions a site-packages
folder holds (``installed``: names as ``packaging.utils.canonicalize_name`` gives them), RECORD's rows
(``record``) and METADATA's Version (``version``), as ``importlib.metadata`` reads them.  Nothing of
the distribution is imported or run.

Each file is read through ``bounded.read_file`` (``Folder.read_text``, the one method
``importlib.metadata.Distribution`` asks a subclass for): a regular file within a cap (a FIFO, a
device or a 3 GB file is a BadInput naming it, never a hang), decoded as UTF-8 with bad bytes replaced.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

from patchkit.bounded import read_file
from patchkit.errors import BadInput
from patchkit.targets.import_path import TEXT_CAP  # as for every small text file of an environment

RECORD_CAP = 64 << 20  # torch's RECORD is a few MiB, FlashInfer 0.7.4's 2 MiB
_FOLDER = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)\.dist-info")


class MalformedRecord(BadInput):
    """A RECORD that is read but whose rows are not CSV rows of path, hash and size."""


class Folder(metadata.Distribution):
    """The dist-info folder ``folder`` as ``importlib.metadata`` reads it, each file read once through the
    bounded reader, within ``TEXT_CAP`` (RECORD: ``RECORD_CAP``).

    ``lines``: when given, RECORD's text is only the lines it keeps, a superset of the rows a
    caller needs: a RECORD lists every file of a package (FlashInfer's some 15,000), and parsing
    them all costs 50 ms where a command needs the rows of a few files."""

    def __init__(self, folder: Path, lines: Callable[[str], bool] | None = None) -> None:
        self.folder = Path(folder)
        self._lines = lines
        self._texts: dict[str, str | None] = {}

    def read_text(self, filename: str) -> str | None:
        """The text of the dist-info's file ``filename``, None when there is none; BadInput naming
        it when it is no regular file or larger than its cap.  Only files of the folder itself."""
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

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        return self.folder.parent / path


def installed(site: Path) -> list[tuple[str, str, Path]]:
    """(canonical name, version, folder) of each dist-info folder in ``site``, as its folder's name
    gives them, sorted by folder name; [] where ``site`` is no folder to read."""
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return []
    return [(canonicalize_name(m["name"]), m["version"], site / n) for n in names if (m := _FOLDER.fullmatch(n))]


def folders(site: Path, name: str) -> list[Path]:
    """The dist-info folders of the distribution ``name`` (any spelling PEP 503 takes as one) in ``site``."""
    wanted = canonicalize_name(name)
    return [folder for found, _, folder in installed(site) if found == wanted]


def record(folder: Path, paths: Iterable[str] | None = None, mentioning: tuple[str, ...] = ()) -> list[metadata.PackagePath] | None:
    """The rows of the dist-info's RECORD (``importlib.metadata.PackagePath``s, with their ``hash``
    and ``size``): only those of ``paths`` when given, else only those whose line mentions one of
    ``mentioning`` when given (the rows of every ``.so``).  None when it has none; BadInput naming
    it when it cannot be read, MalformedRecord when a row is not ``path,hash,size`` (a blank line,
    four columns, a size that is no number; among the lines that may be the rows asked for)."""
    wanted = None if paths is None else frozenset(paths)
    if wanted is not None:  # a path is the line up to its first comma, unless it is quoted
        dist = Folder(folder, lambda line: line.startswith('"') or line.split(",", 1)[0] in wanted)
    else:
        dist = Folder(folder, (lambda line: any(m in line for m in mentioning)) if mentioning else None)
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


def version(folder: Path) -> str | None:
    """The ``Version`` header of the dist-info ``folder``'s METADATA; None when it has no METADATA
    or no version.  BadInput naming it when it is no regular file or larger than its cap."""
    dist = Folder(folder)
    if dist.read_text("METADATA") is None:
        return None
    found = (dist.metadata.get_all("Version") or [None])[0]  # the first, as Message.get
    return (found.strip() or None) if isinstance(found, str) else None


def installed_versions(sites: list[Path]) -> dict[str, str]:
    """canonical distribution name -> version of what ``sites`` have installed, the first site
    that has a distribution winning (as on sys.path), and in a site its first dist-info."""
    found: dict[str, str] = {}
    for site in sites:
        for name, version, _ in installed(site):
            found.setdefault(name, version)
    return found
