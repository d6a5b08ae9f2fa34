"""The capability value model: one cc parser for the command line and scan, and how
capabilities and capability literals compare."""

from __future__ import annotations

import pytest

from patchkit.rewrite.capability import Cap, cap, literal, pair, parse_cc, same, sides, table_keys


@pytest.mark.parametrize(
    "text, cc",
    [("10", 10), (" 12 ", 12), ("10.0", "10.0"), ("12.1", "12.1"), (" 12.0\n", "12.0"), ("10.", "10.")],
)
def test_parse_cc(text: str, cc) -> None:
    assert parse_cc(text) == cc and type(parse_cc(text)) is type(cc)


@pytest.mark.parametrize("text", ["sm120", "", ".5", "1.2.3", "12a", "-1", "\u0661\u0662"])
def test_parse_cc_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not a compute capability such as 12 or 12.0"):
        parse_cc(text)


def test_cap() -> None:
    assert cap(12) == Cap(12, 0, False)
    assert cap("12") == Cap(12, 0, False)
    assert cap("12.1") == Cap(12, 1, True)
    for bad in (True, 12.0, None, "sm120"):
        with pytest.raises(ValueError):
            cap(bad)


def test_same_capability() -> None:
    assert same(10, "10.0") and same("10", 10) and same("12.0", "12.0")
    assert not same(12, "12.1") and not same(10, 12)
    assert pair(10, "12.0") == (Cap(10, 0, True), Cap(12, 0, True))  # "X.Y" literals compare alike for both


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
