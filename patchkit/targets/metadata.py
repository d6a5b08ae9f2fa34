"""The release a dist-info's METADATA names (its ``Version`` header), read as text.

METADATA is a block of email headers, then the long description (the core metadata
specification).  ``importlib.metadata`` reads it with the email package's parser, which a
command that only needs the version would import at every start (``email`` and
``importlib.metadata`` with their imports: about 10 ms).  ``header`` reads one header as that
parser and ``importlib.metadata`` give it (``email.feedparser`` with the compat32 policy): the
headers end at the first line that is neither a header nor a continuation (a blank line among
them), a ``From `` line is skipped, a header's name is matched in any case and the first wins,
a continuation keeps its line ending, and a value over several lines is dedented as
``importlib.metadata`` does.  The tests hold it against ``importlib.metadata`` on real METADATA
files and on generated ones.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.bounded import read_file
from patchkit.targets.import_path import TEXT_CAP  # METADATA's cap, as for every small text file of an environment

# What starts a header line (feedparser's headerRE: "From ", a name of printable ASCII but ":"
# then ":", or a space or tab that continues the header above).
_NAME = frozenset(chr(c) for c in range(0x21, 0x7F)) - {":"}


def version(folder: Path) -> str | None:
    """The ``Version`` header of the dist-info ``folder``'s METADATA; None when it has no METADATA
    or no version.  BadInput naming it when it is no regular file or larger than its cap."""
    try:
        data = read_file(folder / "METADATA", TEXT_CAP, "METADATA")
    except FileNotFoundError:
        return None
    found = header(data.decode("utf-8", "replace"), "Version")
    return (found.strip() or None) if found is not None else None


def _header_line(line: str) -> bool:
    if line.startswith(("From ", " ", "\t")):
        return True
    name, colon, _ = line.partition(":")
    return bool(colon) and _NAME.issuperset(name)


def header(text: str, name: str) -> str | None:
    """The value of the first header ``name`` (in any case) of the email headers that begin
    ``text``, as ``importlib.metadata`` gives it; None when there is none."""
    lines = []
    for line in _lines(text):
        if not _header_line(line):
            break
        lines.append(line)
    wanted, found, current = name.lower(), None, None  # current: the lines of the header being read
    for number, line in enumerate(lines):
        if line[0] in " \t":
            if current is not None:
                current.append(line)
            continue
        if current is not None and found is None and current[0].split(":", 1)[0].lower() == wanted:
            found = _value(current)
        current = None
        if line.startswith("From "):
            if number == len(lines) - 1 and number:  # the first line of the body, pushed back
                break
            continue  # the envelope's line, or one misplaced: not a header
        if line.find(":") > 0:
            current = [line]
    if current is not None and found is None and current[0].split(":", 1)[0].lower() == wanted:
        found = _value(current)
    return found


def _lines(text: str):
    """The lines of ``text`` with their ends, split at ``\r\n``, ``\r`` or ``\n`` (as the parser's
    input, a StringIO with ``newline=''``, splits them), one at a time."""
    start, size = 0, len(text)
    while start < size:
        cr, lf = text.find("\r", start), text.find("\n", start)
        end = min(i for i in (cr, lf) if i >= 0) if cr >= 0 or lf >= 0 else size - 1
        if text.startswith("\r\n", end):
            end += 1
        yield text[start:end + 1]
        start = end + 1


def _value(lines: list[str]) -> str:
    """A header's value from its lines (compat32's ``header_source_parse``), dedented where it spans
    several as ``importlib.metadata`` dedents it (``_adapters.Message``)."""
    value = (lines[0].split(":", 1)[1].lstrip(" \t") + "".join(lines[1:])).rstrip("\r\n")
    if "\n" not in value:
        return value
    import textwrap

    return textwrap.dedent(" " * 8 + value)
