"""The list-member rewrite: (before, after) pairs, "leaves this alone" cases, errors, and
FlashInfer's real comm.py (0.6.4 patched equals 0.6.17).

Fixtures are written here in the shape of the real files; none is FlashInfer source.
"""

from __future__ import annotations

from pathlib import Path

import black
import pytest

from patchkit.errors import RewriteError
from patchkit.rewrite.list_member import Locator, rewrite
from patchkit.types import ALREADY_UPSTREAM, PATCHED
from support.mirror import default_cache, fetch_wheel, wheel_zip
from support.repos import comm_list

CALL = Locator(call="get_nvcc_flags_list", keyword="supported_major_versions", function="gen_comm_module")
TARGET = Locator(target="SUPPORTED")
TEST = Locator(test="major", function="is_supported")


def _rw(locator: Locator, before: bytes, from_cc=10, to_cc=12):
    return rewrite(before, locator, from_cc, to_cc, "pkg/mod.py")


def _gen(body: bytes) -> bytes:
    """A module with ``def gen_comm_module()`` whose body is ``body`` (indented by 4)."""
    lines = b"".join(b"    " + line + b"\n" if line else b"\n" for line in body.split(b"\n"))
    return b"def gen_comm_module():\n" + lines + b"    return nvcc_flags\n"


REWRITES = [
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = compilation_context.get_nvcc_flags_list(\n    supported_major_versions=[9, 10]\n)"),
        _gen(b"nvcc_flags = compilation_context.get_nvcc_flags_list(\n    supported_major_versions=[9, 10, 12]\n)"),
        id="attribute call, black's hugging layout, one-line list",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 10])"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 10, 12])"),
        id="plain call on one line",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=(9, 10))"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=(9, 10, 12))"),
        id="tuple",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions={9, 10})"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions={9, 10, 12})"),
        id="set",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=(10,))"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=(10, 12))"),
        id="one-element tuple loses nothing but its lone trailing comma's role",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[10, 9])"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[10, 12, 9])"),
        id="source first on one line",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9,\n        10,\n    ]\n)"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9,\n        10,\n        12,\n    ]\n)"),
        id="multi-line, trailing comma",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9,\n        10\n    ]\n)"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9,\n        10,\n        12\n    ]\n)"),
        id="multi-line without trailing comma",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        10,  # sm100\n        # Hopper\n        9,\n    ]\n)"),
        _gen(
            b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        10,  # sm100\n        12,\n"
            b"        # Hopper\n        9,\n    ]\n)"
        ),
        id="comment after the source stays on its line; comment lines stay before the next",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9, 10\n    ]\n)"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9, 10, 12\n    ]\n)"),
        id="members on one line between bracket lines",
    ),
    pytest.param(
        CALL,
        _gen(b"a = get_nvcc_flags_list(supported_major_versions=[9, 10])\nb = get_nvcc_flags_list(supported_major_versions=[10])"),
        _gen(b"a = get_nvcc_flags_list(supported_major_versions=[9, 10, 12])\nb = get_nvcc_flags_list(supported_major_versions=[10, 12])"),
        id="two calls in the function",
    ),
    pytest.param(
        CALL,
        b"class Jit:\n    def gen_comm_module(self):\n        def flags():\n"
        b"            return get_nvcc_flags_list(supported_major_versions=[9, 10])\n\n        return flags()\n",
        b"class Jit:\n    def gen_comm_module(self):\n        def flags():\n"
        b"            return get_nvcc_flags_list(supported_major_versions=[9, 10, 12])\n\n        return flags()\n",
        id="method, nested def inside the named function",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9,\n        10,\n    ]\n)").replace(b"\n", b"\r\n"),
        _gen(b"nvcc_flags = get_nvcc_flags_list(\n    supported_major_versions=[\n        9,\n        10,\n        12,\n    ]\n)").replace(
            b"\n", b"\r\n"
        ),
        id="CRLF line endings",
    ),
    pytest.param(
        TARGET,
        "# -*- coding: latin-1 -*-\n# Caf\u00e9\nSUPPORTED = [\n    9,  # \u00e9t\u00e9\n    10,\n]\n".encode("latin-1"),
        "# -*- coding: latin-1 -*-\n# Caf\u00e9\nSUPPORTED = [\n    9,  # \u00e9t\u00e9\n    10,\n    12,\n]\n".encode("latin-1"),
        id="latin-1 source with a coding cookie",
    ),
    pytest.param(TARGET, b"SUPPORTED = [9, 10]\n", b"SUPPORTED = [9, 10, 12]\n", id="module-level assignment"),
    pytest.param(TARGET, b"SUPPORTED = 9, 10\n", b"SUPPORTED = 9, 10, 12\n", id="tuple without parentheses"),
    pytest.param(
        TARGET,
        b"class Arch:\n    SUPPORTED: tuple[int, ...] = (9, 10)\n",
        b"class Arch:\n    SUPPORTED: tuple[int, ...] = (9, 10, 12)\n",
        id="annotated class attribute",
    ),
    pytest.param(TARGET, b"A = SUPPORTED = [10]\n", b"A = SUPPORTED = [10, 12]\n", id="chained assignment"),
    pytest.param(TARGET, b"SUPPORTED = [10]\n# \\\n", b"SUPPORTED = [10, 12]\n# \\\n", id="last line a comment ending in a backslash keeps its newline"),
    pytest.param(
        TEST,
        b"def is_supported(major):\n    return major in (9, 10)\n",
        b"def is_supported(major):\n    return major in (9, 10, 12)\n",
        id="membership test",
    ),
    pytest.param(
        TEST,
        b"def is_supported(major):\n    if major not in [9, 10]:\n        raise ValueError(major)\n",
        b"def is_supported(major):\n    if major not in [9, 10, 12]:\n        raise ValueError(major)\n",
        id="negative membership test",
    ),
    pytest.param(
        TEST,
        b"def is_supported(major):\n    return 0 < major in (9, 10)\n",
        b"def is_supported(major):\n    return 0 < major in (9, 10, 12)\n",
        id="chained comparison",
    ),
    pytest.param(
        Locator(test="cc[0]", function="is_supported"),
        b"def is_supported(cc):\n    return cc[0] in (9, 10) and cc[1] in (0, 3)\n",
        b"def is_supported(cc):\n    return cc[0] in (9, 10, 12) and cc[1] in (0, 3)\n",
        id="membership test of an expression",
    ),
]


