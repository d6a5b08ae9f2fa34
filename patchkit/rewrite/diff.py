"""A unified diff, read and applied: the one reader (unidiff) and the one hunk applier of the
shipped patches (``patch/read.py``, strict) and of the backports' upstream diffs (``backport.py``).

``parse`` gives each file section's hunks; ``apply_hunks`` applies them to a file's lines, either
exactly at each hunk's stated line (a shipped patch, on the pre-image its manifest names) or at
the nearest place that holds it (a backport, as GNU patch without fuzz).  Pure: bytes in, bytes
out; a diff that cannot be read raises ``DiffError`` (its reason), which the caller names.
"""

from __future__ import annotations

import io

from patchkit.match import Pattern
from patchkit.values import Record

# A hunk's header where a line starts, as unidiff splits the text into lines (at \n, \r\n and \r).
_HEADER = Pattern(r"(?:^|(?<=[\r\n]))@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


class DiffError(ValueError):
    """Why a diff cannot be read, in the words after "corrupt patch: "."""


class Hunk(Record):
    number: int  # 1-based, within its file
    header: str  # "@@ -414,7 +414,7 @@", as the diff writes it
    old_start: int
    old: tuple[bytes, ...]  # context and removed lines, each with its line ending
    new: tuple[bytes, ...]  # context and added lines
    # Each line of the hunk body: (" " | "-" | "+", bytes with line ending)
    body: tuple[tuple[str, bytes], ...] = ()

    @property
    def old_lines(self) -> tuple[bytes, ...]:
        return self.old

    @property
    def new_lines(self) -> tuple[bytes, ...]:
        return self.new

    def name(self) -> str:
        return f"hunk {self.number} ({self.header})"


class FilePatch(Record):
    path: str
    hunks: tuple[Hunk, ...]


def count_hunks(data: bytes, path: str) -> int:
    """How many hunks a ``git diff`` holds for ``path``, without reading it whole (a change already
    upstream is only counted): the ``@@ -`` headers of that file's section."""
    count, mine = 0, False
    header = f"diff --git a/{path} ".encode()
    for line in data.splitlines():
        if line.startswith(b"diff --git "):
            mine = line.startswith(header)
        elif mine and line.startswith(b"@@ -"):
            count += 1
    return count


def parse(data: bytes, paths: list[str] | None = None) -> list[FilePatch]:
    """The file sections of a ``git diff`` / ``git format-patch``, with their hunks.  ``paths``:
    the file each section must be, in order (the ``diff --git`` lines a strict reader checked).
    A line ``\\ No newline at end of file`` takes the line ending off the line before it."""
    # imported here: only a patch or a backport being applied needs it
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    text = data.decode("latin-1")  # every byte as one character: the lines' bytes come back as they were
    try:
        patch_set = PatchSet(io.StringIO(text, newline=""))
    except UnidiffParseError as exc:
        raise DiffError(str(exc).strip()) from None
    if not len(patch_set):
        raise DiffError("no file sections")
    if paths is not None and len(paths) != len(patch_set):
        raise DiffError("file sections do not match their diff --git lines")
    headers = (m.group() for m in _HEADER.finditer(text))
    files: list[FilePatch] = []
    for i, section in enumerate(patch_set):
        if paths is not None and section.path != paths[i]:
            raise DiffError(f"section for {section.path} is headed {paths[i]}")
        if not len(section):
            raise DiffError(f"no hunks for {section.path}")
        hunks: list[Hunk] = []
        for number, h in enumerate(section, 1):
            body: list[tuple[str, bytes]] = []
            for line in h:
                value = line.value.encode("latin-1")
                if line.line_type == "\\":
                    # "\ No newline at end of file": the previous line has no ending.
                    if not body:
                        raise DiffError(f"hunk at line {h.source_start} of {section.path} starts with '\\ No newline'")
                    kind, previous = body[-1]
                    body[-1] = (kind, previous.rstrip(b"\n"))
                    continue
                body.append((line.line_type, value))
            old = tuple(v for t, v in body if t in " -")
            new = tuple(v for t, v in body if t in " +")
            if len(old) != h.source_length or len(new) != h.target_length:
                raise DiffError(f"hunk at line {h.source_start} of {section.path} is truncated")
            header = next(headers, None) or f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@"
            hunks.append(Hunk(number, header, h.source_start, old, new, tuple(body)))
        files.append(FilePatch(section.path, tuple(hunks)))
    return files


def apply_hunks(lines: list[bytes], hunks: tuple[Hunk, ...], reverse: bool = False, search: bool = False
) -> tuple[list[bytes], list[int]] | tuple[None, Hunk]:
    """(``lines`` with every hunk applied, each hunk's offset from its stated line), or (None, the
    first hunk that does not fit).  Reversed, each hunk's new lines are replaced by its old.

    Exactly (``search`` false): each hunk's lines must be at its stated line (reversed: moved by
    the lines the hunks before it added).  With ``search``: at the nearest place that holds them,
    not before the previous hunk; positions are the pre-image's, so only the offset found
    carries to the next hunk."""
    out: list[bytes] = []
    pos, delta, grown = 0, 0, 0
    offsets: list[int] = []
    for h in hunks:
        old, new = (h.new, h.old) if reverse else (h.old, h.new)
        if search:
            guess = (max(h.old_start - 1, 0) if old else h.old_start) + delta
            p = _nearest(lines, old, guess, pos)
        else:
            guess = h.old_start - 1 + (grown if reverse else 0) + (0 if h.old else 1)  # "-4,0": the line before
            p = guess if guess >= pos and tuple(lines[guess:guess + len(old)]) == old else None
        if p is None:
            return None, h
        offsets.append(p - guess)
        out += lines[pos:p]
        out += new
        pos = p + len(old)
        delta += p - guess
        grown += len(h.new) - len(h.old)
    return out + lines[pos:], offsets


def _nearest(lines: list[bytes], want: tuple[bytes, ...], guess: int, start: int) -> int | None:
    """The line where ``want`` sits, nearest ``guess`` and not before ``start``, or None."""
    n, size = len(want), len(lines)
    guess = min(max(guess, start), max(size - n, start))
    for distance in range(0, size + 1):
        for p in (guess - distance, guess + distance) if distance else (guess,):
            if start <= p <= size - n and tuple(lines[p:p + n]) == want:
                return p
        if guess - distance < start and guess + distance > size - n:
            return None
    return None
