"""``match.mentions``: whether a file's bytes hold any of some names, each answer remembered per
name for those bytes (apply asks of the same files before its lock, under it, and in its plan)."""

from __future__ import annotations

import random

import pytest

from patchkit import match
from patchkit.match import mentions


class Counted(bytes):
    """Bytes that count how often a name is looked for in them."""

    searched: list[bytes]

    def __contains__(self, name: object) -> bool:
        self.searched.append(name)
        return super().__contains__(name)


def counted(data: bytes) -> Counted:
    made = Counted(data)
    made.searched = []
    return made


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(match, "_SEEN", {})
    monkeypatch.setattr(match, "_seen_bytes", 0)


def test_the_answer_is_any_name_in_the_bytes() -> None:
    rng = random.Random(5)
    words = ["sm_version", "SYMM_MEM", "TORCH_SYMM_MEM", "_is_sm100_supported", "x", "é"]
    for _ in range(3000):
        data = " ".join(rng.choice(words + ["a", "b", "\n"]) for _ in range(rng.randint(0, 6))).encode()
        names = rng.sample(words, rng.randint(0, 4))
        assert mentions(data, names) == any(n.encode() in data for n in names), (data, names)


def test_equal_bytes_read_again_are_not_searched_again() -> None:
    source = b"x = 1\n" * 50_000 + b"TABLE = {10: 1}\n"
    first = counted(source)
    assert mentions(first, ("sm_version", "TABLE")) is True
    assert first.searched == [b"sm_version", b"TABLE"]
    again = counted(source)  # the same file read under the lock: other bytes, equal
    assert mentions(again, ("TABLE", "sm_version")) is True
    assert mentions(again, ["sm_version"]) is False
    assert again.searched == []


def test_a_name_holding_a_lacking_name_is_not_searched() -> None:
    data = counted(b"nothing here\n" * 1000)
    assert mentions(data, ("SYMM_MEM_ALL_REDUCE_MAX_SIZES", "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES")) is False
    assert data.searched == [b"SYMM_MEM_ALL_REDUCE_MAX_SIZES"]


def test_bytes_that_differ_only_inside_are_told_apart() -> None:
    """Same size, same first and last 64 bytes: the key of the remembered answers is alike, the bytes are not."""
    head, tail = b"#" * 100, b"=" * 100
    assert mentions(head + b"TABLE" + tail, ["TABLE"]) is True
    assert mentions(head + b"OTHER" + tail, ["TABLE"]) is False
    assert mentions(head + b"TABLE" + tail, ["TABLE"]) is True


def test_what_is_remembered_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(match, "_SEEN_MAX", 10_000)
    for i in range(50):
        assert mentions(b"%d" % i + b"." * 3000, ["TABLE"]) is False
        assert match._seen_bytes <= 10_000
    assert sum(len(data) for entries in match._SEEN.values() for data, _ in entries) == match._seen_bytes
    mutable = bytearray(b"TABLE")
    assert mentions(mutable, ["TABLE"]) is True
    mutable[:] = b"OTHER"  # what is remembered is a copy of bytes that can change
    assert mentions(mutable, ["TABLE"]) is False
