"""The rewriter: (before, after) pairs, "leaves this alone" cases and errors.

Fixtures are written here in the shape of SGLang's tables; none is SGLang source.
"""

from __future__ import annotations

import black
import pytest

from patchkit.errors import RewriteError
from patchkit.rewrite.dict_key import rewrite
from patchkit.types import ALREADY_UPSTREAM, PATCHED

NAMES = ("SIZES", "_WORLD_SIZES", "OTHER")


def _rw(before: bytes, from_cc=10, to_cc=12):
    return rewrite(before, NAMES, from_cc, to_cc, "pkg/mod.py")


REWRITES = [
    pytest.param(
        b"SIZES = {\n    9: [4, 6, 8],\n    10: [6, 8],\n}\n",
        b"SIZES = {\n    9: [4, 6, 8],\n    10: [6, 8],\n    12: [6, 8],\n}\n",
        id="multi-line, last entry, trailing comma",
    ),
    pytest.param(
        b"SIZES = {\n    10: [6, 8],\n    9: [4, 6, 8],\n}\n",
        b"SIZES = {\n    10: [6, 8],\n    12: [6, 8],\n    9: [4, 6, 8],\n}\n",
        id="multi-line, source entry first",
    ),
    pytest.param(
        b"SIZES = {\n    9: [4],\n    10: [6, 8],  # sm100\n    # next is Thor\n\n    11: [1],\n}\n",
        b"SIZES = {\n    9: [4],\n    10: [6, 8],  # sm100\n    12: [6, 8],\n    # next is Thor\n\n    11: [1],\n}\n",
        id="comment after the source entry stays on its line; comment lines stay before the next",
    ),
    pytest.param(
        b"SIZES = {\n    9: [4],\n    10: [6, 8],  # sm100\n    # closing remark\n}\n",
        b"SIZES = {\n    9: [4],\n    10: [6, 8],  # sm100\n    12: [6, 8],\n    # closing remark\n}\n",
        id="comment line before the closing brace",
    ),
    pytest.param(
        b"MiB = 1024 * 1024\n\nSIZES = {\n    9: {\n        2: 64 * MiB,  # 64 MB\n    },\n"
        b"    10: {\n        2: 64 * MiB,  # 64 MB\n        8: 128 * MiB,  # 128 MB\n    },\n}\n",
        b"MiB = 1024 * 1024\n\nSIZES = {\n    9: {\n        2: 64 * MiB,  # 64 MB\n    },\n"
        b"    10: {\n        2: 64 * MiB,  # 64 MB\n        8: 128 * MiB,  # 128 MB\n    },\n"
        b"    12: {\n        2: 64 * MiB,  # 64 MB\n        8: 128 * MiB,  # 128 MB\n    },\n}\n",
        id="nested dict value copied verbatim with its inner comments",
    ),
    pytest.param(
        b"class Comm:\n    # world sizes\n    _WORLD_SIZES = {\n        9: [4, 6, 8],\n        10: [6, 8],\n    }\n\n"
        b"    def f(self):\n        return 1\n",
        b"class Comm:\n    # world sizes\n    _WORLD_SIZES = {\n        9: [4, 6, 8],\n        10: [6, 8],\n        12: [6, 8],\n    }\n\n"
        b"    def f(self):\n        return 1\n",
        id="class attribute",
    ),
    pytest.param(
        b"from typing import Dict\n\nSIZES: Dict[int, int] = {\n    9: 1,\n    10: 2,\n}\n",
        b"from typing import Dict\n\nSIZES: Dict[int, int] = {\n    9: 1,\n    10: 2,\n    12: 2,\n}\n",
        id="annotated assignment",
    ),
    pytest.param(b"SIZES = {9: 1, 10: 2}\n", b"SIZES = {9: 1, 10: 2, 12: 2}\n", id="one-line dict"),
    pytest.param(b"SIZES = {10: 2, 9: 1}\n", b"SIZES = {10: 2, 12: 2, 9: 1}\n", id="one-line dict, source first"),
    pytest.param(b"SIZES = {10: 2}\n", b"SIZES = {10: 2, 12: 2}\n", id="one-line dict, single entry"),
    pytest.param(
        b"SIZES = {\n    9: 1,\n    10: 2\n}\n",
        b"SIZES = {\n    9: 1,\n    10: 2,\n    12: 2\n}\n",
        id="multi-line without trailing comma",
    ),
    pytest.param(
        b"SIZES = {\r\n    9: 1,\r\n    10: 2,\r\n}\r\n",
        b"SIZES = {\r\n    9: 1,\r\n    10: 2,\r\n    12: 2,\r\n}\r\n",
        id="CRLF line endings",
    ),
    pytest.param(
        "# -*- coding: latin-1 -*-\n# Caf\u00e9\nSIZES = {\n    9: 1,  # \u00e9t\u00e9\n    10: 2,\n}\n".encode("latin-1"),
        "# -*- coding: latin-1 -*-\n# Caf\u00e9\nSIZES = {\n    9: 1,  # \u00e9t\u00e9\n    10: 2,\n    12: 2,\n}\n".encode("latin-1"),
        id="latin-1 source with a coding cookie",
    ),
    pytest.param(
        b"A = SIZES = {\n    10: 1,\n}\n",
        b"A = SIZES = {\n    10: 1,\n    12: 1,\n}\n",
        id="chained assignment",
    ),
    pytest.param(
        b"SIZES = {\n    10: 1,\n    10: 2,\n}\n",
        b"SIZES = {\n    10: 1,\n    10: 2,\n    12: 2,\n}\n",
        id="duplicate source key: the effective (last) one is copied",
    ),
    pytest.param(
        b"SIZES = {\n    9: 1,\n    10: 2,\n}\nOTHER = {\n    10: [1, 2],\n}\n",
        b"SIZES = {\n    9: 1,\n    10: 2,\n    12: 2,\n}\nOTHER = {\n    10: [1, 2],\n    12: [1, 2],\n}\n",
        id="two tables in one file",
    ),
    pytest.param(
        b"SIZES = {\n    10: 2  # sm100\n    ,9: 1\n}\n",
        b"SIZES = {\n    10: 2  # sm100\n    ,12: 2\n    ,9: 1\n}\n",
        id="leading-comma style: the comment stays with the source entry",
    ),
    pytest.param(
        b"SIZES = {10: 1}\n# \\\n",
        b"SIZES = {10: 1, 12: 1}\n# \\\n",
        id="last line a comment ending in a backslash keeps its newline",
    ),
    pytest.param(
        b"SIZES = {10: 1}  # \\\r\n",
        b"SIZES = {10: 1, 12: 1}  # \\\r\n",
        id="trailing comment ending in a backslash, CRLF",
    ),
    pytest.param(
        b"SIZES = {\n    9: 1,\n    0xA: 2,\n}\n",
        b"SIZES = {\n    9: 1,\n    0xA: 2,\n    12: 2,\n}\n",
        id="source key in another integer spelling",
    ),
]