@pytest.mark.parametrize(("locator", "before", "after"), REWRITES)
def test_rewrite(locator: Locator, before: bytes, after: bytes) -> None:
    result = _rw(locator, before)
    assert result.source == after
    assert result.changed
    assert {r.status for r in result.lists} == {PATCHED}
    # Idempotent: a second run finds every list already upstream and changes nothing.
    again = _rw(locator, result.source)
    assert again.source == after
    assert not again.changed
    assert {r.status for r in again.lists} == {ALREADY_UPSTREAM}


def test_string_members() -> None:
    result = _rw(TARGET, b'SUPPORTED = ["9.0", "10.0"]\n', "10.0", "12.0")
    assert result.source == b'SUPPORTED = ["9.0", "10.0", "12.0"]\n'
    result = _rw(TARGET, b"SUPPORTED = ['10.0']\n", "10.0", "12.0")
    assert result.source == b"SUPPORTED = ['10.0', '12.0']\n"


def test_other_cc_pair() -> None:
    assert _rw(TARGET, b"SUPPORTED = [8, 9, 10]\n", 9, 11).source == b"SUPPORTED = [8, 9, 11, 10]\n"


def test_reports_each_list() -> None:
    before = b"SUPPORTED = [10]\n\n\nclass A:\n    def f(self):\n        SUPPORTED = (9, 10, 12)\n"
    result = _rw(TARGET, before)
    assert [(r.name, r.scope, r.status, r.value) for r in result.lists] == [
        ("SUPPORTED", "module", PATCHED, "[10, 12]"),
        ("SUPPORTED", "def A.f", ALREADY_UPSTREAM, "(9, 10, 12)"),
    ]
    assert result.lists[0].to_json() == {
        "name": "SUPPORTED",
        "scope": "module",
        "status": PATCHED,
        "added_key": 12,
        "copied_from": 10,
        "value": "[10, 12]",
    }
    (call,) = _rw(CALL, _gen(b"f = get_nvcc_flags_list(supported_major_versions=[10])")).lists
    assert (call.name, call.scope) == ("get_nvcc_flags_list(supported_major_versions=...)", "def gen_comm_module")
    (test,) = _rw(TEST, b"def is_supported(major):\n    return major in (10,)\n").lists
    assert test.name == "major in (...)"


