"""``patchkit scan``'s classes: unaware, aware (the gate names the cc), covered (a fix patches it).

Every snippet is written here for these tests; none is SGLang source.  Unless a case
says otherwise the scan is from 10 (SM100) to 12 (SM120).
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

import patchkit.scan.source as scan_module
from patchkit.commands.scan import scan
from patchkit.errors import OK, PROBLEMS
from patchkit.render import document, text
from patchkit.rewrite.capability import pair
from patchkit.scan.classify import classify, words
from patchkit.scan.source import scan_source


def _no_fallback(*args):
    raise AssertionError("the fast path fell back to parsing the whole file")


def _classes(source: bytes, path: str = "pkg/mod.py", from_cc=10, cc=12) -> list[tuple[int, str]]:
    with mock.patch.object(scan_module, "_fallback", _no_fallback):
        fast = scan_source(source, path, from_cc, cc)
    assert fast == scan_source(source, path, from_cc, cc, whole_file=True)
    target = pair(from_cc, cc)[1]
    return [(f.line, classify(f, target, None)) for f in fast]


CASES = [
    # aware: a capability literal of the cc's major in the statement
    pytest.param(b"ok = major == 12\n", [(1, "aware")], id="== 12"),
    pytest.param(b"ok = major == 10 or major == 12\n", [(1, "aware"), (1, "aware")], id="== 10 or == 12"),
    pytest.param(b"ok = major == 10 and major <= 12\n", [(1, "aware")], id="a gate that is no finding names 12"),
    pytest.param(b"ok = get_device_sm() in (100, 121)\n", [(1, "aware")], id="SM121"),
    pytest.param(b"if capability != (12, 0):\n    pass\n", [(1, "aware")], id="(12, 0)"),
    pytest.param(b"fast = sm_version >= 120\n", [(1, "aware")], id=">= 120"),
    pytest.param(b"old = 90 <= device_sm < 120\n", [(1, "aware")], id="< 120 chained"),
    pytest.param(
        b"if major == 9:\n    a = 1\nelif major == 10:\n    a = 2\nelif major == 12:\n    a = 3\nelse:\n    a = 4\n",
        [(3, "aware"), (5, "aware")],
        id="if/elif chain",
    ),
    pytest.param(
        b"def f(major):\n    if major == 10:\n        return 1\n\n    # SM120 next\n\n    elif (\n        major\n        == 12\n    ):\n        return 2\n",
        [(2, "aware"), (8, "aware")],
        id="chain over lines, comments between",
    ),
    pytest.param(
        b"if x:\r\n    a = 1\r\nelif major == 10:\r\n    a = 2\r\nelif major >= 12:\r\n    a = 3\r\n",
        [(3, "aware"), (5, "aware")],
        id="chain, CRLF",
    ),
    # aware: a name, a string
    # (the flags are gates of their own: ``not is_sm120()`` holds on SM100 and not on SM120)
    pytest.param(b"ok = major == 10 and not is_sm120()\n", [(1, "aware"), (1, "aware")], id="is_sm120()"),
    pytest.param(b"ok = cap[0] == 10 or platform.is_sm12x\n", [(1, "aware"), (1, "aware")], id="attribute sm12x"),
    pytest.param(b"ok = major == 10 if x else _SM121_TILE\n", [(1, "aware")], id="SM121 constant"),
    pytest.param(b'assert major == 10, "SM120 needs the other kernel"\n', [(1, "aware")], id="message"),
    pytest.param(b'assert major == 10, f"sm_120 {x}"\n', [(1, "aware")], id="f-string"),
    pytest.param(b"ok = major == 10 or use_rtx_pro\n", [(1, "aware")], id="rtx pro"),
    pytest.param(b"ok = major == 10 or FlashForwardSm120.ok\n", [(1, "aware")], id="CamelCase Sm120"),
    # not aware
    pytest.param(b"ok = major == 10\n", [(1, "unaware")], id="== 10 alone"),
    pytest.param(b"ok = major >= 9 and major < 11\n", [(1, "unaware")], id="major >= 9, < 11"),
    pytest.param(b"ok = arch // 10 in [10, 11]\n", [(1, "unaware")], id="sm // 10 in"),
    pytest.param(
        b"if major == 10:\n    x = is_sm120()\n", [(1, "unaware"), (2, "aware")], id="sm120 in the body only"
    ),
    pytest.param(b"ok = major == 10  # sm120 has no kernel\n", [(1, "unaware")], id="a comment"),
    pytest.param(b"# SM120: see below\nok = major == 10\n", [(2, "unaware")], id="a comment above"),
    pytest.param(b"ok = major == 10 and num_heads == 12\n", [(1, "unaware")], id="12 heads"),
    pytest.param(b"ok = major == 10 and (h, v, k) == (12, 128, 128)\n", [(1, "unaware")], id="a 3-tuple with 12"),
    pytest.param(b"ok = major == 10 and sm1200\n", [(1, "unaware")], id="sm1200"),
    pytest.param(b"ok = major == 10 and block == 120\n", [(1, "unaware")], id="120, not a capability"),
    pytest.param(b"ok = major == 10\nif major == 12:\n    pass\n", [(1, "unaware"), (2, "aware")], id="two statements"),
    pytest.param(
        b"if major == 9:\n    pass\nelif major == 10:\n    pass\nelse:\n    if is_sm120():\n        pass\n",
        [(3, "unaware"), (6, "aware")],
        id="an if inside else is no elif",
    ),
    pytest.param(
        b"if major == 10:\n    pass\nif major == 12:\n    pass\n", [(1, "unaware"), (3, "aware")], id="two ifs"
    ),
]


@pytest.mark.parametrize("source, expected", CASES)
def test_class(source: bytes, expected: list) -> None:
    assert _classes(source) == expected


@pytest.mark.parametrize(
    "path, expected",
    [
        ("pkg/gemm_sm120.py", "aware"),
        ("pkg/fa4_sm120/dispatch.py", "aware"),
        ("pkg/sm12x/ops.py", "aware"),
        ("pkg/sm100/ops.py", "unaware"),
        ("pkg/sm1200.py", "unaware"),
    ],
)
def test_file_names(path: str, expected: str) -> None:
    assert _classes(b"ok = major == 10\n", path) == [(1, expected)]


@pytest.mark.parametrize(
    "source, from_cc, cc, expected",
    [
        (b'ok = arch == "10.0" or arch == "12.0"\n', "10.0", "12.0", [(1, "aware"), (1, "aware")]),
        (b"ok = major == 10 or major == 12\n", 10, 11, [(1, "unaware")]),  # 12 is not 11
        (b"ok = major == 10 or is_sm110\n", 10, 11, [(1, "aware"), (1, "aware")]),
        (b"ok = major == 10 or use_rtx_pro\n", 10, 11, [(1, "unaware")]),  # the aliases are SM12x's
        (b"ok = major == 9 or major == 12\n", 9, 12, [(1, "aware"), (1, "aware")]),
    ],
)
def test_other_capabilities(source: bytes, from_cc, cc, expected) -> None:
    assert _classes(source, from_cc=from_cc, cc=cc) == expected


@pytest.mark.parametrize("text", ["sm120", "SM_120", "sm12x", "Sm121", "is_sm12", "x_sm120a", "GeForce", "gb10"])
def test_words(text: str) -> None:
    assert words(12).search(text)


@pytest.mark.parametrize("text", ["sm100", "sm1200", "sm_12345", "gb100", "sm_10"])
def test_not_words(text: str) -> None:
    assert not words(12).search(text)


# --- the command ----------------------------------------------------------------------


def _tree(root: Path) -> Path:
    files = {
        "pkg/a.py": b"ok = major == 10\nnew = major == 12\n",
        "pkg/b.py": b"if arch in (9, 10):\n    pass\n",
        "pkg/c_sm120.py": b"ok = major == 10\n",
        "pkg/utils.py": b"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {9: {2: 1}, 10: {2: 2}}\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_grouped_by_class_then_file(tmp_path: Path) -> None:
    report = scan(_tree(tmp_path), 12)
    assert report.exit_code == PROBLEMS
    assert text(report, True) == [
        "unaware: 2 gates in 2 files",
        "  pkg/a.py",
        "    1: equality: major == 10",
        "  pkg/b.py",
        "    1: membership: arch in (9, 10)",
        "aware: 2 gates in 2 files",
        "  pkg/a.py",
        "    2: equality: major == 12",
        "  pkg/c_sm120.py",
        "    1: equality: major == 10",
        "covered: 1 gate in 1 file",
        "  pkg/utils.py",
        "    1: table: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {9: {2: 1}, 10: {2: 2}} [covered by torch-symm-mem]",
        "5 capability gates in 4 files (2 unaware, 2 aware, 1 covered; 1 patchable by patchkit); scanned 4 files, parsed 4",
    ]


def test_unaware_only(tmp_path: Path) -> None:
    report = scan(_tree(tmp_path), 12, unaware_only=True)
    assert report.exit_code == PROBLEMS
    assert text(report, True) == [
        "unaware: 2 gates in 2 files",
        "  pkg/a.py",
        "    1: equality: major == 10",
        "  pkg/b.py",
        "    1: membership: arch in (9, 10)",
        "2 unaware capability gates in 2 files (3 aware or covered not shown); scanned 4 files, parsed 4",
    ]


def test_unaware_only_exit_0_when_all_are_aware(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_bytes(b"if major == 10:\n    pass\nelif major == 12:\n    pass\n")
    report = scan(tmp_path, 12, unaware_only=True)
    assert report.exit_code == OK
    assert text(report, True) == ["0 unaware capability gates in 0 files (2 aware or covered not shown); scanned 1 files, parsed 1"]
    assert document(report)["findings"] == []
    assert scan(tmp_path, 12).exit_code == PROBLEMS  # shown without --unaware-only


def test_json(tmp_path: Path) -> None:
    data = document(scan(_tree(tmp_path), 12, fmt="json", unaware_only=True))
    json.dumps(data)
    assert data["unaware_only"] is True
    assert data["classes"] == {"unaware": 2, "aware": 2, "covered": 1}
    assert data["counts"] == {
        "table": 0, "membership": 1, "equality": 1, "comparison": 0, "platform-flag": 0, "preprocessor": 0
    }
    assert data["findings"][0] == {
        "path": "pkg/a.py",
        "line": 1,
        "kind": "equality",
        "snippet": "major == 10",
        "values": [10],
        "name": "major",
        "patchable": False,
        "names_cc": False,
        "covered_by": None,
        "class": "unaware",
    }
    every = document(scan(tmp_path, 12, fmt="json"))["findings"]
    assert [(f["path"], f["class"], f["names_cc"]) for f in every] == [
        ("pkg/a.py", "unaware", False),
        ("pkg/a.py", "aware", True),
        ("pkg/b.py", "unaware", False),
        ("pkg/c_sm120.py", "aware", False),  # by its file name
        ("pkg/utils.py", "covered", False),
    ]


def test_markdown_tables_per_class(tmp_path: Path) -> None:
    lines = text(scan(_tree(tmp_path), 12, fmt="markdown"), True)
    assert [line for line in lines if line.startswith("###")] == [
        "### unaware: 2 gates in 2 files",
        "### aware: 2 gates in 2 files",
        "### covered: 1 gate in 1 file",
    ]
    assert "| pkg/utils.py | 1 | table | `TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {9: {2: 1}, 10: {2: 2}}` | 9, 10 | covered by torch-symm-mem |" in lines
