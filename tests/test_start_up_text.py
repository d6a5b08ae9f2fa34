"""What the commands read as text at start-up, where an expression used to be compiled: the same
answers as the expression, on every spelling near the edge."""

from __future__ import annotations

import itertools
import re

from patchkit.patch.write import split_lines


def _joined(pieces, most: int):
    for n in range(most + 1):
        for parts in itertools.product(pieces, repeat=n):
            yield type(pieces[0])().join(parts)


def test_lines_are_split_as_the_expression_splits_them() -> None:
    for data in _joined((b"a", b"\n", b"\r", b"b\n"), 6):
        assert split_lines(data) == re.findall(rb"[^\n]*\n|[^\n]+$", data), data



def test_what_bytes_mention() -> None:
    from patchkit.match import mentions

    source = b"x = 1\nMAX_SIZES = {10: 2}\n"
    assert mentions(source, ("nothing", "MAX_SIZES")) and mentions(bytearray(source), ["MAX_SIZES"])
    assert not mentions(source, ("nothing",)) and not mentions(source, ())
