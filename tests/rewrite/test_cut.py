"""rewrite/cut.py: rewrite only the statements needed, and splice the line changes back."""

from __future__ import annotations

import pytest

from patchkit.rewrite.cut import cut, rewrite_cut, splice

SOURCE = (
    b'"""Doc."""\n'
    b"import os\n"
    b"\n"
    b"FLAG = os.environ.get('X')\n"
    b"\n"
    b"\n"
    b"def big():\n"
    b"    return 1\n"
    b"\n"
    b"\n"
    b"@decorated\n"
    b"def gate():\n"
    b"    return FLAG or 2\n"
    b"\n"
    b"\n"
    b"class Other:\n"
    b"    def method(self):\n"
    b"        return 3\n"
)


def keep_gate(name: str) -> bool:
    return name == "gate"


def test_cut_keeps_simple_statements_and_the_wanted_defs() -> None:
    piece, origin = cut(SOURCE, keep_gate)
    assert piece == b'"""Doc."""\nimport os\nFLAG = os.environ.get(\'X\')\n@decorated\ndef gate():\n    return FLAG or 2\n'
    assert origin == [0, 1, 3, 10, 11, 12]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(b"# -*- coding: latin-1 -*-\ndef big():\n    pass\n", id="a coding cookie"),
        pytest.param(b"def big(:\n", id="does not parse"),
        pytest.param(b"import os\nX = 1\n", id="nothing to leave out"),
        pytest.param(b"def big(): pass; x = 1\n", id="two statements on a line"),
    ],
)
def test_whole_file_when_nothing_can_be_cut(source: bytes) -> None:
    assert cut(source, keep_gate) is None


def rewrite(data: bytes) -> bytes:
    return data.replace(b"FLAG or 2", b"FLAG or NEW or 2").replace(b"FLAG = os.environ.get('X')\n", b"FLAG = os.environ.get('X')\nNEW = 1\n")


def test_the_rewrite_of_the_piece_is_the_rewrite_of_the_whole() -> None:
    assert rewrite_cut(SOURCE, keep_gate, rewrite) == rewrite(SOURCE)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(SOURCE.replace(b"\n", b"\r\n"), id="CRLF"),
        pytest.param(SOURCE + b"def last():\n    return FLAG or 2", id="no final newline, the last def kept"),
        pytest.param(SOURCE + b"def tail():\n    pass", id="no final newline, the last def dropped"),
    ],
)
def test_line_endings_are_kept(source: bytes) -> None:
    keep = lambda name: name in ("gate", "last")  # noqa: E731
    assert rewrite_cut(source, keep, rewrite) == rewrite(source)


def test_lines_added_before_the_first_piece_line() -> None:
    piece, origin = cut(SOURCE, keep_gate)
    assert splice(SOURCE, piece, b"# new\n" + piece, origin) == b"# new\n" + SOURCE


def test_unchanged_piece_gives_the_source() -> None:
    assert rewrite_cut(SOURCE, keep_gate, lambda data: data) is SOURCE


def test_lines_between_kept_lines_stay_in_place() -> None:
    """Two kept lines changed at once, a dropped blank line between them (a case found by
    the rewriter's property tests): each new line takes the place of its old one."""
    from patchkit.rewrite.dict_key import rewrite as add_key

    source = b"class C0:\n    class Inner:\n        SIZES = {7: 0}\n\n        WORLD = {7: 0}"
    assert add_key(source, ["SIZES", "WORLD"], 7, 12).source == (
        b"class C0:\n    class Inner:\n        SIZES = {7: 0, 12: 0}\n\n        WORLD = {7: 0, 12: 0}"
    )


def test_a_file_that_is_not_utf8_is_rewritten_whole() -> None:
    """ast reads a comment that is not UTF-8; the whole-file parse refuses it, as it must."""
    assert cut(b"# caf\xe9\nclass A:\n    pass\nT = {10: 1}\n", keep_gate) is None
