"""One element after another in a comma-separated sequence, whitespace arranged so that the
existing lines stay byte-identical: the one way ``dict_key``, ``list_member`` and ``predicate``
insert (dict entries, list, set and tuple members, imported names).  Pure: LibCST nodes in and out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard, TypeVar

import libcst as cst

# What a sequence holds: a dict's entries, a list's, set's or tuple's members, an import's names.
_E = TypeVar("_E", cst.BaseDictElement, cst.BaseElement, cst.ImportAlias)
_Ws = cst.BaseParenthesizableWhitespace


def multiline(ws: object) -> TypeGuard[cst.ParenthesizedWhitespace]:
    """Does this whitespace hold a line break?"""
    return isinstance(ws, cst.ParenthesizedWhitespace)


def insert_after(
    elements: Sequence[_E], index: int, added: _E, open_ws: _Ws | None, close_ws: _Ws | None, entries: bool = False
) -> tuple[list[_E], _Ws | None]:
    """(elements with ``added`` right after ``elements[index]``, the new ``close_ws``).

    ``open_ws`` and ``close_ws`` are the whitespace after the opening and before the closing
    bracket (None without brackets).  ``added`` goes on a line of its own when the source
    element has one (with its indentation, and a trailing comma if the source had one), in
    place otherwise.  ``entries`` (a dict's): a line of its own wherever a line break follows
    the source entry, and a last entry's comma always kept (a tuple's ``(10,)`` becomes
    ``(10, 12)``: its comma only made it a tuple).
    """
    out = list(elements)
    source = out[index]
    last = index == len(out) - 1
    # Every element but the last has its comma (LibCST's parser gives it one).
    previous = out[index - 1].comma if index else None
    before = previous.whitespace_after if isinstance(previous, cst.Comma) else open_ws
    comma = source.comma if isinstance(source.comma, cst.Comma) else None
    # The whitespace between the source element and what follows it.
    gap_in_close = last and (comma is None or not multiline(comma.whitespace_after))
    gap = close_ws if gap_in_close or comma is None else comma.whitespace_after

    source_gap: _Ws | None
    rest_gap: _Ws | None
    if multiline(gap) and (entries or index == 0 or multiline(before)):
        own_line = True
        if multiline(before):
            indent, line = before.indent, before.last_line
        elif not last:
            indent, line = gap.indent, gap.last_line
        else:
            indent, line = gap.indent, cst.SimpleWhitespace(gap.last_line.value + "    ")
        # The source keeps its trailing comment; the new line starts clean and keeps
        # what stood before the next element (blank lines, comment lines).
        source_gap = cst.ParenthesizedWhitespace(first_line=gap.first_line, empty_lines=[], indent=indent, last_line=line)
        rest_gap = gap.with_changes(first_line=cst.TrailingWhitespace())
    else:
        own_line = False
        if not last:
            source_gap = gap
        elif isinstance(before, cst.SimpleWhitespace) and index > 0 and before.value:
            source_gap = before
        else:
            source_gap = cst.SimpleWhitespace(" ")
        rest_gap = gap

    new_comma: cst.Comma | cst.MaybeSentinel
    if gap_in_close or comma is None:
        keep = comma is not None and (entries or own_line or len(out) > 1)
        new_comma = comma if keep and comma is not None else cst.MaybeSentinel.DEFAULT
        close_ws = rest_gap
    else:
        # In leading-comma style the source's trailing comment sits before the comma:
        # the copy's comma starts clean.
        clean = comma.whitespace_before
        if multiline(clean):
            clean = clean.with_changes(first_line=cst.TrailingWhitespace())
        new_comma = comma.with_changes(whitespace_before=clean, whitespace_after=rest_gap)
    source_comma = (comma or cst.Comma()).with_changes(whitespace_after=source_gap)
    out[index : index + 1] = [source.with_changes(comma=source_comma), added.with_changes(comma=new_comma)]
    return out, close_ws
