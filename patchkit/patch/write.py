"""Write patches in ``git format-patch`` form: taken by ``git apply``, ``git am`` and ``patch -p1``.

Pure: bytes in, bytes out.  Lines keep their own endings (CRLF stays CRLF) and
their own encoding (a latin-1 source gives latin-1 lines).
"""

from __future__ import annotations

import re

from patchkit.text import plural
from patchkit.values import Value

CONTEXT = 3
NO_NEWLINE = b"\\ No newline at end of file\n"
ZERO_COMMIT = "0" * 40


class FileChange(Value):
    path: str
    mode: str
    old: bytes
    new: bytes
    old_blob: str
    new_blob: str


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their endings; only ``\\n`` ends a line, as in git."""
    lines = data.split(b"\n")
    last = lines.pop()
    return [line + b"\n" for line in lines] + ([last] if last else [])


def _range(start: int, length: int) -> str:
    # As in git and difflib: "-5" for one line, "-4,0" for none (the line before).
    first = start + 1
    if length == 1:
        return f"{first}"
    if length == 0:
        first -= 1
    return f"{first},{length}"


def _emit(prefix: bytes, line: bytes) -> bytes:
    return prefix + line if line.endswith(b"\n") else prefix + line + b"\n" + NO_NEWLINE


def _funcname(lines: list[bytes], before: int) -> bytes:
    """git's default hunk-header context: the last line above the hunk that starts
    with a letter, ``_`` or ``$``, trailing whitespace removed, at most 80 bytes."""
    for line in reversed(lines[:before]):
        if line[:1].isalpha() or line[:1] in (b"_", b"$"):
            return b" " + line.rstrip()[:80]
    return b""


def hunks(old: bytes, new: bytes, context: int = CONTEXT) -> bytes:
    """The ``@@`` hunks of a unified diff from ``old`` to ``new``."""
    import difflib  # imported here: apply and revert only split lines

    a, b = split_lines(old), split_lines(new)
    out: list[bytes] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@".encode() + _funcname(a, i1) + b"\n")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out.extend(_emit(b" ", line) for line in a[x1:x2])
                continue
            out.extend(_emit(b"-", line) for line in a[x1:x2])
            out.extend(_emit(b"+", line) for line in b[y1:y2])
    return b"".join(out)


def file_diff(change: FileChange) -> bytes:
    """One ``diff --git`` section with full blob ids in its ``index`` line."""
    p = change.path
    head = (
        f"diff --git a/{p} b/{p}\n"
        f"index {change.old_blob}..{change.new_blob} {change.mode}\n"
        f"--- a/{p}\n"
        f"+++ b/{p}\n"
    )
    return head.encode() + hunks(change.old, change.new)


def diffstat(paths: list[str], sections: list[bytes]) -> str:
    """The ``git format-patch`` summary of ``file_diff`` sections."""
    rows = []
    for path, section in zip(paths, sections, strict=True):
        lines = section.split(b"\n")[4:]  # past diff/index/---/+++
        rows.append((path, sum(x.startswith(b"+") for x in lines), sum(x.startswith(b"-") for x in lines)))
    width = max(len(p) for p, _, _ in rows)
    out = [f" {p.ljust(width)} | {a + r} {'+' * a}{'-' * r}" for p, a, r in rows]
    added, removed = sum(r[1] for r in rows), sum(r[2] for r in rows)
    summary = f" {plural(len(rows), 'file')} changed"
    if added:
        summary += f", {plural(added, 'insertion')}(+)"
    if removed:
        summary += f", {plural(removed, 'deletion')}(-)"
    return "\n".join(out + [summary])


def patch_filename(subject: str, number: int = 1) -> str:
    """``0001-Add-SM120-to-....patch``, as ``git format-patch`` names it."""
    slug = re.sub(r"[^A-Za-z0-9._]+", "-", subject).strip("-.")[:52].rstrip("-.")
    return f"{number:04d}-{slug}.patch"


def format_patch(
    *, author: str, date: str, message: str, changes: list[FileChange], signature: str
) -> bytes:
    """A whole patch e-mail: header, commit message, diffstat, diffs, signature."""
    sections = [file_diff(c) for c in changes]
    subject, _, body = message.strip("\n").partition("\n")
    body = body.strip("\n")
    head = (
        f"From {ZERO_COMMIT} Mon Sep 17 00:00:00 2001\n"
        f"From: {author}\n"
        f"Date: {date}\n"
        f"Subject: [PATCH] {subject}\n"
        "\n"
        + (f"{body}\n" if body else "")
        + "---\n"
        + diffstat([c.path for c in changes], sections)
        + "\n\n"
    )
    return head.encode() + b"".join(sections) + f"-- \n{signature}\n\n".encode()
