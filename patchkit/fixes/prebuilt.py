"""The fixes as ``load.read_fixes`` makes them, stored by the build step (``_fixes.marshal`` beside the
data files, which ``patchkit/_build.py`` writes into the wheel) with the bytes of every file they were
made from: each fix's TOML file and each backport's diff.

``read`` gives them back only where every one of those files holds the same bytes and no fix file was
added or removed since; anything else (an edited fix, a source tree, an editable install) is ``None``,
and the registry reads and checks the files as ever (``load.read_fixes``), with its messages.  A
command so skips checking twelve rules and reading the headers of eight diffs at every start (about
0.6 ms, a hundredth of apply's time on SGLang).

What is stored is marshal's: each record or value as ``("record" | "value", its class's name, its
fields)``, each tuple as ``("tuple", items)``; strings, numbers, bytes and None as they are.
"""

from __future__ import annotations

import marshal
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.fixes.kinds import (
    BackportRule,
    ComparisonRule,
    DictKeyRule,
    ListMemberRule,
    Origin,
    PredicateRule,
    Refresh,
)
from patchkit.fixes.load import HERE, NOT_FIXES, FeaturePath, Fix, _read, read_fixes
from patchkit.text import named
from patchkit.values import Record, Value

STORED = "_fixes.marshal"
_CLASSES = {cls.__name__: cls for cls in (Fix, FeaturePath, Origin, Refresh, DictKeyRule, ListMemberRule, PredicateRule,
                                          ComparisonRule, BackportRule)}
_PLAIN = (str, int, float, bytes, type(None))


def stored(folder: Path) -> bytes | None:
    """The bytes of ``_fixes.marshal`` for the fixes of ``folder`` (the build step's); None where
    they do not read (``load.read_fixes`` says why when a command reads them)."""
    try:
        fixes = read_fixes(folder)
    except BadInput:
        return None
    inputs = {}
    for path in _fix_files(folder):
        inputs[path.name] = path.read_bytes()
        for rule in _read(path)["rules"]:  # a backport's rule names its diff, a file beside the fix
            if "diff" in rule:
                inputs[rule["diff"]] = (folder / rule["diff"]).read_bytes()
    return marshal.dumps({"inputs": inputs, "fixes": tuple(encode(f) for f in fixes.values())})


def read(folder: Path = HERE) -> dict[str, Fix] | None:
    """The fixes the build step stored for ``folder``, if every file they were made from is as it was."""
    try:
        with open(folder / STORED, "rb") as f:
            doc = marshal.loads(f.read())
        inputs, fixes = doc["inputs"], doc["fixes"]
    except (OSError, EOFError, ValueError, TypeError, KeyError):
        return None
    if {p.name for p in _fix_files(folder)} != {name for name in inputs if name.endswith(".toml")}:
        return None  # a fix added or removed since the build
    for name, data in inputs.items():
        try:
            with open(folder / name, "rb") as f:
                if f.read(len(data) + 1) != data:
                    return None
        except OSError:
            return None
    made = [decode(f) for f in fixes]
    return {fix.name: fix for fix in made}


def _fix_files(folder: Path) -> list[Path]:
    return [p for p in named(folder, "*.toml") if p.name not in NOT_FIXES]


def encode(value: object) -> object:
    """``value`` as marshal can store it, each record and value with its class's name."""
    if isinstance(value, Record):
        return ("record", type(value).__name__, tuple(encode(v) for v in value))
    if isinstance(value, Value):
        return ("value", type(value).__name__, tuple(encode(getattr(value, f)) for f in value._fields))
    if isinstance(value, tuple):
        return ("tuple", tuple(encode(v) for v in value))
    if isinstance(value, _PLAIN):
        return value
    raise TypeError(f"a fix holds a {type(value).__name__}, which is not stored")


def decode(value: object) -> object:
    """What ``encode`` stored, made again."""
    if type(value) is not tuple:
        return value
    if value[0] == "tuple":
        return tuple(decode(v) for v in value[1])
    cls, fields = _CLASSES[value[1]], tuple(decode(v) for v in value[2])
    return cls(*fields) if value[0] == "record" else cls(**dict(zip(cls._fields, fields, strict=True)))
