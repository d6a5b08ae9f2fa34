"""Carry an upstream change (a ``git diff``, any file type) to one file of a release: pure.

A backport rule's diff is split by file (``parse``); ``rewrite`` applies one file's hunks to
that file's bytes in the release, trying in turn, as quilt and ``git apply -3`` do:

1. **exactly**: every hunk's pre-image (context and removed lines) is at its line;
2. **at an offset**: at the nearest place after the previous hunk that holds it (GNU patch
   without fuzz: the lines must match exactly, only their position moved);
3. **by a three-way merge** against ``base``, the file in the release the change was made
   on: the diff applied to ``base`` gives *theirs*; the release's file is *ours*; a change
   of theirs lands where ours left ``base``'s lines alone (``difflib`` aligns the three);
   where both changed the same or adjacent lines, the hunk *conflicts*.

A file that already holds the change (every hunk's post-image, found the same way) is
ALREADY_UPSTREAM.  A merged Python file must still make sense: a name that the added lines
read and that nothing in the file binds (``has_sm120f`` in an ``aot.py`` older than the
name) is refused, as pyflakes would flag it; such a release needs the diff refreshed
(``refresh``: added lines a release range leaves out, said in the fix's data).  A hunk that fits none of these raises ``RewriteError`` naming the file
and the hunk: ``cannot apply: <file>: hunk 2 (@@ -414,7 +414,7 @@) conflicts``.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from typing import NamedTuple

from patchkit.errors import RewriteError
from patchkit.types import ALREADY_UPSTREAM, PATCHED

EXACT, OFFSET, MERGED = "exactly", "at an offset", "by a three-way merge"
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class Hunk(NamedTuple):
    number: int  # 1-based, within its file
    header: str  # "@@ -414,7 +414,7 @@"
    old_start: int
    old: tuple[bytes, ...]  # context and removed lines, each with its line ending
    new: tuple[bytes, ...]  # context and added lines

    def name(self) -> str:
        return f"hunk {self.number} ({self.header})"


class Applied(NamedTuple):
    source: bytes
    status: str  # PATCHED or ALREADY_UPSTREAM
    how: str  # EXACT, "at an offset of +3 lines", MERGED
    hunks: int


@lru_cache(maxsize=16)  # a fix's diff is parsed once, not once per file and release
def parse(diff: bytes, name: str) -> dict[str, tuple[Hunk, ...]]:
    """repository path -> its hunks, in order.  ``name``: the diff's file, for errors."""
    files: dict[str, list[Hunk]] = {}
    path = None
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"diff --git a/"):
            path = line[len(b"diff --git a/"):].split(b" b/", 1)[0].decode("utf-8", "replace")
            files[path] = []
            i += 1
            continue
        match = _HUNK.match(line)
        if not match:
            i += 1
            continue
        if path is None:
            raise RewriteError(name, "a hunk before any 'diff --git' line")
        old_len = int(match.group(2) or 1) if match.group(2) != b"0" else 0
        new_len = int(match.group(4) or 1) if match.group(4) != b"0" else 0
        old: list[bytes] = []
        new: list[bytes] = []
        i += 1
        while i < len(lines) and (len(old) < old_len or len(new) < new_len):
            body, mark = lines[i][1:], lines[i][:1]
            if mark == b"\\":  # "\ No newline at end of file": the line before has none
                _strip_last(old, new, lines[i - 1][:1])
            elif mark in (b" ", b"\n", b"\r"):
                body = body if mark == b" " else lines[i]
                old.append(body)
                new.append(body)
            elif mark == b"-":
                old.append(body)
            elif mark == b"+":
                new.append(body)
            else:
                raise RewriteError(name, f"{path}: a hunk ends early ({match.group(0).decode()})")
            i += 1
        if len(old) != old_len or len(new) != new_len:
            raise RewriteError(name, f"{path}: a hunk ends early ({match.group(0).decode()})")
        if i < len(lines) and lines[i].startswith(b"\\"):
            _strip_last(old, new, lines[i - 1][:1])
            i += 1
        header = match.group(0).decode()
        files[path].append(Hunk(len(files[path]) + 1, header, int(match.group(1)), tuple(old), tuple(new)))
    return {p: tuple(h) for p, h in files.items()}


def _strip_last(old: list[bytes], new: list[bytes], mark: bytes) -> None:
    for side in ((old, new) if mark == b" " else (old,) if mark == b"-" else (new,)):
        if side:
            side[-1] = side[-1].rstrip(b"\r\n")


def _place(lines: list[bytes], want: tuple[bytes, ...], guess: int, start: int) -> int | None:
    """The line where ``want`` sits, nearest ``guess`` and not before ``start``, or None."""
    n, size = len(want), len(lines)
    guess = min(max(guess, start), max(size - n, start))
    for distance in range(0, size + 1):
        for p in (guess - distance, guess + distance) if distance else (guess,):
            if start <= p <= size - n and tuple(lines[p:p + n]) == want:
                return p
        if guess - distance < start and guess + distance > size - n:
            return None
    return None