@pytest.mark.parametrize(("before", "after"), REWRITES)
def test_rewrite(before: bytes, after: bytes) -> None:
    result = _rw(before)
    assert result.source == after
    assert result.changed
    assert all(t.status == PATCHED for t in result.tables)
    # Idempotent: a second run finds every table already upstream and changes nothing.
    again = _rw(result.source)
    assert again.source == after
    assert not again.changed
    assert {t.status for t in again.tables} == {ALREADY_UPSTREAM}


def test_string_keys() -> None:
    before = b"SIZES = {\n    '9.0': 1,\n    '10.0': 2,\n}\n"
    result = rewrite(before, NAMES, "10.0", "12.0")
    assert result.source == b"SIZES = {\n    '9.0': 1,\n    '10.0': 2,\n    '12.0': 2,\n}\n"


def test_other_cc_pair() -> None:
    before = b"SIZES = {\n    9: [4, 6, 8],\n    10: [6, 8],\n}\n"
    result = _rw(before, from_cc=9, to_cc=11)
    assert result.source == b"SIZES = {\n    9: [4, 6, 8],\n    11: [4, 6, 8],\n    10: [6, 8],\n}\n"


def test_reports_scope() -> None:
    before = b"SIZES = {10: 1}\n\nclass A:\n    class B:\n        _WORLD_SIZES = {10: [8]}\n"
    result = _rw(before)
    assert [(t.name, t.scope, t.status) for t in result.tables] == [
        ("SIZES", "module", PATCHED),
        ("_WORLD_SIZES", "class A.B", PATCHED),
    ]


