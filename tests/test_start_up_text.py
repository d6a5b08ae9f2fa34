"""What the commands read as text at start-up, where an expression used to be compiled: the same
answers as the expression, on every spelling near the edge."""

from __future__ import annotations

import itertools
import re

from patchkit.fixes.load import _diff_files
from patchkit.patch.write import split_lines
from patchkit.versions import _numbers

_PLAIN = re.compile(r"(\d+(?:\.\d+)*)(?:\.post(\d+))?")
_DIFF_FILE = re.compile(rb"^diff --git a/(\S+) b/(\S+)$", re.M)


def _by_expression(version: str):
    match = _PLAIN.fullmatch(version)
    if match is None:
        return None
    numbers = [int(n) for n in match.group(1).split(".")]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers), -1 if match.group(2) is None else int(match.group(2))


def _joined(pieces, most: int):
    for n in range(most + 1):
        for parts in itertools.product(pieces, repeat=n):
            yield type(pieces[0])().join(parts)


def test_a_plain_release_is_read_as_the_expression_reads_it() -> None:
    spellings = list(_joined(("0", "12", ".", ".post", "post", "rc1", "x", ""), 4))
    assert [v for v in spellings if _numbers(v) != _by_expression(v)] == []
    assert _numbers("0.5.4.post2") == ((0, 5, 4), 2) and _numbers("0.5.0") == ((0, 5), -1)
    assert _numbers("0.5.9rc1") is None and _numbers("1.post") is None and _numbers("") is None


def test_a_backports_files_are_the_expressions() -> None:
    pieces = (b"diff --git a/", b"x.py", b" b/", b"y", b"\n", b" ", b"\t", b"\r", b"b/")
    texts = list(_joined(pieces, 5))
    assert [t for t in texts if _diff_files(t) != _DIFF_FILE.findall(t)] == []
    assert _diff_files(b"diff --git a/p/x.py b/p/x.py\nindex 1..2\n") == [(b"p/x.py", b"p/x.py")]


def test_lines_are_split_as_the_expression_splits_them() -> None:
    for data in _joined((b"a", b"\n", b"\r", b"b\n"), 6):
        assert split_lines(data) == re.findall(rb"[^\n]*\n|[^\n]+$", data), data



def test_what_bytes_mention() -> None:
    from patchkit.text import mentions

    source = b"x = 1\nMAX_SIZES = {10: 2}\n"
    assert mentions(source, ("nothing", "MAX_SIZES")) and mentions(bytearray(source), ["MAX_SIZES"])
    assert not mentions(source, ("nothing",)) and not mentions(source, ())