def _patch(lines: list[bytes], hunks: tuple[Hunk, ...], reverse: bool = False):
    """(new lines, offsets) with every hunk applied where its pre-image is, or (None, hunk)."""
    out: list[bytes] = []
    pos, delta, offsets = 0, 0, []
    for h in hunks:
        old, new = (h.new, h.old) if reverse else (h.old, h.new)
        guess = max(h.old_start - 1, 0) + delta if old else h.old_start + delta
        p = _place(lines, old, guess, pos)
        if p is None:
            return None, h
        offsets.append(p - guess)
        out += lines[pos:p] + list(new)
        pos = p + len(old)
        delta += p - guess  # positions are the pre-image's: only the offset carries to the next hunk
    return out + lines[pos:], offsets


def _merge(base: list[bytes], ours: list[bytes], hunks: tuple[Hunk, ...], name: str, path: str) -> list[bytes]:
    """Ours with theirs' changes (the hunks applied to ``base``), or RewriteError at a conflict."""
    theirs, offsets = _patch(base, hunks)
    if theirs is None:
        raise RewriteError(path, f"{offsets.name()} does not apply to {name}, the release the change was made on")
    spans, delta = [], 0  # where each hunk sits in base, to name the one that conflicts
    for h, off in zip(hunks, offsets, strict=True):
        start = max(h.old_start - 1, 0) + delta + off if h.old else h.old_start + delta + off
        spans.append((start, start + len(h.old), h))
        delta += off
    base_to_ours = difflib.SequenceMatcher(None, base, ours, autojunk=False).get_opcodes()
    ours_changes = [(i1, i2) for tag, i1, i2, _, _ in base_to_ours if tag != "equal"]
    equal = [(i1, i2, j1) for tag, i1, i2, j1, _ in base_to_ours if tag == "equal"]
    edits = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, base, theirs, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for a1, a2 in ours_changes:
            if max(a1, i1) < min(a2, i2) or (a1 == a2 or i1 == i2) and a1 <= i2 and i1 <= a2:
                hunk = next((h for s, e, h in spans if s <= max(i1, a1) <= e), hunks[0])
                raise RewriteError(path, f"{hunk.name()} conflicts")
        at = next((j + (i1 - b1) for b1, b2, j in equal if b1 <= i1 <= b2), None)
        if at is None:
            raise RewriteError(path, f"{next((h for s, e, h in spans if s <= i1 <= e), hunks[0]).name()} conflicts")
        edits.append((at, at + (i2 - i1), theirs[j1:j2]))
    merged = list(ours)
    for start, end, lines in reversed(edits):
        merged[start:end] = lines
    return merged


def refresh(hunks: tuple[Hunk, ...], drop: tuple[str, ...]) -> tuple[Hunk, ...]:
    """The hunks without the added lines ``drop`` (compared without their line ending)."""
    if not drop:
        return hunks
    gone = {d.encode() for d in drop}
    out = []
    for h in hunks:
        context = set(h.old)
        new = tuple(line for line in h.new if line in context or line.rstrip(b"\r\n") not in gone)
        out.append(h._replace(new=new))
    return tuple(out)


def rewrite(data: bytes, path: str, hunks: tuple[Hunk, ...], base: bytes | None = None, base_name: str = "") -> Applied:
    """``data`` (the file at ``path``) with the hunks applied (see the module's docstring).
    ``base``: the file in the release the change was made on (``base_name``), for a merge."""
    lines = data.splitlines(keepends=True)
    new, offsets = _patch(lines, hunks)
    if new is not None:
        moved = sorted({o for o in offsets if o})
        how = EXACT if not moved else f"{OFFSET} of {', '.join(f'{o:+d}' for o in moved)} lines"
        result = Applied(b"".join(new), PATCHED, how, len(hunks))
    else:
        failed = offsets
        back, _ = _patch(lines, hunks, reverse=True)
        if back is not None:
            return Applied(data, ALREADY_UPSTREAM, "already there", len(hunks))
        if base is None:
            merged = f" (its shipped patch merges it against {base_name})" if base_name else ""
            raise RewriteError(path, f"{failed.name()} does not apply as text{merged}")
        merged = _merge(base.splitlines(keepends=True), lines, hunks, base_name, path)
        result = Applied(b"".join(merged), PATCHED, MERGED, len(hunks))
    if path.endswith(".py"):
        unbound = unbound_names(data, result.source)
        if unbound:
            raise RewriteError(path, f"the change reads {', '.join(unbound)}, which this release's file does not define")
    return result


def unbound_names(before: bytes, after: bytes) -> list[str]:
    """Names read on the lines ``after`` adds to ``before`` that nothing in ``after`` binds
    (any scope counts: lenient, it flags only names the file never defines) nor builtins."""
    import ast
    import builtins

    old, new = before.splitlines(), after.splitlines()
    added = {j + 1 for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
             if tag in ("replace", "insert") for j in range(j1, j2)}
    try:
        tree = ast.parse(after)
    except (SyntaxError, ValueError):
        return ["(the result does not parse)"]
    bound = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__path__"}
    read = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                read.append(node)
            else:
                bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)):
        return []  # a star import may bind anything
    return sorted({n.id for n in read if n.lineno in added and n.id not in bound})
