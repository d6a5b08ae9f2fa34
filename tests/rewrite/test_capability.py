"""The capability literal model: how a cc (``patchkit.cc.CC``), or one as a project keys it,
compares with the capability literals of source code."""

from __future__ import annotations

import pytest

from patchkit.cc import CC
from patchkit.rewrite.capability import cap, given, literal, pair, same, sides, table_keys


def test_cap() -> None:
    """A cc given (CC) or written as a project keys it (12, "12.1"): a major alone compares "X.Y" by major."""
    for c in (cap(CC.parse("12")), cap(12), cap("12")):
        assert c == CC(12, 0) and c.dotted is False
    for c in (cap(CC.parse("12.1")), cap("12.1"), cap(CC.parse("sm_121a"))):
        assert c == CC(12, 1) and c.dotted is True
    for bad in (True, 12.0, None, "sm120", "12.", "12a", ""):
        with pytest.raises(ValueError):
            cap(bad)


@pytest.mark.parametrize("text, key", [("12", 12), (" 10 ", 10), ("12.0", "12.0"), ("12.1", "12.1"), ("sm_120a", "12.0"), ("sm121", "12.1")])
def test_given_is_how_scan_compares_it(text: str, key) -> None:
    """scan compares --cc 12 by major, --cc 12.0 (or sm_120a) by (major, minor): its literal, as before."""
    assert given(CC.parse(text)) == key and type(given(CC.parse(text))) is type(key)


def test_same_capability() -> None:
    assert same(10, "10.0") and same("10", 10) and same("12.0", "12.0") and same(CC.parse("sm_100a"), 10)
    assert not same(12, "12.1") and not same(10, 12)
    a, b = pair(10, "12.0")  # "X.Y" literals compare alike for both
    assert (a, b) == (CC(10, 0), CC(12, 0)) and a.dotted is True and b.dotted is True


def test_literals_compare_with_a_capability() -> None:
    c = cap(12)
    assert [sides(literal(v), c) for v in (12, 120, (12, 0), 12.0, "12.1")] == [
        (12, 12), (120, 120), ((12, 0), (12, 0)), (12.0, 12.0), (12, 12),  # "12.1" by its major
    ]
    assert sides(literal("12.1"), cap("12.0")) == ((12, 0), (12, 1))
    assert [literal(v) for v in (6, 14, 69, 140, (14, 0), (12, 10), "12", 6.9, True, b"12.0")] == [None] * 10


def test_table_keys() -> None:
    assert [lit.written for lit in table_keys([9, 10])] == [9, 10]
    assert [lit.written for lit in table_keys(["9.0", "10.0"])] == ["9.0", "10.0"]
    assert table_keys([10]) is None  # one key
    assert table_keys([7, 8]) is None  # neither 9 nor 10
    assert table_keys([9, 10, "x"]) is None and table_keys([90, 100]) is None and table_keys([9, None]) is None
