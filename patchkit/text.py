"""Words for people: one readable line, and counted nouns."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with control characters escaped, so a message stays one readable line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``plural(1, "file")`` -> "1 file"; ``plural(2, "file")`` -> "2 files"; ``many`` for irregular nouns."""
    return f"{n} {noun}" if n == 1 else f"{n} {many or noun + 's'}"
