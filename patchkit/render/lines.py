"""The lines that name a place in a file: ``Place``, grouped under its ``Heading`` on a terminal, and
``path:line: text`` when the output is piped, as compilers and ripgrep print them (``render``)."""

from __future__ import annotations


class Heading(str):
    """A line that heads a group of places (a file, a class of gates): printed on a terminal,
    left out when the output is piped (each place then names its file)."""

    __slots__ = ()


class Place(str):
    """A line that names a place in a file.  Its text is the grouped form, printed on a
    terminal under its Heading; piped, it prints as ``path:line: text``, as compilers and
    ripgrep do, for editors and grep."""

    __slots__ = ("path", "line", "text")
    path: str
    line: int
    text: str

    def __new__(cls, grouped: str, path: str, line: int, text: str) -> Place:
        place = super().__new__(cls, grouped)
        place.path, place.line, place.text = path, line, text
        return place

    def piped(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def render(lines: list[str], terminal: bool) -> list[str]:
    """The lines a result prints: grouped on a terminal, ``path:line: text`` when piped."""
    if terminal:
        return list(lines)
    return [line.piped() if isinstance(line, Place) else line for line in lines if not isinstance(line, Heading)]
