"""Matching text: whether a file's bytes mention some names (``mentions``, its answers remembered per
file), and a regular expression compiled at its first use (``Pattern``).  Globs are the standard
library's (``fnmatch``, ``Path.glob``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, AnyStr


def mentions(data: bytes, names: Iterable[str]) -> bool:
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
_SEEN: dict[tuple[int, bytes, bytes], list[tuple[bytes, dict[str, bool]]]] = {}
_SEEN_MAX = 32 << 20
_seen_bytes = 0


def _answers(data: bytes) -> dict[str, bool]:
    """The answers found so far for these bytes: the same object, or equal bytes read again."""
    global _seen_bytes
    if not isinstance(data, bytes):  # a bytearray, a memoryview: remembered as the bytes they hold now
        data = bytes(data)
    key = (len(data), data[:64], data[-64:])
    for seen, known in _SEEN.get(key, ()):
        if seen is data or seen == data:
            return known
    if _seen_bytes + len(data) > _SEEN_MAX:
        _SEEN.clear()
        _seen_bytes = 0
    answers: dict[str, bool] = {}
    _SEEN.setdefault(key, []).append((data, answers))
    _seen_bytes += len(data)
    return answers


if TYPE_CHECKING:
    def Pattern(source: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
        """To a type checker: what the class below answers to, a compiled pattern's methods."""
else:
    class Pattern:
        """A regular expression compiled at its first use, with the compiled pattern's methods
        (``Pattern(r"\\d+").fullmatch(text)``).  ``re.compile`` runs the expression compiler, which is
        written in Python: about 1 M instructions a pattern, at every start for a module-level one.
        A command pays for the patterns it matches with, not for every pattern of the modules it imports."""

        def __init__(self, source: str | bytes, flags: int = 0) -> None:
            self._source, self._flags = source, flags

        def __getattr__(self, name: str) -> object:
            value = getattr(re.compile(self._source, self._flags), name)
            setattr(self, name, value)  # found on the instance from now on, without this call
            return value
