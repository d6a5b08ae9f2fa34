"""The comparison rewrite: what 12.0 has, 12.1 gets (``== 120`` -> ``in (120, 121)``)."""

from __future__ import annotations

import pytest

from patchkit.errors import RewriteError
from patchkit.rewrite.comparison import rewrite
from patchkit.types import ALREADY_UPSTREAM, PATCHED


@pytest.mark.parametrize(
    ("subject", "before", "after"),
    [
        ("sm_version", "if sm_version == 120:\n    pass\n", "if sm_version in (120, 121):\n    pass\n"),
        ("sm_version", "ok = sm_version != 120\n", "ok = sm_version not in (120, 121)\n"),
        ("get_device_sm()", "x = a or get_device_sm() == 120\n", "x = a or get_device_sm() in (120, 121)\n"),
        ("sm_version", "if sm_version in (100, 120):\n    pass\n", "if sm_version in (100, 120, 121):\n    pass\n"),
        ("sm_version", "if sm_version in [120]:\n    pass\n", "if sm_version in [120, 121]:\n    pass\n"),
        ("sm_version", "if 90 < sm_version == 120:  # why\n    pass\n", "if 90 < sm_version in (120, 121):  # why\n    pass\n"),
    ],
)
def test_widens(subject: str, before: str, after: str) -> None:
    result = rewrite(before.encode(), subject, 120, 121, path="f.py")
    assert result.source == after.encode()
    assert [(t.status, t.scope) for t in result.tests] == [(PATCHED, "module")]


@pytest.mark.parametrize(
    "source",
    [
        "if sm_version < 90:\n    pass\n",  # an ordering: not "what 12.0 has"
        "if sm_version == 100:\n    pass\n",  # another cc
        "if major == 120:\n    pass\n",  # another subject
        "if sm_version == '120':\n    pass\n",  # a string, not the SM int
        "if sm_version in (90, 100):\n    pass\n",  # a membership without 120
        "if sm_version in SUPPORTED:\n    pass\n",  # not a literal
        "sm_version = 120\n",  # an assignment
    ],
)
def test_leaves_this_alone(source: str) -> None:
    result = rewrite(source.encode(), "sm_version", 120, 121, path="f.py")
    assert result.source == source.encode()
    assert result.tests == ()


def test_already_there_is_already_upstream() -> None:
    source = b"if sm_version in (120, 121) and not ok():\n    pass\n"
    result = rewrite(source, "sm_version", 120, 121, path="f.py")
    assert result.source == source
    assert [(t.name, t.status, t.value) for t in result.tests] == [
        ("sm_version in (120, 121)", ALREADY_UPSTREAM, "sm_version in (120, 121)")]


def test_only_inside_the_functions_named() -> None:
    source = b"A = sm_version == 120\n\n\ndef f():\n    return sm_version == 120\n\n\ndef g():\n    return sm_version == 120\n"
    result = rewrite(source, "sm_version", 120, 121, ("f",), path="f.py")
    assert result.source == (b"A = sm_version == 120\n\n\ndef f():\n    return sm_version in (120, 121)\n\n\n"
                             b"def g():\n    return sm_version == 120\n")
    assert [(t.name, t.scope) for t in result.tests] == [("sm_version == 120", "def f")]


def test_refuses_a_line_black_would_rewrap() -> None:
    source = b"x = " + b"a" * 62 + b" and sm_version == 120\n"
    with pytest.raises(RewriteError, match=r"f\.py: the rewrite would make a line 95 columns wide"):
        rewrite(source, "sm_version", 120, 121, path="f.py")


def test_same_cc_is_refused() -> None:
    with pytest.raises(RewriteError, match="both 120"):
        rewrite(b"x = sm_version == 120\n", "sm_version", 120, 120, path="f.py")
