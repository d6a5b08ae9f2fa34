"""Rewrite only the statements a rewrite needs: cut them out, rewrite, splice back.

Pure.  LibCST parses a 1000-line module in ~0.13 s and prints it in ~0.1 s; the
stdlib ``ast`` finds the statements in a tenth of that.  A rewrite that touches a few
defs and the module's simple statements (imports, assignments) runs on the module made
of just those, and its line changes are put back in place in the whole file: every other
byte stays as it was.
"""

from __future__ import annotations

import ast
import difflib
import re
import warnings
from collections.abc import Callable

_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.M)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _first_line(s: ast.stmt) -> int:
    return min([s.lineno, *(d.lineno for d in s.decorator_list)]) if isinstance(s, _DEFS) else s.lineno


def _wanted(s: ast.stmt, keep: Callable[[str], bool], assigns: frozenset[str]) -> bool:
    """Is a def or class that ``keep`` wants, or an assignment to one of ``assigns``, in (or
    the) statement ``s``?  Only statement bodies are walked: a def inside an expression is
    no gate."""
    stack = [s]
    while stack:
        node = stack.pop()
        if isinstance(node, _DEFS) and keep(node.name):
            return True
        if assigns and isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in assigns for t in targets):
                return True
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack += getattr(node, field, None) or ()
    return False


def _keep_lines(body: list[ast.stmt], keep: Callable[[str], bool], assigns: frozenset[str], origin: list[int]) -> bool:
    """Add to ``origin`` the lines of the statements of ``body`` worth keeping: every one but
    the defs and classes nothing is wanted in; of a class something is wanted in, its header
    and (the same way) its body.  False when two statements share a line."""
    for i, s in enumerate(body):
        start = _first_line(s) - 1
        end: int = s.end_lineno  # type: ignore[assignment]  # set by ast.parse; None only in a node made by hand
        if i + 1 < len(body) and _first_line(body[i + 1]) - 1 < end:  # "a; b" on one line
            return False
        if not isinstance(s, _DEFS):
            origin += range(start, end)
        elif not _wanted(s, keep, assigns):
            continue
        elif isinstance(s, ast.ClassDef) and not keep(s.name):
            first = _first_line(s.body[0]) - 1
            origin += range(start, first)
            if first == start or not _keep_lines(s.body, keep, assigns, origin):  # "class A: x = 1"
                return False
        else:
            origin += range(start, end)
    return True


def cut(source: bytes, keep: Callable[[str], bool], assigns: frozenset[str] = frozenset()) -> tuple[bytes, list[int]] | None:
    """(the module of ``source``'s simple and compound top-level statements, without the
    defs and classes that hold no def or class whose name ``keep`` wants and no assignment
    to a name of ``assigns``, the same way inside the classes kept; the source line of each
    of its lines), or None when the whole file must be rewritten (it does not parse, it
    is not UTF-8 or has a coding cookie, or there is nothing to leave out)."""
    if _COOKIE.search(b"\n".join(source.splitlines()[:2])):
        return None
    try:  # a byte that is no UTF-8 in a line left out must still be refused by the whole-file parse
        source.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = source.splitlines(keepends=True)
    origin: list[int] = []
    if not _keep_lines(tree.body, keep, assigns, origin):
        return None
    kept = [lines[n] for n in origin]
    dropped = len(origin) < len(lines)
    if not dropped or not kept:
        return None
    if not kept[-1].endswith((b"\n", b"\r")):
        kept[-1] += b"\n"
    return b"".join(kept), origin


def splice(source: bytes, piece: bytes, new_piece: bytes, origin: list[int]) -> bytes:
    """``source`` with the line changes from ``piece`` to ``new_piece`` made in place;
    ``origin``: the source line of each line of ``piece``.  A line added after a piece line
    goes right after that line in the source."""
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith((b"\n", b"\r")):
        lines[-1] += b"\n"
        tail = True
    else:
        tail = False
    old, new = piece.splitlines(keepends=True), new_piece.splitlines(keepends=True)
    out: dict[int, list[bytes]] = {}  # source line -> what stands there now
    before: dict[int, list[bytes]] = {}  # source line -> lines added before it (at the piece's start)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        # Line k of the run becomes new line k (the source lines between them stay where
        # they are); new lines beyond the old ones follow the last one.
        pairs = min(i2 - i1, j2 - j1)
        for k in range(i1, i2):
            out[origin[k]] = [new[j1 + k - i1]] if k - i1 < pairs else []
        added = new[j1 + pairs : j2]
        if not added:
            continue
        if pairs:
            out[origin[i1 + pairs - 1]] += added
        elif i1:
            out.setdefault(origin[i1 - 1], [lines[origin[i1 - 1]]]).extend(added)
        else:
            before.setdefault(origin[0], []).extend(added)
    result = []
    for n, line in enumerate(lines):
        result += before.get(n, [])
        result += out.get(n, [line])
    data = b"".join(result)
    return data[:-1] if tail and data.endswith(b"\n") and not source.endswith(b"\n") else data


def rewrite_cut(
    source: bytes, keep: Callable[[str], bool], rewrite: Callable[[bytes], bytes], assigns: frozenset[str] = frozenset()
) -> bytes:
    """``rewrite`` (bytes in, bytes out) run on the statements ``cut`` keeps, spliced back;
    on the whole source when nothing can be left out."""
    found = cut(source, keep, assigns)
    if found is None:
        return rewrite(source)
    piece, origin = found
    new_piece = rewrite(piece)
    return source if new_piece == piece else splice(source, piece, new_piece, origin)
