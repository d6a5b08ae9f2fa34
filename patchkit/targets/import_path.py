"""Where Python's import system would find a top-level package for an interpreter, worked out
from text: nothing of the environment is imported or run.

``site`` builds ``sys.path`` from the site-packages folders in order: each folder, then the
folders its ``.pth`` files name (the files in sorted order, dot-files left out, as
``site.addsitedir`` reads them; a line that is not a comment and does not start with
``import`` is a folder, relative to the site folder, added when it exists and is new).  A line
that starts with ``import`` is code, which ``site`` runs and patchkit never does: setuptools'
editable installs put one there (``import __editable___sglang_0_5_9_finder;
__editable___sglang_0_5_9_finder.install()``) whose ``install`` *appends* a finder to
``sys.meta_path``, behind the path-based finder.  So Python imports ``sglang`` from the first
folder on the path that holds ``sglang/__init__.py``, and asks the editable finders, in the
order their lines run, only when no folder on the path holds it (not even as a namespace
folder without ``__init__.py``).  Other code lines are not judged, except that one that
rewrites ``sys.path`` (the old ``easy-install.pth`` ``sys.__egginsert`` lines) makes the
order unknowable when two places hold the package.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase
from pathlib import Path

from patchkit.bounded import read_file
from patchkit.errors import BadInput
from patchkit.match import Pattern
from patchkit.values import Value

TEXT_CAP = 4 << 20  # a .pth, a finder, direct_url.json, an .egg-link: a few KiB each in real installs
_FINDER_LINE = Pattern(r"import\s+(__editable___[\w]+_finder)\s*;\s*\1\s*\.\s*install\s*\(\s*\)\s*$")


def read_text(path: Path, what: str) -> str:
    """A small text file of an environment, read as UTF-8 (bad bytes replaced), bounded."""
    return read_file(path, TEXT_CAP, what).decode("utf-8", "replace")


class PathEntry(Value):
    """One folder of ``sys.path``."""

    folder: Path
    site: Path  # the site-packages folder it comes from
    pth: Path | None  # the .pth file that names it; None for the site folder itself


class Finder(Value):
    """An editable finder that a .pth line appends to ``sys.meta_path``."""

    pth: Path  # the __editable__.*.pth whose line installs it
    module: Path  # its module, beside the .pth
    site: Path


class ImportPath(Value):
    entries: list[PathEntry]
    finders: list[Finder]
    reordering: list[Path]  # .pth files with code that rewrites sys.path


def _pth_files(site: Path) -> list[Path]:
    try:
        names = os.listdir(site)
    except OSError:
        return []
    return [site / n for n in sorted(names) if n.endswith(".pth") and not n.startswith(".")]


def import_path(sites: list[Path]) -> ImportPath:
    """``sys.path`` from ``sites`` (in order) and their .pth files, and the editable finders."""
    entries: list[PathEntry] = []
    finders: list[Finder] = []
    reordering: list[Path] = []
    known: set[str] = set()
    for site in sites:
        if not site.is_dir():
            continue
        key = os.path.normcase(os.path.abspath(site))
        if key not in known:
            known.add(key)
            entries.append(PathEntry(site, site, None))
        for pth in _pth_files(site):
            try:
                text = read_text(pth, ".pth file")
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                if line.startswith("#") or not line.strip():
                    continue
                if line.startswith(("import ", "import\t")):
                    finder = _FINDER_LINE.match(line.strip())
                    if finder and (site / f"{finder.group(1)}.py").is_file():
                        finders.append(Finder(pth, site / f"{finder.group(1)}.py", site))
                    elif "sys.path" in line:
                        reordering.append(pth)
                    continue
                folder = Path(os.path.abspath(os.path.join(site, line.rstrip())))
                key = os.path.normcase(str(folder))
                if key not in known and os.path.exists(folder):
                    known.add(key)
                    entries.append(PathEntry(folder, site, pth))
    return ImportPath(entries, finders, list(dict.fromkeys(reordering)))


def mapping(finder: Path, label: str) -> dict[object, object]:
    """The ``MAPPING`` of a setuptools editable finder (read as text, evaluated as a literal)."""
    import ast

    text = read_text(finder, "editable finder")
    match = re.search(r"^MAPPING\s*(?::[^=\n]*)?=\s*(\{.*\})\s*$", text, re.MULTILINE)
    try:
        found = ast.literal_eval(match.group(1)) if match else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        found = None
    if not isinstance(found, dict):
        raise BadInput(str(finder), f"an editable finder of {label} without a readable MAPPING")
    return found


class ImportPlace(Value):
    """A place that would give ``import NAME``."""

    package: Path  # the package folder (its __init__.py inside), or a zipped egg on the path
    entry: PathEntry | None  # the folder of sys.path it is in (None: an editable finder)
    finder: Finder | None

    @property
    def site(self) -> Path:
        by = self.entry if self.entry is not None else self.finder
        assert by is not None  # each place is found on an entry of the path or by a finder (``candidates``)
        return by.site

    @property
    def via(self) -> Path:
        """The file that makes Python find it here: the .pth, or (for the site folder itself) the package."""
        if self.finder is not None:
            return self.finder.pth
        assert self.entry is not None  # each place is found on an entry of the path or by a finder (``candidates``)
        return self.entry.pth or self.package


class Candidates(Value):
    """Every place that would give ``import NAME``, in the order Python asks them."""

    found: list[ImportPlace]  # regular packages on the path first, then the editable finders that map it
    namespace: Path | None  # the first folder of that name without __init__.py, when no folder on the path holds the package

    def first(self) -> ImportPlace | None:
        """What Python imports (None: nothing, or an empty namespace package)."""
        on_path = [f for f in self.found if f.entry is not None]
        if on_path:
            return on_path[0]
        return None if self.namespace is not None or not self.found else self.found[0]


def candidates(name: str, path: ImportPath, label: str, egg: str) -> Candidates:
    """The places on ``path`` that hold the package ``name``.  ``egg``: a glob of the project's
    egg names (a zipped egg on the path is a file Python imports from)."""
    found: list[ImportPlace] = []
    namespace = None
    for entry in path.entries:
        if entry.folder.is_file():
            if fnmatchcase(entry.folder.name, egg):
                found.append(ImportPlace(entry.folder, entry, None))
            continue
        package = entry.folder / name
        if (package / "__init__.py").is_file():
            found.append(ImportPlace(package, entry, None))
        elif namespace is None and package.is_dir():
            namespace = package
    for finder in path.finders:
        folder = mapping(finder.module, label).get(name)
        if isinstance(folder, str) and (Path(folder) / "__init__.py").is_file():
            found.append(ImportPlace(Path(folder), None, finder))
    return Candidates(found, namespace if not any(f.entry for f in found) else None)
