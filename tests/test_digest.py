"""``digest.sha256`` remembers what it hashed: the same answers as hashlib, for bytes and for the
other bytes-like values it is given, and it keeps at most ``_KEPT`` bytes."""

from __future__ import annotations

import hashlib

from patchkit import digest


def test_the_same_answers_as_hashlib() -> None:
    for data in (b"", b"abc", b"abc", bytes(range(256)) * 100):
        assert digest.sha256(data) == hashlib.sha256(data).hexdigest()
    assert digest.sha256(bytearray(b"abc")) == hashlib.sha256(b"abc").hexdigest()
    assert digest.sha256(memoryview(b"abcd")[1:]) == hashlib.sha256(b"bcd").hexdigest()


def test_it_keeps_at_most_its_share(monkeypatch) -> None:
    monkeypatch.setattr(digest, "_SEEN", {})
    monkeypatch.setattr(digest, "_HELD", [0])
    monkeypatch.setattr(digest, "_KEPT", 10)
    assert digest.sha256(b"0123456789abc") == hashlib.sha256(b"0123456789abc").hexdigest()  # too big to keep
    assert digest.sha256(b"12345") == hashlib.sha256(b"12345").hexdigest()
    assert digest.sha256(b"12345") == hashlib.sha256(b"12345").hexdigest()
    assert list(digest._SEEN) == [b"12345"] and digest._HELD == [5]
