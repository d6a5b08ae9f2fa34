"""Find, check and drop cached bytecode (.pyc) of source files patchkit rewrote.

The standard library and its own names only, cheap to import: the CLI imports it at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from patchkit.types import StrEnum
from patchkit.values import Value


class Freshness(StrEnum):
    """A cached bytecode file against its source (not a fix's or a target's status: ``types.Status``)."""

    FRESH = "fresh"
    STALE = "stale"
    INVALID = "invalid"  # not a bytecode file Python would read


FRESH, STALE, INVALID = Freshness.FRESH, Freshness.STALE, Freshness.INVALID

_TAG_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HEADER_SIZE = 16  # PEP 552: magic, flags, then mtime + size or an 8-byte source hash


class Pyc(Value):
    path: Path
    status: Freshness
    reason: str


def _cached_name(rest: str) -> bool:
    """Whether ``rest`` is what follows ``<stem>.`` in the name of a cached bytecode file:
    ``<tag>[.opt-N].pyc``.  Interpreter cache tags look like "cpython-311", "pypy39",
    "pypy39-pp73", "graalpy231-310": letters, digits, ``_`` and ``-``, a digit among them, no
    dot; so "utils.<tag>.pyc" never matches "utils_extra.<tag>.pyc", "my_utils.<tag>.pyc" or
    "utils.pyc.bak".  (The regular expression ``[A-Za-z0-9_-]*[0-9][A-Za-z0-9_-]*(?:\\.opt-[0-9]+)?\\.pyc``,
    read without compiling one.)"""
    if not rest.endswith(".pyc"):
        return False
    tag, opt, level = rest[:-4].partition(".opt-")
    if opt and not (level.isascii() and level.isdigit()):
        return False
    return _TAG_CHARS.issuperset(tag) and any(c in "0123456789" for c in tag)


def cached_files(source: Path) -> list[Path]:
    """Every existing cached bytecode file of exactly this module, sorted.

    `<dir>/__pycache__/<stem>.<tag>[.opt-N].pyc` for any interpreter tag, plus a
    legacy `<dir>/<stem>.pyc`.  A `__pycache__` that is a symlink resolving
    outside the source's directory is skipped.
    """
    source = Path(source)
    found = []
    legacy = source.with_suffix(".pyc")
    if legacy != source and legacy.is_file():
        found.append(legacy)
    pycache = source.parent / "__pycache__"
    if pycache.is_symlink():
        here = source.parent.resolve()
        if not pycache.resolve().is_relative_to(here):
            return sorted(found)
    stem = source.stem + "."
    try:
        with os.scandir(pycache) as entries:
            found += [Path(e.path) for e in entries
                      if e.name.startswith(stem) and _cached_name(e.name[len(stem):]) and e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        pass
    return sorted(found)


def drop(sources: Iterable[Path]) -> list[Path]:
    """Delete the cached bytecode of each source; return the files deleted."""
    deleted = []
    for source in sources:
        for pyc in cached_files(source):
            try:
                pyc.unlink()
            except FileNotFoundError:  # removed meanwhile (another process, an earlier source)
                continue
            deleted.append(pyc)
    return deleted


def unlink(pycs: Iterable[Path]) -> list[Path]:
    """Delete exactly these bytecode files (e.g. the stale ones ``check`` found); return those deleted."""
    deleted = []
    for pyc in pycs:
        try:
            pyc.unlink()
        except FileNotFoundError:  # removed meanwhile
            continue
        deleted.append(pyc)
    return deleted


def check(source: Path, source_bytes: bytes | None = None) -> list[Pyc]:
    """Compare each cached bytecode file's 16-byte header with the source as it is now.

    Timestamp pycs compare the recorded mtime and size with os.stat(source); a
    reason reads "source mtime <recorded in pyc> != <current>".  Hash-based pycs
    (checked or unchecked) compare the recorded SipHash with one computed with
    that pyc's own magic number as key, so pycs of other Python versions are
    judged by their own header.  `source_bytes` defaults to the file's content.
    Raises FileNotFoundError if pycs exist but the source does not.
    """
    source = Path(source)
    pycs = cached_files(source)
    if not pycs:
        return []
    st = os.stat(source)
    hashes: dict[bytes, bytes] = {}  # magic -> source hash with that magic as key

    def source_hash(magic: bytes) -> bytes:
        nonlocal source_bytes
        if magic not in hashes:
            import _imp  # builtin; importlib.util.source_hash uses it with the running magic

            if source_bytes is None:
                source_bytes = source.read_bytes()
            hashes[magic] = _imp.source_hash(int.from_bytes(magic, "little"), source_bytes)
        return hashes[magic]

    results = []
    for pyc in pycs:
        try:
            with open(pyc, "rb") as f:
                header = f.read(_HEADER_SIZE)
        except FileNotFoundError:  # removed since it was listed
            continue
        status, reason = _judge(header, st, source_hash)
        results.append(Pyc(pyc, status, reason))
    return results


def _judge(header: bytes, st: os.stat_result, source_hash: Callable[[bytes], bytes]) -> tuple[Freshness, str]:
    magic, flags = header[:4], int.from_bytes(header[4:8], "little")
    if len(header) < _HEADER_SIZE:
        return INVALID, f"header is {len(header)} bytes, expected {_HEADER_SIZE}"
    if magic[2:] != b"\r\n":
        return INVALID, f"bad magic number {magic!r}"
    if flags & ~0b11:  # importlib rejects unknown flag bits too
        return INVALID, f"unknown flags {flags:#x}"
    if flags & 0b1:  # hash-based; bit 1 only says whether Python checks it when importing
        if header[8:16] == source_hash(magic):
            return FRESH, "source hash matches"
        return STALE, "source hash differs"
    mtime, size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    now_mtime, now_size = int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
    problems = []
    if mtime != now_mtime:
        problems.append(f"source mtime {mtime} != {now_mtime}")
    if size != now_size:
        problems.append(f"source size {size} != {now_size}")
    if problems:
        return STALE, "; ".join(problems)
    return FRESH, "source mtime and size match"