LEFT_ALONE = [
    pytest.param(b"SIZES = {\n    10: 1,\n    12: 3,\n}\n", id="already has the new key"),
    pytest.param(b"def f():\n    SIZES = {10: 1}\n    return SIZES\n", id="assignment inside a function"),
    pytest.param(b"x = SIZES[10]\nSIZES[12] = 1\n", id="only used, never assigned"),
    pytest.param(b"NOT_A_TABLE = {10: 1}\n", id="unknown name"),
    pytest.param(b"SIZES: dict\n", id="annotation without value"),
    pytest.param(b"obj.SIZES = {10: 1}\n", id="attribute target"),
    pytest.param(b"import os\n# SIZES = {10: 1}\n", id="name only in a comment"),
]


@pytest.mark.parametrize("source", LEFT_ALONE)
def test_leaves_alone(source: bytes) -> None:
    result = _rw(source)
    assert result.source == source
    assert not result.changed


def test_already_upstream_is_reported() -> None:
    result = _rw(b"SIZES = {\n    10: 1,\n    12: 3,\n}\n")
    assert [(t.name, t.status) for t in result.tables] == [("SIZES", ALREADY_UPSTREAM)]


ERRORS = [
    pytest.param(
        b"SIZES = {\n    9: 1,\n    11: 2,\n}\n",
        "pkg/mod.py: table SIZES (module) has no key 10 to copy from (keys: 9, 11)",
        id="table without the source key",
    ),
    pytest.param(
        b"SIZES = dict(a=1)\n",
        "pkg/mod.py: table SIZES (module) is not a dict literal; patchkit only rewrites literal tables",
        id="not a dict literal",
    ),
    pytest.param(
        b"SIZES = {\n    10: 1,\n\ndef broken(:\n",
        "pkg/mod.py: cannot parse: line 4: invalid syntax",
        id="syntax error",
    ),
]


@pytest.mark.parametrize(("source", "message"), ERRORS)
def test_errors(source: bytes, message: str) -> None:
    with pytest.raises(RewriteError) as info:
        _rw(source)
    assert str(info.value).startswith(message)
    assert info.value.exit_code == 3


def test_same_cc_is_an_error() -> None:
    with pytest.raises(RewriteError, match="both 10"):
        _rw(b"SIZES = {10: 1}\n", from_cc=10, to_cc=10)


def _black_clean(source: bytes) -> bool:
    """What `black --check` says of a file with these bytes (it reads through decode_bytes)."""
    mode = black.Mode(target_versions={black.TargetVersion.PY310})
    text, _, _ = black.decode_bytes(source)
    try:
        black.format_file_contents(text, fast=False, mode=mode)
    except black.NothingChanged:
        return True
    return False


@pytest.mark.parametrize(("before", "after"), REWRITES)
def test_black_clean_stays_black_clean(before: bytes, after: bytes) -> None:
    assert _black_clean(after) or not _black_clean(before)


def test_which_fixtures_are_black_clean() -> None:
    # Keeps the test above meaningful: it only speaks for black-clean originals.
    unclean = [p.id for p in REWRITES if not _black_clean(p.values[0])]
    assert unclean == [
        "comment after the source entry stays on its line; comment lines stay before the next",
        "multi-line without trailing comma",
        "leading-comma style: the comment stays with the source entry",
    ]


def test_reports_the_copied_value_on_one_line() -> None:
    before = b"SIZES = {\n    10: {\n        2: 64 * MiB,  # 64 MB\n        8: 128 * MiB,  # 128 MB\n    },\n}\n"
    (table,) = _rw(before).tables
    assert table.value == "{2: 64 * MiB, 8: 128 * MiB}"
    (table,) = _rw(b"SIZES = {10: (1, 2), 12: [3]}\n").tables
    assert (table.status, table.value) == (ALREADY_UPSTREAM, "[3]")
