"""Words for people: one readable line, text from outside made safe to print, and counted nouns;
and the patterns text is matched with, compiled at their first use."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


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


def wildcard(name: str, pattern: str) -> bool:
    """``fnmatch.fnmatchcase(name, pattern)``.  A pattern whose only wildcard is ``*`` (every glob
    patchkit's data writes) is matched piece by piece, leftmost first, which is exact for ``*``
    alone; fnmatch would compile a regular expression for each pattern (about 0.3 M instructions
    at its first use).  ``?`` and ``[...]`` go to fnmatch."""
    if "?" in pattern or "[" in pattern:
        from fnmatch import fnmatchcase

        return fnmatchcase(name, pattern)
    first, *middle, last = pattern.split("*") if "*" in pattern else (pattern, None)
    if last is None:
        return name == pattern
    if len(name) < len(first) + len(last) or not name.startswith(first) or not name.endswith(last):
        return False
    at, end = len(first), len(name) - len(last)
    for piece in middle:
        at = name.find(piece, at, end)
        if at < 0:
            return False
        at += len(piece)
    return True


def mentions(data: bytes, names) -> bool:
    """Whether ``data`` holds any of ``names`` (as UTF-8): the one test of whether a file is worth
    a closer look (a rule's names, a project's tables).

    Each answer is remembered per name for the file's bytes (``_answers``): a command asks of the
    same files more than once (apply reads the candidates before its lock and again under it, and
    the plan asks with the names of its rules), and most files hold none of the names, so every
    name is looked for through the whole file (SGLang's server_args.py: 250 KB, five names).  A
    name that holds another that the file lacks is lacking too, never looked for."""
    answers = _answers(data)
    for name in names:
        found = answers.get(name)
        if found is None:
            found = not any(part in name for part, there in answers.items() if not there) and name.encode() in data
            answers[name] = found
        if found:
            return True
    return False


# The answers of ``mentions``, per file content: (size, first and last bytes) -> [(bytes, {name: found})].
# Bounded: past _SEEN_MAX bytes of files, it starts afresh (a command that reads many releases).
_SEEN: dict[tuple, list[tuple[bytes, dict[str, bool]]]] = {}
_SEEN_MAX = 32 << 20
_seen_bytes = 0


def _answers(data: bytes) -> dict[str, bool]:
    """The answers found so far for these bytes: the same object, or equal bytes read again."""
    global _seen_bytes
    if not isinstance(data, bytes):  # a bytearray, a memoryview: remembered as the bytes they hold now
        data = bytes(data)
    key = (len(data), data[:64], data[-64:])
    for seen, answers in _SEEN.get(key, ()):
        if seen is data or seen == data:
            return answers
    if _seen_bytes + len(data) > _SEEN_MAX:
        _SEEN.clear()
        _seen_bytes = 0
    answers: dict[str, bool] = {}
    _SEEN.setdefault(key, []).append((data, answers))
    _seen_bytes += len(data)
    return answers


def named(folder: Path, pattern: str) -> list[Path]:
    """The entries of ``folder`` whose names ``pattern`` matches (``wildcard``), sorted:
    ``sorted(folder.glob(pattern))`` for a pattern of one component, without pathlib's glob
    machinery (a regular expression per pattern, a scandir walk).  [] where ``folder`` is no
    folder to read, as glob finds."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [folder / n for n in sorted(names) if wildcard(n, pattern)]


class Pattern:
    """A regular expression compiled at its first use, with the compiled pattern's methods
    (``Pattern(r"\\d+").fullmatch(text)``).  ``re.compile`` runs the expression compiler, which is
    written in Python: about 1 M instructions a pattern, at every start for a module-level one.
    A command pays for the patterns it matches with, not for every pattern of the modules it imports."""

    def __init__(self, source: str | bytes, flags: int = 0) -> None:
        self._source, self._flags = source, flags

    def __getattr__(self, name: str):
        value = getattr(re.compile(self._source, self._flags), name)
        setattr(self, name, value)  # found on the instance from now on, without this call
        return value


# An escape sequence a terminal acts on: CSI (ESC [ or U+009B, parameters, one final byte), OSC (ESC ] or
# U+009D, up to BEL or ST), any other ESC and the character after it; then any control character left (a tab stays).
_SEQUENCE = Pattern(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|(?:\x1b\]|\x9d).*?(?:\x07|\x1b\\|\x9c|$)|\x1b.?"
                    r"|[\x00-\x08\x0a-\x1f\x7f-\x9f]")
