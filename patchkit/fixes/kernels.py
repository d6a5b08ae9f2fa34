"""What patchkit knows of the compiled CUDA code of the distributions a server loads:
``known-kernels.toml``, as data.

Each ``[[distributions]]`` names a distribution (its PEP 503 name), whether the server loads it
at every start (``always``: why, with the source; a file of it with no code for the GPUs then
makes doctor exit 1; or ``[distributions.start]``: the module and method of the release that the
server runs at every start, whose imports ``kernels/imports.py`` reads from the installed
release, and ``says``, the sentence that names them), what to do when a file of it has no code for the GPUs (``do``), and
``[[distributions.files]]``: a glob over its RECORD paths, what the file is and when it is
loaded (``what``), the GPUs it is loaded on only (``only_on``) or never (``not_on``), and a
``do`` of its own; in a distribution loaded ``always``, ``at_start = false`` marks a file that start
does not load (a feature's module, loaded where the feature is used: named with it, it fails no
start; a file not listed counts as loaded).  ``[default]``'s ``do`` is for any other distribution.  A wrong table is one
BadInput line naming the file and the key.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.fixes.load import HERE, Table, _get, _read
from patchkit.values import Value

KERNELS = "known-kernels.toml"


class KnownFile(Value):
    glob: str
    what: str
    only_on: tuple[CC, ...]
    not_on: tuple[CC, ...]
    do: str | None
    at_start: bool = True  # loaded when the distribution is (``always``); False: only where a feature imports it

    def loaded_on(self, cc: CC) -> bool:
        return (not self.only_on or cc in self.only_on) and cc not in self.not_on


class Start(Value):
    """Where the server starts in a release: importing ``module`` (relative to site-packages) and
    calling ``method`` ("Class.name") of it; ``says``: "... {modules} ... ({files})"."""

    module: str
    method: str | None
    says: str


class KnownDistribution(Value):
    name: str
    always: str | None  # why the server loads it at every start; None: only when asked for
    do: str
    files: tuple[KnownFile, ...]
    start: Start | None = None  # what it loads at every start is read from the release

    def file(self, path: str) -> KnownFile | None:
        """What is known of the file at ``path`` (relative to site-packages)."""
        return next((f for f in self.files if fnmatchcase(path, f.glob)), None)


class Kernels(Value):
    default: str  # what to do for a distribution not named
    distributions: dict[str, KnownDistribution]

    def of(self, name: str) -> KnownDistribution:
        return self.distributions.get(name) or KnownDistribution(name, None, self.default, ())


def _ccs(doc: Table, key: str, path: Path, what: str) -> tuple[CC, ...]:
    if key not in doc:
        return ()
    found = []
    for text in _get(doc, key, list, path, what):
        major, dot, minor = str(text).partition(".")
        if not isinstance(text, str) or not (major.isdigit() and dot and minor.isdigit()):
            raise BadInput(str(path), f"{what}: {key!r} must list compute capabilities such as \"9.0\"")
        found.append(CC(int(major), int(minor)))
    return tuple(found)


def _text(doc: Table, key: str, path: Path, what: str) -> str | None:
    return _get(doc, key, str, path, what) if key in doc else None


def _file(doc: object, path: Path, what: str, always: bool) -> KnownFile:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    at_start = _get(doc, "at_start", bool, path, what) if "at_start" in doc else True
    if not at_start and not always:
        raise BadInput(str(path), f"{what}: 'at_start' is for a file of a distribution loaded 'always'")
    return KnownFile(_get(doc, "glob", str, path, what), _get(doc, "what", str, path, what),
                     _ccs(doc, "only_on", path, what), _ccs(doc, "not_on", path, what), _text(doc, "do", path, what), at_start)


def _distribution(doc: object, path: Path, what: str) -> KnownDistribution:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    name = _get(doc, "name", str, path, what)
    files = doc.get("files", [])
    if not isinstance(files, list):
        raise BadInput(str(path), f"{what}: 'files' must be an array of tables ([[distributions.files]])")
    start = doc.get("start")
    if start is not None:
        if not isinstance(start, dict) or "always" in doc:
            raise BadInput(str(path), f"{what} ({name}): 'start' must be a table ([distributions.start]), without 'always'")
        start = Start(_get(start, "module", str, path, f"{what} ({name}), start"), _text(start, "method", path, what),
                      _get(start, "says", str, path, f"{what} ({name}), start"))
    return KnownDistribution(name, _text(doc, "always", path, what), _get(doc, "do", str, path, f"{what} ({name})"),
                             tuple(_file(f, path, f"{what} ({name}), file {i}", "always" in doc) for i, f in enumerate(files, 1)),
                             start)


def read_kernels(path: Path = HERE / KERNELS) -> Kernels:
    doc = _read(path)
    default = doc.get("default")
    if not isinstance(default, dict):
        raise BadInput(str(path), "'default' must be a table ([default]) with 'do'")
    entries = doc.get("distributions", [])
    if not isinstance(entries, list):
        raise BadInput(str(path), "'distributions' must be an array of tables ([[distributions]])")
    known: dict[str, KnownDistribution] = {}
    for i, entry in enumerate(entries, 1):
        d = _distribution(entry, path, f"distribution {i}")
        if d.name in known:
            raise BadInput(str(path), f"distribution {i}: {d.name!r} is named twice")
        known[d.name] = d
    return Kernels(_get(default, "do", str, path, "default"), known)


@lru_cache(maxsize=1)
def known_kernels() -> Kernels:
    return read_kernels()
