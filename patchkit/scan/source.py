"""The findings in one file's source: ``scan_file`` (any file ``patchkit scan`` reads, by its
extension) and ``scan_source`` (Python).  Pure; nothing scanned is imported or run.

A Python file is scanned for capability tables and comparisons and for platform flags
(``gate_visitor``); a C, C++ or CUDA file (``preprocessor.EXTENSIONS``) for its
``#if``/``#elif`` conditions on ``__CUDA_ARCH__`` (``preprocessor``).

How it stays fast (LibCST parses ~0.5 MB/s, so parsing every candidate file of an
SGLang checkout would take a minute):

1. the bytes pre-filter (``prefilter``) marks the offsets that may hold a finding;
2. only files with marks are parsed, by the stdlib ``ast`` (``statement_cutter``), and
   only to cut out the statement around each mark;
3. LibCST parses just those statements and does the analysis (``gate_visitor``).

``whole_file=True`` skips 1 and 2 and analyses the whole module with LibCST: the
reference the fast path is tested against, and its way out.
"""

from __future__ import annotations

import libcst as cst

from patchkit.cc import CC, Key
from patchkit.rewrite.capability import pair
from patchkit.scan import prefilter, preprocessor, statement_cutter
from patchkit.scan.finding import Finding
from patchkit.scan.gate_visitor import visit


def scan(source: bytes, path: str, from_cc: Key, cc: Key, tables: tuple[str, ...]) -> tuple[list[Finding], bool]:
    """(findings, parsed?) by the fast path.  Raises for source neither ast nor LibCST can parse."""
    caps = pair(from_cc, cc)
    if caps[0] == caps[1]:
        return [], False
    marks = prefilter.marks(source, *caps)
    if not marks:
        return [], False
    src, reencoded = statement_cutter.utf8(source)
    if src is not source:
        marks = prefilter.marks(src, *caps)
    tree = statement_cutter.parse(src, reencoded)
    if tree is not None:
        found: list[Finding] = []
        try:
            for piece in statement_cutter.pieces(src, tree, marks):
                module = cst.parse_module(piece.text)
                found += visit(module, path, caps, from_cc, tables, piece.line0, piece.scope)
        except (cst.ParserSyntaxError, RecursionError):
            pass  # a statement LibCST reads differently: fall back to the whole file
        else:
            found.sort(key=lambda f: f.line)
            return found, True
    return _fallback(source, path, caps, from_cc, tables), True


def _whole_file(source: bytes, path: str, caps: tuple[CC, CC], from_cc: Key, tables: tuple[str, ...]) -> list[Finding]:
    found = visit(cst.parse_module(source), path, caps, from_cc, tables)
    found.sort(key=lambda f: f.line)
    return found


# The fast path's way out (source this Python's ast cannot read, a statement LibCST
# reads differently): the tests replace it to prove they never take it.
_fallback = _whole_file


def scan_source(
    source: bytes, path: str, from_cc: Key, cc: Key, tables: tuple[str, ...] = (), *, whole_file: bool = False
) -> list[Finding]:
    """The findings in one file's source.  Pure.

    ``whole_file``: parse and analyse the whole module with LibCST (slow; the
    reference for the fast path).  Raises ValueError for a capability that is neither
    an int nor "X.Y", and LibCST's ``ParserSyntaxError`` (or a decoding error) for
    source it cannot parse.
    """
    if whole_file:
        caps = pair(from_cc, cc)
        return [] if caps[0] == caps[1] else _whole_file(source, path, caps, from_cc, tables)
    return scan(source, path, from_cc, cc, tables)[0]


def scan_any(source: bytes, path: str, from_cc: Key, cc: Key, tables: tuple[str, ...] = ()) -> tuple[list[Finding], bool]:
    """(findings, read?) of one file, by its extension: *.py by the fast path (``scan``), a
    C/C++/CUDA file by ``preprocessor.scan``; any other file has none (and is not read)."""
    suffix = path[path.rfind(".") :].lower() if "." in path.rsplit("/", 1)[-1] else ""
    if suffix == ".py":
        return scan(source, path, from_cc, cc, tables)
    if suffix in preprocessor.EXTENSIONS:
        return preprocessor.scan(source, path, from_cc, cc)
    pair(from_cc, cc)
    return [], False


def scan_file(source: bytes, path: str, from_cc: Key, cc: Key, tables: tuple[str, ...] = ()) -> list[Finding]:
    """The findings in one file, in line order, chosen by the extension of ``path`` (its
    path relative to the tree, "/"-separated: it is the findings' ``path``, and a folder or
    file name such as ``*_sm120.py`` counts for their class).  Pure.

    ``*.py``: capability tables, comparisons and platform-flag gates; ``.cu``, ``.cuh``,
    ``.h``, ``.hpp``, ``.cpp``: preprocessor conditions on ``__CUDA_ARCH__``; other files:
    none.  ``tables``: the table names patchkit's rules patch (a table finding's
    ``patchable``).  A finding excludes ``cc`` where ``patchkit.scan.classify.classify``
    calls it unaware.  Raises ValueError for a capability that is neither an int nor
    "X.Y", and for Python source neither ``ast`` nor LibCST can parse, LibCST's
    ``ParserSyntaxError`` (or a decoding error); C/C++/CUDA source never raises.
    """
    return scan_any(source, path, from_cc, cc, tuple(tables))[0]
