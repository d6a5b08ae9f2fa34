"""Read a patch file, apply it and reverse it: bytes in, bytes out, no I/O.

Strict on purpose: a shipped patch is only ever applied to the exact pre-image its
manifest names (checked by hash before and after), so hunks must match at their
stated positions, byte for byte.  Anything else is a clear PatchError.
"""

from __future__ import annotations

import io
from typing import NamedTuple

from patchkit.errors import PatchError
from patchkit.patch.write import split_lines


class Hunk(NamedTuple):
    old_start: int
    old_lines: tuple[bytes, ...]
    new_lines: tuple[bytes, ...]
    # Each line of the hunk body: (" " | "-" | "+", bytes with line ending)
    body: tuple[tuple[str, bytes], ...]


class FilePatch(NamedTuple):
    path: str
    hunks: tuple[Hunk, ...]


_REFUSED_HEADERS = (
    "new file mode", "deleted file mode", "rename from", "rename to", "copy from", "copy to",
    "similarity index", "dissimilarity index", "old mode", "new mode", "Binary files", "GIT binary patch",
)


def _headers(text: str, name: str) -> list[str]:
    """The path of each ``diff --git`` section, after checking its header lines.

    Header lines are those between ``diff --git`` and the first ``@@``; hunk lines
    always start with " ", "+", "-" or "\\", so they are never taken for headers.
    """
    paths: list[str] = []
    header: list[str] | None = None
    for line in text.split("\n"):
        line = line.rstrip("\r") if header is not None or line.startswith("diff --git ") else line
        if line.startswith("diff --git "):
            header = [line]
            continue
        if header is None:
            continue
        if line.startswith("@@"):
            paths.append(_check_header(header, name))
            header = None
            continue
        header.append(line)
    if header is not None:
        raise PatchError(name, f"corrupt patch: no hunks after {header[0]!r}")
    return paths


def _check_header(header: list[str], name: str) -> str:
    a_b = header[0][len("diff --git ") :]
    half = len(a_b) // 2
    old, new = a_b[:half], a_b[half + 1 :]
    path = old[2:]
    if not (old.startswith("a/") and new == "b/" + path):
        raise PatchError(name, f"refused: {header[0]!r} renames or names no file")
    for line in header[1:]:
        if line.startswith(_REFUSED_HEADERS):
            raise PatchError(name, f"refused: the patch changes more than file contents ({line!r} for {path})")
    if f"--- a/{path}" not in header or f"+++ b/{path}" not in header:
        raise PatchError(name, f"refused: the patch creates, deletes or renames {path}")
    return path


def parse(data: bytes, name: str = "<patch>") -> list[FilePatch]:
    """The file sections of a ``git format-patch``/unified diff.  Modifications only."""
    import unidiff  # imported here: only needed when a shipped patch is applied

    text = data.decode("latin-1")
    headers = _headers(text, name)
    try:
        patch_set = unidiff.PatchSet(io.StringIO(text, newline=""))
    except unidiff.UnidiffParseError as exc:
        raise PatchError(name, f"corrupt patch: {str(exc).strip()}") from None
    if not len(patch_set):
        raise PatchError(name, "corrupt patch: no file sections")
    if len(headers) != len(patch_set):
        raise PatchError(name, "corrupt patch: file sections do not match their diff --git lines")
    files = []
    for section, path in zip(patch_set, headers, strict=True):
        if section.path != path:
            raise PatchError(name, f"corrupt patch: section for {section.path} is headed {path}")
        if not len(section):
            raise PatchError(name, f"corrupt patch: no hunks for {section.path}")
        hunks = []
        for h in section:
            body = []
            for line in h:
                value = line.value.encode("latin-1")
                if line.line_type == "\\":
                    # "\ No newline at end of file": the previous line has no ending.
                    if not body:
                        raise PatchError(name, f"corrupt patch: hunk at line {h.source_start} of {section.path} starts with '\\ No newline'")
                    kind, previous = body[-1]
                    body[-1] = (kind, previous.rstrip(b"\n"))
                    continue
                body.append((line.line_type, value))
            old = tuple(v for t, v in body if t in " -")
            new = tuple(v for t, v in body if t in " +")
            if len(old) != h.source_length or len(new) != h.target_length:
                raise PatchError(name, f"corrupt patch: hunk at line {h.source_start} of {section.path} is truncated")
            hunks.append(Hunk(h.source_start, old, new, tuple(body)))
        files.append(FilePatch(section.path, tuple(hunks)))
    return files


def _apply(data: bytes, patch: FilePatch, reverse: bool, name: str) -> bytes:
    lines = split_lines(data)
    out: list[bytes] = []
    position = 0  # next unconsumed line of ``lines``
    offset = 0  # new-minus-old line count so far (to find reversed hunks)
    for hunk in patch.hunks:
        expected, replacement = (hunk.new_lines, hunk.old_lines) if reverse else (hunk.old_lines, hunk.new_lines)
        start = hunk.old_start - 1 + (offset if reverse else 0)
        if not hunk.old_lines:
            start += 1  # "-4,0" names the line before an insertion
        if start < position or tuple(lines[start : start + len(expected)]) != expected:
            verb = "reverse" if reverse else "apply"
            raise PatchError(name, f"cannot {verb}: hunk at line {hunk.old_start} of {patch.path} does not match")
        out.extend(lines[position:start])
        out.extend(replacement)
        position = start + len(expected)
        offset += len(hunk.new_lines) - len(hunk.old_lines)
    out.extend(lines[position:])
    return b"".join(out)


def apply(data: bytes, patch: FilePatch, name: str = "<patch>") -> bytes:
    return _apply(data, patch, False, name)


def reverse(data: bytes, patch: FilePatch, name: str = "<patch>") -> bytes:
    return _apply(data, patch, True, name)
