"""The gates left on a feature's path: after a fix's rules, does anything still refuse the GPU?

Pure.  A fix declares, per release range, the files its feature goes through (``FeaturePath``
in ``fixes/load.py``).  Each of those files, as the rules leave it, is scanned the way
``patchkit scan`` scans (``scan.source.scan_file``: Python gates and tables, platform flags,
``__CUDA_ARCH__`` conditions in C/C++/CUDA); a finding that ``classify`` calls *unaware*
takes another path for the new capability than for the one it copies and nothing in it names
the new one: a gate that still refuses it.  So does a ``block`` the path declares by its text
(a probe that fails on every GPU of the family, such as SGLang's multicast preflight).  A fix
with such a gate left is *incomplete*.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from patchkit.rewrite.capability import cap
from patchkit.rewrite.rules import matches
from patchkit.scan.classify import UNAWARE, classify
from patchkit.scan.source import scan_file
from patchkit.values import Record

if TYPE_CHECKING:
    from patchkit.cc import Key
    from patchkit.fixes.load import FeaturePath

_DEF = re.compile(rb"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.M)


class Gate(Record):
    path: str
    line: int
    snippet: str
    function: str | None

    def to_json(self) -> dict[str, object]:
        return self._asdict()


def _function(data: bytes, line: int) -> str | None:
    """The def a line of Python source sits in (the innermost one above it that encloses it)."""
    lines = data.split(b"\n")
    if not 0 < line <= len(lines):
        return None
    text = lines[line - 1]
    indent = len(text) - len(text.lstrip())
    stack: list[tuple[str, int]] = []
    for m in _DEF.finditer(b"\n".join(lines[: line - 1])):
        depth = len(m.group(1))
        while stack and stack[-1][1] >= depth:
            stack.pop()
        stack.append((m.group(2).decode(), depth))
    while stack and stack[-1][1] >= indent:
        stack.pop()
    return stack[-1][0] if stack else None


def gates_left(files: dict[str, bytes], feature: FeaturePath, from_cc: Key, to_cc: Key) -> list[Gate]:
    """The gates in ``files`` (repository path -> bytes) on the ``feature`` path (a
    ``fixes.load.FeaturePath``) that still refuse ``to_cc`` where ``from_cc`` passes."""
    new = cap(to_cc)
    left: list[Gate] = []
    for file, text, says in feature.blocks:
        data = files.get(file)
        if data is not None and (at := data.find(text.encode())) >= 0:
            line = data.count(b"\n", 0, at) + 1
            left.append(Gate(file, line, says, _function(data, line) if file.endswith(".py") else None))
    for path, data in sorted(files.items()):
        whole = any(matches(path, g) for g in feature.files)
        functions = tuple(f for g, defs in feature.functions if matches(path, g) for f in defs)
        if not whole and not functions:
            continue
        try:
            found = scan_file(data, path, from_cc, to_cc)
        except Exception as exc:  # noqa: BLE001 - a file the scanners cannot read is a gate unproven, named
            left.append(Gate(path, 0, f"cannot be scanned ({type(exc).__name__})", None))
            continue
        for f in found:
            if classify(f, new, None, cap(from_cc).major == new.major) != UNAWARE:
                continue
            function = _function(data, f.line) if path.endswith(".py") else None
            if not whole and function not in functions:
                continue
            left.append(Gate(path, f.line, f.snippet, function))
    return sorted(set(left), key=lambda g: (g.path, g.line))