LEFT_ALONE = [
    pytest.param(CALL, b"def other():\n    return get_nvcc_flags_list(supported_major_versions=[9, 10])\n", id="another function"),
    pytest.param(CALL, b"flags = get_nvcc_flags_list(supported_major_versions=[9, 10])\n", id="outside any function"),
    pytest.param(CALL, _gen(b"nvcc_flags = get_nvcc_flags_list(other_versions=[9, 10])"), id="another keyword"),
    pytest.param(CALL, _gen(b"nvcc_flags = get_nvcc_flags_list([9, 10])"), id="positional argument"),
    pytest.param(CALL, _gen(b"nvcc_flags = get_other_flags(supported_major_versions=[9, 10])"), id="another call"),
    pytest.param(CALL, _gen(b"nvcc_flags = [9, 10]\nget_nvcc_flags_list(supported_major_versions=[9, 10, 12])"), id="another list"),
    pytest.param(CALL, _gen(b"# get_nvcc_flags_list(supported_major_versions=[9, 10])\nnvcc_flags = []"), id="a list in a comment"),
    pytest.param(CALL, _gen(b'nvcc_flags = "get_nvcc_flags_list(supported_major_versions=[9, 10])"'), id="a list in a string"),
    pytest.param(CALL, _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 10, 12])"), id="already upstream"),
    pytest.param(CALL, _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 12])"), id="already upstream without the source"),
    pytest.param(TARGET, b"SUPPORTED_OLD = [9, 10]\nobj.SUPPORTED = [9, 10]\nSUPPORTED[0] = [9, 10]\n", id="other targets"),
    pytest.param(TARGET, b"x = SUPPORTED + [9, 10]\nSUPPORTED: list\n", id="used, or annotated without a value"),
    pytest.param(TEST, b"def is_supported(major, minor):\n    return minor in (9, 10) or major == 10\n", id="another membership test"),
    pytest.param(TEST, b"def other(major):\n    return major in (9, 10)\n", id="membership test in another function"),
]


@pytest.mark.parametrize(("locator", "source"), LEFT_ALONE)
def test_leaves_alone(locator: Locator, source: bytes) -> None:
    result = _rw(locator, source)
    assert result.source == source
    assert not result.changed


def test_already_upstream_is_reported() -> None:
    result = _rw(CALL, _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 10, 12])"))
    assert [(r.name, r.status, r.value) for r in result.lists] == [
        ("get_nvcc_flags_list(supported_major_versions=...)", ALREADY_UPSTREAM, "[9, 10, 12]")
    ]


def test_nothing_located_reports_nothing() -> None:
    assert _rw(CALL, b"import os\n").lists == ()


ERRORS = [
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 11])"),
        "pkg/mod.py: get_nvcc_flags_list(supported_major_versions=...) (def gen_comm_module) has no member 10 to follow (members: 9, 11)",
        id="list without the source",
    ),
    pytest.param(
        TARGET,
        b"SUPPORTED = []\n",
        "pkg/mod.py: SUPPORTED (module) has no member 10 to follow (members: none)",
        id="empty list",
    ),
    pytest.param(
        CALL,
        _gen(b"nvcc_flags = get_nvcc_flags_list(supported_major_versions=MAJORS)"),
        "pkg/mod.py: get_nvcc_flags_list(supported_major_versions=...) (def gen_comm_module) is not a literal list or tuple; "
        "patchkit only rewrites literal lists",
        id="not a literal",
    ),
    pytest.param(
        TARGET,
        b"SUPPORTED = [m for m in (9, 10)]\n",
        "pkg/mod.py: SUPPORTED (module) is not a literal list or tuple; patchkit only rewrites literal lists",
        id="comprehension",
    ),
    pytest.param(
        TARGET,
        b"SUPPORTED = [9, 10\n",
        "pkg/mod.py: cannot parse: line 1: '[' was never closed",
        id="syntax error",
    ),
    pytest.param(
        TARGET,
        b"SUPPORTED = [" + b", ".join(b"%d" % (n % 10) for n in range(23)) + b", 10]\n",
        "pkg/mod.py: the rewrite would make a line 89 columns wide, over black's 88: "
        "SUPPORTED = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 10, 12]",
        id="a line black would re-wrap",
    ),
]


