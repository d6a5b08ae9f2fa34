"""The ast statement cutter: the statements around the pre-filter's marks, cut out of a file.

The stdlib ``ast`` (C, ~10x faster than LibCST) parses a file with marks, only to find
the statement around each mark: for a compound statement, its header (``if major ==
10:``).  Each piece is cut out as source text, with its line and its scope, for LibCST
to parse and analyse alone.
"""

from __future__ import annotations

import ast
import bisect
import io
import re
import tokenize
import warnings
from collections.abc import Iterator
from typing import Protocol, TypeGuard

from patchkit.rewrite.scope import BLOCK, CLASS, DEF, MODULE, Scope
from patchkit.values import Record

_TRY = (ast.Try,) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)
_NEWLINE = re.compile(rb"\r\n|\r|\n")


class Piece(Record):
    text: bytes  # one statement, or a compound statement's header with a ``pass`` body
    line0: int  # the piece's line 1 is line0 + 1 of the file
    scope: Scope  # where the statement stands in the file


class _Block(Protocol):
    """A statement with a body (``if``, ``def``, ``with``, ...) or an ``except`` clause."""

    @property
    def lineno(self) -> int: ...

    @property
    def col_offset(self) -> int: ...

    @property
    def body(self) -> list[ast.stmt]: ...


def _block(s: ast.stmt) -> TypeGuard[_Block]:
    return isinstance(getattr(s, "body", None), list)


def _first_line(s: ast.stmt | _Block) -> int:
    decorators: list[ast.expr] = getattr(s, "decorator_list", [])
    return min([s.lineno, *(d.lineno for d in decorators)])


def _containing(body: list[ast.stmt], line: int) -> Iterator[ast.stmt]:
    """The statements of ``body`` spanning ``line`` (several when joined by ``;``)."""
    for s in body:
        if _first_line(s) > line:
            return
        if line <= s.end_lineno:  # type: ignore[operator]  # None only in a node made by hand, not by ast.parse
            yield s


def pieces(src: bytes, tree: ast.Module, marks: list[int]) -> Iterator[Piece]:
    """The statement, or compound-statement header, around each offset in ``marks``, once each.

    A header becomes a statement of its own by a ``pass`` body (``except`` after a ``try:
    pass``); an ``if`` and its ``elif`` clauses come as one piece, all their headers.
    """
    starts = [0] + [m.end() for m in _NEWLINE.finditer(src)]
    lines = sorted({bisect.bisect_right(starts, m) for m in marks})

    def off(line: int, col: int) -> int:
        return starts[line - 1] + col

    def header(s: _Block, scope: Scope, prefix: bytes = b"") -> tuple[tuple[int, int], Piece]:
        first = s.body[0]
        start, end = off(_first_line(s), s.col_offset), off(_first_line(first), first.col_offset)
        text = src[start:end]
        if text.startswith(b"elif"):
            text = text[2:]
        if s.col_offset:  # decorator and def lines all stand at the block's indentation
            text = re.sub(rb"(\r\n|\r|\n)[ \t]{0,%d}" % s.col_offset, rb"\1", text)
        line0 = _first_line(s) - 1 - prefix.count(b"\n")
        return (start, end), Piece(prefix + text + b"pass\n", line0, scope)

    def headers(chain: list[ast.If], scope: Scope) -> tuple[tuple[int, int], Piece]:
        """An if/elif chain's headers with ``pass`` bodies, each on its own line."""
        text, line0 = b"", _first_line(chain[0]) - 1
        spans = []
        for c in chain:
            span, piece = header(c, scope)
            if c is not chain[0]:  # blank lines up to the elif keep its line number
                text += b"\n" * (piece.line0 - line0 - len(_NEWLINE.findall(text))) + b"el"
            text += piece.text
            spans.append(span)
        return (spans[0][0], spans[-1][1]), Piece(text, line0, scope)

    def descend(body: list[ast.stmt], line: int, scope: Scope) -> Iterator[tuple[tuple[int, int], Piece]]:
        for s in _containing(body, line):
            if isinstance(s, _TRY):
                inner = list(s.body)
                for h in s.handlers:
                    if h.lineno <= line <= _first_line(h.body[0]):
                        yield header(h, scope.enter(BLOCK), b"try:\n    pass\n")
                    inner += h.body
                yield from descend(inner + s.orelse + s.finalbody, line, scope.enter(BLOCK))
            elif isinstance(s, ast.If):
                chain = [s]  # the if and its elifs: one statement (classify judges them together)
                while (
                    len(chain[-1].orelse) == 1
                    and isinstance(chain[-1].orelse[0], ast.If)
                    and src.startswith(b"elif", off(chain[-1].orelse[0].lineno, chain[-1].orelse[0].col_offset))
                ):
                    chain.append(chain[-1].orelse[0])
                if any(_first_line(c) <= line <= _first_line(c.body[0]) for c in chain):
                    yield headers(chain, scope)
                inner_scope = scope.enter(BLOCK)
                for c in chain:
                    yield from descend(c.body, line, inner_scope)
                yield from descend(chain[-1].orelse, line, inner_scope)
            elif isinstance(s, ast.Match):  # (patterns and guards are not looked at)
                yield from descend([x for c in s.cases for x in c.body], line, scope.enter(BLOCK))
            elif _block(s) and s.body:
                first = _first_line(s.body[0])
                if line <= first:  # the header (or a body on its line)
                    yield header(s, scope)
                if line >= first:
                    if isinstance(s, ast.ClassDef):
                        inner_scope = scope.enter(CLASS, s.name)
                    else:
                        inner_scope = scope.enter(DEF if isinstance(s, _DEF) else BLOCK)
                    yield from descend(s.body + getattr(s, "orelse", []), line, inner_scope)
            else:
                start, end = off(s.lineno, s.col_offset), off(s.end_lineno, s.end_col_offset)  # type: ignore[arg-type]  # set by ast.parse
                yield (start, end), Piece(src[start:end] + b"\n", s.lineno - 1, scope)

    seen: set[tuple[int, int]] = set()
    for line in lines:
        for key, piece in descend(tree.body, line, MODULE):
            if key not in seen:
                seen.add(key)
                yield piece


def utf8(source: bytes) -> tuple[bytes, bool]:
    """(the source as UTF-8 without a BOM, what ast's offsets count in; re-encoded?)"""
    if source.startswith(b"\xef\xbb\xbf"):
        return source[3:], False
    try:
        source.decode("utf-8")
        return source, False
    except UnicodeDecodeError:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding).encode("utf-8"), True


def parse(src: bytes, reencoded: bool) -> ast.Module | None:
    """``ast``'s tree of ``utf8``'s output, or None: newer syntax than this Python's ast
    (LibCST may still parse it)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning: invalid escape sequences
            # (re-encoded: parse the text, or ast would decode it by the old coding cookie)
            return ast.parse(src.decode("utf-8") if reencoded else src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
