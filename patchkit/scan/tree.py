"""The tree walk: ``scan_tree`` lists the source files under a folder (*.py, and the C/C++/CUDA
files of ``patchkit.scan.preprocessor.EXTENSIONS``) and scans each one, in a pool of worker
processes for a big tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import libcst as cst

from patchkit.cc import Key
from patchkit.rewrite.capability import pair
from patchkit.scan.finding import Finding
from patchkit.scan.preprocessor import EXTENSIONS
from patchkit.scan.source import scan_any

SKIP_DIRS = frozenset({"__pycache__", "node_modules", ".git"})
# The files scanned: Python, and C/C++/CUDA for their preprocessor conditions.
SUFFIXES = (".py", *EXTENSIONS)


def source_files(root: Path) -> list[tuple[str, str]]:
    """(path, path relative to root with "/") of every file with one of ``SUFFIXES``
    under root, sorted.

    Skips hidden folders, ``__pycache__``, ``node_modules``, and symlinks (to
    folders and to files: no file twice, nothing outside the tree).
    """
    out = []
    root_s = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(root_s, followlinks=False):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d))
        )
        rel_dir = os.path.relpath(dirpath, root_s).replace(os.sep, "/")
        for f in sorted(filenames):
            if f.endswith(SUFFIXES):
                full = os.path.join(dirpath, f)
                if not os.path.islink(full):
                    out.append((full, f if rel_dir == "." else f"{rel_dir}/{f}"))
    return out


def in_scan(rel: str) -> bool:
    """Does ``source_files`` take this "/"-separated relative path (a file with one of
    ``SUFFIXES`` in no hidden, ``__pycache__`` or ``node_modules`` folder)?"""
    *folders, name = rel.split("/")
    return name.endswith(SUFFIXES) and not any(d.startswith(".") or d in SKIP_DIRS for d in folders)


_Result = tuple[list[Finding], bool, str | None]  # (findings, parsed?, why it was skipped or None)
_Chunk = tuple[list[int] | list[tuple[str, str]], Key, Key, tuple[str, ...]]  # files: indices into _SOURCES, or paths


def _scan_file(full: str, rel: str, from_cc: Key, cc: Key, tables: tuple[str, ...]) -> _Result:
    """(findings, parsed?, why it was skipped or None)."""
    try:
        with open(full, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return [], False, f"cannot read: {exc.strerror or exc}"
    return _scan_bytes(data, rel, from_cc, cc, tables)


def _scan_bytes(data: bytes, rel: str, from_cc: Key, cc: Key, tables: tuple[str, ...]) -> _Result:
    try:
        found, parsed = scan_any(data, rel, from_cc, cc, tables)
    except cst.ParserSyntaxError as exc:
        return [], False, f"cannot parse: line {exc.raw_line}: {exc.message}"
    except Exception as exc:  # decoding errors, recursion limits: skip the file, never crash
        return [], False, f"cannot parse: {type(exc).__name__}: {exc}"
    return found, parsed, None


_SOURCES: list[tuple[str, bytes]] = []  # scan_sources' input, inherited by its forked workers


def _scan_chunk(args: _Chunk) -> list[_Result]:
    files, from_cc, cc, tables = args
    return [_scan_bytes(_SOURCES[f][1], _SOURCES[f][0], from_cc, cc, tables) if isinstance(f, int)
            else _scan_file(f[0], f[1], from_cc, cc, tables) for f in files]


def scan_sources(
    sources: list[tuple[str, bytes]],
    from_cc: Key,
    cc: Key,
    tables: tuple[str, ...] = (),
    jobs: int | None = None,
) -> list[tuple[list[Finding], bool, str | None]]:
    """``scan_tree`` for (relative path, bytes) pairs read elsewhere (from git objects):
    (findings in line order, parsed?, why it was skipped or None) of each source."""
    pair(from_cc, cc)
    tables = tuple(tables)
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1) if len(sources) >= 500 else 1
    _SOURCES[:] = sources
    try:
        indices = list(range(len(sources)))
        if jobs > 1:
            results = _parallel(indices, from_cc, cc, tables, jobs)
        else:
            results = _scan_chunk((indices, from_cc, cc, tables))
    finally:
        _SOURCES[:] = []
    return results


def _collect(
    rels: list[str], results: list[_Result], skipped: list[tuple[str, str]] | None
) -> tuple[list[Finding], int, int]:
    findings: list[Finding] = []
    parsed = 0
    for rel, (found, ok, why) in zip(rels, results, strict=True):
        findings += found
        parsed += ok
        if why is not None and skipped is not None:
            skipped.append((rel, why))
    findings.sort(key=lambda f: (f.path, f.line))
    return findings, len(rels), parsed


def scan_tree(
    root: Path,
    from_cc: Key,
    cc: Key,
    tables: tuple[str, ...] = (),
    skipped: list[tuple[str, str]] | None = None,
    jobs: int | None = None,
) -> tuple[list[Finding], int, int]:
    """(findings sorted by path and line, source files seen, files parsed).

    Files that cannot be read or parsed are skipped (not counted as parsed); when
    ``skipped`` is a list, (relative path, reason) pairs are appended to it.
    ``jobs``: worker processes (default: up to 2, and 1 for small trees).
    """
    pair(from_cc, cc)  # ValueError for a capability that is neither an int nor "X.Y"
    files = source_files(Path(root))
    tables = tuple(tables)
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1) if len(files) >= 500 else 1
    if jobs > 1:
        results = _parallel(files, from_cc, cc, tables, jobs)
    else:
        results = _scan_chunk((files, from_cc, cc, tables))
    return _collect([rel for _, rel in files], results, skipped)


def _parallel(files: list[int] | list[tuple[str, str]], from_cc: Key, cc: Key, tables: tuple[str, ...],
              jobs: int) -> list[_Result]:
    import gc
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:  # no fork here: one process
        return _scan_chunk((files, from_cc, cc, tables))
    # Interleaved chunks: big files cluster in some folders.
    n = jobs * 8
    chunks = [files[i::n] for i in range(n)]
    # Each worker first freezes what it inherited (patchkit's and its libraries' objects, the file
    # list; a whole test session where scan runs in-process): its collections, many while the ast
    # of a big file is built, then walk only what the scan allocates, and never write to the
    # inherited objects, whose pages copy-on-write would copy.
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=gc.freeze) as pool:
        parts = list(pool.map(_scan_chunk, [(c, from_cc, cc, tables) for c in chunks]))
    out: list[Any] = [None] * len(files)  # each filled with a _Result below
    for i, part in enumerate(parts):
        out[i::n] = part
    return out