@pytest.mark.parametrize(("locator", "source", "message"), ERRORS)
def test_errors(locator: Locator, source: bytes, message: str) -> None:
    with pytest.raises(RewriteError) as info:
        _rw(locator, source)
    assert str(info.value) == message
    assert info.value.exit_code == 3


def test_same_cc_is_an_error() -> None:
    with pytest.raises(RewriteError) as info:
        _rw(TARGET, b"SUPPORTED = [10]\n", 10, 10)
    assert str(info.value) == "pkg/mod.py: --from-cc and --to-cc are both 10"


@pytest.mark.parametrize(
    "fields",
    [{}, {"call": "f"}, {"keyword": "k"}, {"target": "T", "test": "major"}, {"call": "f", "keyword": "k", "target": "T"}],
)
def test_a_locator_names_one_kind(fields: dict) -> None:
    with pytest.raises(ValueError, match="a locator names call and keyword, or target, or test"):
        Locator(**fields)


def test_line_length_none_allows_long_lines() -> None:
    before = b"SUPPORTED = [" + b", ".join(b"%d" % (n % 10) for n in range(23)) + b", 10]\n"
    assert rewrite(before, TARGET, 10, 12, line_length=None).source == before.replace(b", 10]", b", 10, 12]")


def black_clean(source: bytes) -> bool:
    """What `black --check` says of a file with these bytes (it reads through decode_bytes)."""
    mode = black.Mode(target_versions={black.TargetVersion.PY310})
    text, _, _ = black.decode_bytes(source)
    try:
        black.format_file_contents(text, fast=False, mode=mode)
    except black.NothingChanged:
        return True
    return False


@pytest.mark.parametrize(("locator", "before", "after"), REWRITES)
def test_black_clean_stays_black_clean(locator: Locator, before: bytes, after: bytes) -> None:
    assert black_clean(after) or not black_clean(before)


def test_which_fixtures_are_black_clean() -> None:
    # Keeps the test above meaningful: it only speaks for black-clean originals.
    unclean = [p.id for p in REWRITES if not black_clean(p.values[1])]
    assert unclean == [
        "multi-line without trailing comma",
        "members on one line between bracket lines",
    ]


# --- FlashInfer's real comm.py ------------------------------------------------------

COMM = "flashinfer/jit/comm.py"
FLASHINFER_CALL = Locator(
    call="get_nvcc_flags_list", keyword="supported_major_versions", function="gen_trtllm_comm_module"
)


def flashinfer_wheel(version: str) -> Path:
    """The wheel of flashinfer-python ``version``, downloaded with pip once and cached."""
    return fetch_wheel(version, default_cache(), "flashinfer-python")


@pytest.mark.network
def test_flashinfer_0_6_4_patched_is_0_6_17() -> None:
    old = wheel_zip("0.6.4", "flashinfer-python").read(COMM)
    new = wheel_zip("0.6.17", "flashinfer-python").read(COMM)
    result = rewrite(old, FLASHINFER_CALL, 10, 12, COMM)
    assert [(r.scope, r.status, r.value) for r in result.lists] == [("def gen_trtllm_comm_module", PATCHED, "[9, 10, 12]")]
    assert comm_list(old) == [9, 10]
    assert comm_list(result.source) == comm_list(new) == [9, 10, 12]
    # Only the inserted text differs, the file still compiles and black still passes it.
    assert result.source == old.replace(b"supported_major_versions=[9, 10]", b"supported_major_versions=[9, 10, 12]")
    compile(result.source, COMM, "exec")
    assert black_clean(old) and black_clean(result.source)
    # 0.6.17 holds it upstream.
    (upstream,) = rewrite(new, FLASHINFER_CALL, 10, 12, COMM).lists
    assert upstream.status == ALREADY_UPSTREAM
