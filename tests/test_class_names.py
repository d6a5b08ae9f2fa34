"""One name per idea: no class name is defined in two modules of patchkit/ (issue 43).

Four enums named ``Kind``, two ``Reason``s and three ``Found``s once meant that a reader had to
look at the import to know which was meant.  Classes are found with ``ast``: ``class X`` and the
functional form ``X = StrEnum("X", ...)``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PATCHKIT = Path(__file__).resolve().parent.parent / "patchkit"
_ENUMS = {"Enum", "StrEnum", "IntEnum", "Flag", "IntFlag", "NamedTuple", "namedtuple"}


def classes(tree: ast.AST) -> set[str]:
    """The names of the classes a module defines, at any depth."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if func in _ENUMS and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def defined() -> dict[str, list[str]]:
    where = defaultdict(list)
    for path in sorted(PATCHKIT.rglob("*.py")):
        for name in classes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            where[name].append(path.relative_to(PATCHKIT.parent).as_posix())
    return where


def test_no_class_name_is_defined_in_two_modules():
    shared = {name: paths for name, paths in defined().items() if len(paths) > 1}
    assert shared == {}


def test_the_walk_sees_both_forms_of_a_class():
    """The check can fail: it sees a class statement and a functional enum, nested or not."""
    tree = ast.parse('class A:\n    class Kind: pass\nB = StrEnum("Kind", {"X": "x"})\nC = enum.Enum("Why", "a b")\n')
    assert classes(tree) == {"A", "Kind", "Why"}
    assert "Status" in defined() and defined()["Status"] == ["patchkit/types.py"]
