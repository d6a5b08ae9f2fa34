"""Words for people: one readable line, text from outside made safe to print, and counted nouns."""

from __future__ import annotations

from functools import lru_cache

from patchkit.match import Pattern


def printable(text: str) -> str:
    """``text`` with control characters escaped, so a message stays one readable line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def escaped(text: str) -> str:
    """Text read from outside (a log's line, a path a log names) as it may be printed on a terminal:
    control characters escaped as ``cat -v`` shows them, so that no escape sequence (an OSC 52 that
    writes the clipboard, a cursor move, a BEL) reaches the terminal.

    C0 controls and DEL in caret notation (ESC ``^[``, BEL ``^G``, NUL ``^@``, CR ``^M``, DEL ``^?``),
    C1 controls as ``M-^X`` (U+009B, a CSI to some terminals, is ``M-^[``), and any other character
    that is not printable (bidirectional overrides, zero-width characters, line separators) as
    ``\\uXXXX``.  Tabs and spaces stay; so does a ``^`` or ``\\`` the text already has (as in ``cat -v``).
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\t" else _escape(c) for c in text)


def plain(text: str) -> str:
    """Text read from outside without its escape sequences and control characters: what a reader sees
    of it (``\x1b[31mKeyError: 12\x1b[0m`` is ``KeyError: 12``), for telling two lines the same."""
    return text if text.isprintable() else _SEQUENCE.sub("", text)


@lru_cache(maxsize=512)
def _escape(c: str) -> str:
    o = ord(c)
    if o < 0x20:
        return "^" + chr(o + 0x40)
    if o == 0x7F:
        return "^?"
    if o < 0xA0:
        return "M-^" + chr(o - 0x40)
    import unicodedata  # here: only text with a character that is not printable needs it

    if unicodedata.category(c) == "Zs":  # a space of another width: shown as it is
        return c
    return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``plural(1, "file")`` -> "1 file"; ``plural(2, "file")`` -> "2 files"; ``many`` for irregular nouns."""
    return f"{n} {noun}" if n == 1 else f"{n} {many or noun + 's'}"


# An escape sequence a terminal acts on: CSI (ESC [ or U+009B, parameters, one final byte), OSC (ESC ] or
# U+009D, up to BEL or ST), any other ESC and the character after it; then any control character left (a tab stays).
_SEQUENCE = Pattern(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|(?:\x1b\]|\x9d).*?(?:\x07|\x1b\\|\x9c|$)|\x1b.?"
                    r"|[\x00-\x08\x0a-\x1f\x7f-\x9f]")
