"""Carry an upstream change (a ``git diff``, any file type) to one file of a release: pure.

A backport rule's diff is split by file (``parse``, with ``rewrite/diff.py``, the reader and
hunk applier of the shipped patches too); ``rewrite`` applies one file's hunks to that file's
bytes in the release, trying in turn, as quilt and ``git apply -3`` do:

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
from collections.abc import Callable
from functools import lru_cache

from patchkit.rewrite import diff as diffs
from patchkit.rewrite.backported import HowCarried
from patchkit.rewrite.diff import Hunk
from patchkit.rewrite.unfit import Misfit, no_fit
from patchkit.types import ALREADY_UPSTREAM, PATCHED, Status
from patchkit.values import Record


class Merged(Record):
    source: bytes
    status: Status  # PATCHED or ALREADY_UPSTREAM
    how: HowCarried  # EXACTLY, OFFSET, MERGED or THERE
    hunks: int
    offsets: tuple[int, ...] = ()  # OFFSET: the distinct offsets, ascending


@lru_cache(maxsize=16)  # a fix's diff is parsed once, not once per file and release
def parse(diff: bytes, name: str) -> dict[str, tuple[Hunk, ...]]:
    """repository path -> its hunks, in order (``rewrite/diff.py``, as a shipped patch is read).
    ``name``: the diff's file, for errors."""
    try:
        files = diffs.parse(diff)
    except diffs.DiffError as exc:
        raise no_fit(name, Misfit.CORRUPT_DIFF, detail=str(exc)) from None
    # A path as the diff's bytes spell it in UTF-8 (the reader keeps every byte as a character).
    return {f.path.encode("latin-1").decode("utf-8", "replace"): f.hunks for f in files}


def _patch(lines: list[bytes], hunks: tuple[Hunk, ...], reverse: bool = False
) -> tuple[list[bytes], list[int]] | tuple[None, Hunk]:
    """(new lines, offsets) with every hunk applied at the nearest place that holds its pre-image, or (None, hunk)."""
    return diffs.apply_hunks(lines, hunks, reverse=reverse, search=True)


def _merge(base: list[bytes], ours: list[bytes], hunks: tuple[Hunk, ...], name: str, path: str) -> list[bytes]:
    """Ours with theirs' changes (the hunks applied to ``base``), or RewriteError at a conflict."""
    patched = _patch(base, hunks)
    if patched[0] is None:
        failed = patched[1]
        raise no_fit(path, Misfit.NOT_ON_BASE, number=failed.number, header=failed.header, base=name)
    theirs, offsets = patched
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
                raise no_fit(path, Misfit.HUNK_CONFLICTS, number=hunk.number, header=hunk.header)
        at = next((j + (i1 - b1) for b1, b2, j in equal if b1 <= i1 <= b2), None)
        if at is None:
            hunk = next((h for s, e, h in spans if s <= i1 <= e), hunks[0])
            raise no_fit(path, Misfit.HUNK_CONFLICTS, number=hunk.number, header=hunk.header)
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


def rewrite(data: bytes, path: str, hunks: tuple[Hunk, ...], base: bytes | Callable[[], bytes | None] | None = None,
            base_name: str = "") -> Merged:
    """``data`` (the file at ``path``) with the hunks applied (see the module's docstring).
    ``base``: the file in the release the change was made on (``base_name``), for a merge, or a
    function that reads it, called only when a merge is needed (that release may not be at hand)."""
    lines = data.splitlines(keepends=True)
    patched = _patch(lines, hunks)
    if patched[0] is not None:
        new, offsets = patched
        moved = tuple(sorted({o for o in offsets if o}))
        result = Merged(b"".join(new), PATCHED, HowCarried.OFFSET if moved else HowCarried.EXACTLY, len(hunks), moved)
    else:
        failed = patched[1]
        back, _ = _patch(lines, hunks, reverse=True)
        if back is not None:
            return Merged(data, ALREADY_UPSTREAM, HowCarried.THERE, len(hunks))
        if callable(base):
            base = base()
        if base is None:
            raise no_fit(path, Misfit.NOT_AS_TEXT, number=failed.number, header=failed.header, base=base_name)
        merged = _merge(base.splitlines(keepends=True), lines, hunks, base_name, path)
        result = Merged(b"".join(merged), PATCHED, HowCarried.MERGED, len(hunks))
    if path.endswith(".py"):
        unbound = unbound_names(data, result.source)
        if unbound:
            raise no_fit(path, Misfit.READS_UNDEFINED, names=list(unbound))
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
