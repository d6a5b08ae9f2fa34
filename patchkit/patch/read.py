"""Read a patch file, apply it and reverse it: bytes in, bytes out, no I/O.

Strict on purpose: a shipped patch is only ever applied to the exact pre-image its
manifest names (checked by hash before and after), so hunks must match at their
stated positions, byte for byte.  Anything else is a clear PatchError.  The diff is read
and its hunks applied by ``rewrite/diff.py`` (unidiff), as a backport's are; this module
adds what a shipped patch must be: modifications of files named alike on every header line.
"""

from __future__ import annotations

from patchkit.errors import PatchError
from patchkit.patch.write import split_lines
from patchkit.rewrite import diff
from patchkit.rewrite.diff import FilePatch, Hunk

__all__ = ["FilePatch", "Hunk", "apply", "parse", "reverse"]

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
    headers = _headers(data.decode("latin-1"), name)
    try:
        return diff.parse(data, headers)
    except diff.DiffError as exc:
        raise PatchError(name, f"corrupt patch: {exc}") from None


def _apply(data: bytes, patch: FilePatch, reverse: bool, name: str) -> bytes:
    applied = diff.apply_hunks(split_lines(data), patch.hunks, reverse=reverse)
    if applied[0] is None:
        verb = "reverse" if reverse else "apply"
        raise PatchError(name, f"cannot {verb}: hunk at line {applied[1].old_start} of {patch.path} does not match")
    return b"".join(applied[0])


def apply(data: bytes, patch: FilePatch, name: str = "<patch>") -> bytes:
    return _apply(data, patch, False, name)


def reverse(data: bytes, patch: FilePatch, name: str = "<patch>") -> bytes:
    return _apply(data, patch, True, name)
