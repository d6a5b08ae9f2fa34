"""The capability literal model: how a cc (``patchkit.cc.CC``) compares with the capability
literals of source code (12, 120, (12, 0), 12.0, "12.0").

``cap`` reads a cc as a project's source writes it (12, "12.0") as a ``CC``, ``pair`` makes
two comparable with each other.  How the cc was written matters here (``CC.dotted``): a major
alone (``--cc 12``) compares an "X.Y" literal by its major, "12.0" by (12, 0).  A capability
literal in source code (``literal``) is compared with a ``CC`` by ``sides``; a dict's keys make
a capability table by ``table_keys``.

Plain Python: no LibCST, so the command line can use it without paying for it.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from patchkit.cc import CC, Key
from patchkit.values import Record

_DOTTED = re.compile(r"([0-9]+)\.([0-9]+)")


def cap(value: CC | Key) -> CC:
    """``CC.parse("12")`` or ``12`` -> CC(12, 0, dotted=False); ``CC.parse("12.0")`` or ``"12.0"`` ->
    CC(12, 0, dotted=True).  ValueError for what is no cc (``CC.of``)."""
    return value if isinstance(value, CC) else CC.of(value)


def given(c: CC) -> Key:
    """A cc as a project's source would write it, the way it was given: 12 for ``12`` (so a
    table keyed by major matches it), "12.0" for ``12.0`` and ``sm_120a``: what scan looks for."""
    return c.major if c.dotted is False else f"{c.major}.{c.minor}"


def pair(from_cc: CC | Key, cc: CC | Key) -> tuple[CC, CC]:
    """Both capabilities, comparable with each other: with 10 and "12.0", "X.Y"
    literals compare the same way for both (as (X, Y))."""
    a, b = cap(from_cc), cap(cc)
    if a.dotted != b.dotted:
        a, b = a._replace(dotted=True), b._replace(dotted=True)
    return a, b


def same(a: CC | Key, b: CC | Key) -> bool:
    """One capability written twice?  10 and "10.0" are the same; 12 and "12.1" are not."""
    x, y = pair(a, b)
    return x == y


# --- capability literals in source code ---------------------------------------------

class LiteralForm(Enum):
    """How source code writes a capability (not how a project keys its tables: ``cc.KeyStyle``)."""

    MAJOR = "major"  # int 7..13
    SM = "sm"  # int 70..139: major * 10 + minor, as in get_device_sm() == 100
    TUPLE = "tuple"  # (7..13, 0..9)
    DOTTED = "str"  # "X.Y" with X 7..13, compared as (X, Y), or by X when the cc is an int
    FLOAT = "float"  # 7.0 <= X.Y < 14


class Literal(Record):
    kind: LiteralForm
    value: Any  # comparable with a CC's side (see ``sides``)
    written: Any  # the value as written in the source


def _dotted(text: str) -> tuple[int, int] | None:
    m = _DOTTED.fullmatch(text)
    if m and 7 <= int(m.group(1)) <= 13:
        return int(m.group(1)), int(m.group(2))
    return None


def literal(value: object) -> Literal | None:
    """The capability literal a constant stands for, or None when it is no capability."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if 7 <= value <= 13:
            return Literal(LiteralForm.MAJOR, value, value)
        return Literal(LiteralForm.SM, value, value) if 70 <= value <= 139 else None
    if isinstance(value, tuple):
        if len(value) == 2 and all(type(v) is int for v in value) and 7 <= value[0] <= 13 and 0 <= value[1] <= 9:
            return Literal(LiteralForm.TUPLE, value, value)
        return None
    if isinstance(value, str):
        parsed = _dotted(value)
        return Literal(LiteralForm.DOTTED, parsed, value) if parsed else None
    if isinstance(value, float):
        return Literal(LiteralForm.FLOAT, value, value) if 7 <= value < 14 else None
    return None


def sides(lit: Literal, c: CC) -> tuple[Any, Any]:
    """(the capability's value, the literal's value), comparable with each other."""
    if lit.kind == LiteralForm.MAJOR:
        return c.major, lit.value
    if lit.kind == LiteralForm.SM:
        return c.major * 10 + c.minor, lit.value
    if lit.kind == LiteralForm.TUPLE:
        return (c.major, c.minor), lit.value
    if lit.kind == LiteralForm.FLOAT:
        return float(f"{c.major}.{c.minor}"), lit.value
    # "X.Y": by (major, minor) when the capability was given as "X.Y", else by major
    return ((c.major, c.minor), lit.value) if c.dotted else (c.major, lit.value[0])


def table_keys(keys: list[object]) -> list[Literal] | None:
    """A dict's keys as capability literals, or None when it is not a capability table:
    two keys or more, every one an int 7..13 or an "X.Y" string, among them 9 or 10."""
    if len(keys) < 2:
        return None
    out = []
    for key in keys:
        lit = literal(key)
        if lit is None or lit.kind not in (LiteralForm.MAJOR, LiteralForm.DOTTED):
            return None
        out.append(lit)
    if not any(lit.value in (9, 10, (9, 0), (10, 0)) for lit in out):
        return None
    return out


def has_key(keys: list[Literal], c: CC) -> bool:
    """Does a capability table with these keys have an entry for ``c``?"""
    for lit in keys:
        if lit.kind == LiteralForm.MAJOR and lit.value == c.major:
            return True
        if lit.kind == LiteralForm.DOTTED and (lit.value == (c.major, c.minor) if c.dotted else lit.value[0] == c.major):
            return True
    return False
