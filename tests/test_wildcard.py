"""``text.wildcard`` is ``fnmatch.fnmatchcase`` and ``text.named`` is ``sorted(folder.glob(pattern))``,
on every glob the fixes' data writes and on generated names and patterns."""

from __future__ import annotations

import itertools
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from patchkit.fixes.registry import PROJECTS
from patchkit.text import named, wildcard

PIECES = ("a", "b", "/", ".", "*", "ab", "")


def _strings(alphabet, most: int):
    for n in range(most + 1):
        for parts in itertools.product(alphabet, repeat=n):
            yield "".join(parts)


def test_every_star_pattern_up_to_four_pieces_matches_as_fnmatch() -> None:
    names = sorted(set(_strings(("a", "b", "/", "."), 4)))
    patterns = sorted(set(_strings(PIECES, 4)))
    wrong = [(n, p) for p in patterns for n in names if wildcard(n, p) != fnmatchcase(n, p)]
    assert wrong == []
    assert len(patterns) > 500 and len(names) > 300


@pytest.mark.parametrize(("name", "pattern", "expected"), [
    ("python/sglang/srt/a.py", "python/sglang/*.py", True),  # ``*`` crosses a folder, as fnmatch's
    ("x.toml", "*.toml", True),
    (".x.toml", "*.toml", True),
    ("x.toml.bak", "*.toml", False),
    ("a", "a*a", False),  # the two ends may not share a character
    ("aa", "a*a", True),
    ("a1.so", "a?.so", True),  # ? and [...] are fnmatch's own
    ("ab.so", "a[0-9].so", False),
])
def test_known_answers(name: str, pattern: str, expected: bool) -> None:
    assert wildcard(name, pattern) is expected is fnmatchcase(name, pattern)


def test_the_projects_globs() -> None:
    globs = [g for p in PROJECTS.values() for g in p.files]
    assert globs
    for g in globs:
        for name in (g.replace("*", "x"), g.replace("*", ""), g.replace("*", "a/b"), g + "c", "c" + g):
            assert wildcard(name, g) == fnmatchcase(name, g), (name, g)


def test_named_is_sorted_glob(tmp_path: Path) -> None:
    for name in ("b.toml", "a.toml", ".hidden.toml", "c.txt", "d.toml.orig"):
        (tmp_path / name).write_text("")
    (tmp_path / "e.toml").mkdir()
    assert named(tmp_path, "*.toml") == sorted(tmp_path.glob("*.toml"))
    assert [p.name for p in named(tmp_path, "*.toml")] == [".hidden.toml", "a.toml", "b.toml", "e.toml"]
    assert named(tmp_path / "missing", "*.toml") == [] == sorted((tmp_path / "missing").glob("*.toml"))
    assert named(tmp_path / "c.txt", "*") == []
