"""``patchkit scan``: source snippets -> the gates found, "leaves this alone" cases, trees.

Every snippet is written here for these tests; none is SGLang source.  Unless a case
says otherwise the scan is from 10 (SM100) to 12 (SM120).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import patchkit.scan.source as scan_module
from patchkit.commands.scan import scan
from patchkit.errors import BAD_INPUT, OK, PROBLEMS, BadInput
from patchkit.render import document, text
from patchkit.render.scan import finding_json
from patchkit.scan.finding import Finding
from patchkit.scan.source import scan_source
from patchkit.scan.tree import scan_tree
from support.cli import invoke

TABLES = ("SIZES", "_WORLD_SIZES")


def _no_fallback(*args):
    raise AssertionError("the fast path fell back to parsing the whole file")


def _found(source: bytes, from_cc=10, cc=12, tables=TABLES) -> list[Finding]:
    with mock.patch.object(scan_module, "_fallback", _no_fallback):
        fast = scan_source(source, "pkg/mod.py", from_cc, cc, tables)
    # The fast path (byte pre-filter, ast, LibCST on single statements) must agree
    # with LibCST on the whole module.
    assert fast == scan_source(source, "pkg/mod.py", from_cc, cc, tables, whole_file=True)
    return fast


def _triples(source: bytes, from_cc=10, cc=12) -> list[tuple]:
    return [(f.kind, f.line, f.values) for f in _found(source, from_cc, cc)]


FINDS = [
    # tables
    pytest.param(b"SIZES = {\n    9: [4, 6, 8],\n    10: [6, 8],\n}\n", [("table", 1, (9, 10))], id="module table"),
    pytest.param(
        b"class Comm:\n    doc = 1\n\n    _WORLD_SIZES = {9: [4], 10: [4, 8]}\n",
        [("table", 4, (9, 10))],
        id="class table",
    ),
    pytest.param(
        b"LIMITS: dict[int, int] = {\n    8: 1,\n    # Hopper\n    9: 2,\n    10: 3,  # Blackwell\n}\n",
        [("table", 1, (8, 9, 10))],
        id="annotated table with comments",
    ),
    pytest.param(
        b"def tile(major):\n    return {9: 32, 10: 16}.get(major, 0)\n",
        [("table", 2, (9, 10))],
        id="inline table",
    ),
    pytest.param(b'ARCH_FLAGS = {"9.0": "a", "10.0": "b"}\n', [("table", 1, ("9.0", "10.0"))], id="string keys"),
    # membership
    pytest.param(b"if major in (9, 10):\n    pass\n", [("membership", 1, (9, 10))], id="in tuple"),
    pytest.param(
        b"ok = capability not in [(9, 0), (10, 0)]\n",
        [("membership", 1, ((9, 0), (10, 0)))],
        id="not in list of tuples",
    ),
    pytest.param(b"fast = get_sm_version() in {90, 100}\n", [("membership", 1, (90, 100))], id="in set, SM numbers"),
    pytest.param(b"if cc_major not in (10,):\n    raise E\n", [("membership", 1, (10,))], id="not in 1-tuple"),
    # equality
    pytest.param(
        b"import torch\nuse = torch.cuda.get_device_capability()[0] == 10\n",
        [("equality", 2, (10,))],
        id="== on a call's [0]",
    ),
    pytest.param(
        b"if get_device_capability() != (10, 0):\n    raise E\n", [("equality", 1, ((10, 0),))], id="!= tuple"
    ),
    pytest.param(b"sm120 = cc == 12\n", [("equality", 1, (12,))], id="== the new one"),
    pytest.param(b"x = 10 == self.sm_major\n", [("equality", 1, (10,))], id="literal on the left"),
    pytest.param(b"if get_device_sm() == 100:\n    pass\n", [("equality", 1, (100,))], id="SM number"),
    pytest.param(b'if arch == "10.0":\n    pass\n', [("equality", 1, ("10.0",))], id="X.Y string"),
    pytest.param(b"if major == 10 and minor == 3:\n    pass\n", [("equality", 1, (10,))], id="only the major part"),
    # comparison
    pytest.param(b"if major < 11:\n    pass\n", [("comparison", 1, (11,))], id="<"),
    pytest.param(b"if cap[0] != 10 or cap[1] not in (0, 3):\n    pass\n", [("equality", 1, (10,))], id="cap[0]"),
    pytest.param(b"blackwell = _device_sm // 10 == 10\n", [("equality", 1, (10,))], id="sm // 10"),
    pytest.param(b"if major >= 12:\n    pass\n", [("comparison", 1, (12,))], id=">= the new one"),
    pytest.param(b"old = (major, minor) < (11, 0)\n", [("comparison", 1, ((11, 0),))], id="tuple subject"),
    pytest.param(b"if capability >= (10, 5):\n    pass\n", [("comparison", 1, ((10, 5),))], id=">= (10, 5)"),
    pytest.param(b"blackwell = device_sm < 110\n", [("comparison", 1, (110,))], id="SM number <"),
    pytest.param(b"new = capability >= 10.3\n", [("comparison", 1, (10.3,))], id="float"),
    pytest.param(b"if 9 <= major < 11:\n    pass\n", [("comparison", 1, (9, 11))], id="chained"),
    pytest.param(b"old = (11, 0,) > major\n", [("comparison", 1, ((11, 0),))], id="tuple with a trailing comma, on the left"),
    # where the statement is
    pytest.param(
        b"if x:\n    pass\nelif (\n    arch.major == 10\n):\n    pass\nelse:\n    pass\n",
        [("equality", 4, (10,))],
        id="elif header over lines",
    ),
    pytest.param(
        b"import pytest\n\n@pytest.mark.skipif(\n    get_device_capability()[0] != 10, reason='sm100'\n)\ndef test():\n    pass\n",
        [("equality", 4, (10,))],
        id="decorator",
    ),
    pytest.param(
        b"class A:\n    def f(self):\n        for i in x:\n            try:\n                pass\n"
        b"            except E:\n                y = (\n                    a\n"
        b"                    and self.capability\n                    == (10, 0)\n                )\n",
        [("equality", 9, ((10, 0),))],
        id="deep, multi-line",
    ),
    pytest.param(
        b"class K:\n    @staticmethod\n    # note\n    @other(\n  x)\n    def ok(arch=cap // 10 == 10):\n        pass\n",
        [("equality", 6, (10,))],
        id="decorated method header",
    ),
    pytest.param(b"match x:\n    case 1:\n        z = major == 12\n", [("equality", 3, (12,))], id="match case body"),
    pytest.param(b"a = 1; b = major == 10  # sm100\n", [("equality", 1, (10,))], id="after a semicolon"),
    pytest.param(
        b"if major == 10: x = major == 12\n", [("equality", 1, (10,)), ("equality", 1, (12,))], id="one-line if"
    ),
    pytest.param(b"try: pass\nexcept E: ok = major != 10\n", [("equality", 2, (10,))], id="one-line except"),
    pytest.param(
        b"def f(major=10, ok=lambda m: m.major == 10):\n    pass\n", [("equality", 1, (10,))], id="in a def header"
    ),
    pytest.param(
        b"\xef\xbb\xbfx = 1\r\n# \xc3\xa9t\xc3\xa9\r\nif major == 10:\r\n    pass\r\n",
        [("equality", 3, (10,))],
        id="BOM, CRLF, non-ASCII",
    ),
    pytest.param(
        b"# -*- coding: latin-1 -*-\ns = '\xe9'\nt = '\xe9\xe9'; ok = major == 10\n",
        [("equality", 3, (10,))],
        id="latin-1 source",
    ),
    pytest.param(
        b"SIZES = {9: 1, 10: 2}\nif major in (9, 10):\n    n = SIZES[major]\n",
        [("table", 1, (9, 10)), ("membership", 2, (9, 10))],
        id="two in one file",
    ),
]


@pytest.mark.parametrize("source, expected", FINDS)
def test_finds(source: bytes, expected: list[tuple]) -> None:
    assert _triples(source) == expected


LEAVES_ALONE = [
    pytest.param(b"if major >= 9:\n    pass\n", id="major >= 9"),
    pytest.param(b"if major >= 10:\n    pass\n", id="major >= 10"),
    pytest.param(b"if major > 12:\n    pass\n", id="major > 12"),
    pytest.param(b"if major == 9:\n    pass\n", id="major == 9"),
    pytest.param(b"if major in (8, 9):\n    pass\n", id="in (8, 9)"),
    pytest.param(b"ok = capability >= (9, 0)\n", id=">= (9, 0)"),
    pytest.param(b"ok = get_device_sm() >= 100\n", id="SM >= 100"),
    pytest.param(b"if 9 <= major < 13:\n    pass\n", id="chained, both inside"),
    pytest.param(b"WORLD = {2: 64, 4: 32, 8: 16}\n", id="world-size dict"),
    pytest.param(
        b"SIZES = {\n    9: {2: 1, 4: 2},\n    10: {2: 1, 4: 2},\n    12: {2: 1, 4: 2},\n}\n", id="already has 12"
    ),
    pytest.param(b"SIZES = {8: 1, 9: 2}\n", id="no key 10"),
    pytest.param(b"ONE = {10: 1}\n", id="one key"),
    pytest.param(b"MIXED = {9: 1, 10: 2, 'x': 3}\n", id="not all capability keys"),
    pytest.param(b"T = {7: 1, 8: 2}\n", id="neither 9 nor 10"),
    pytest.param(b"if count == 10:\n    pass\nif len(items) == 10:\n    pass\n", id="x == 10, x not a capability"),
    pytest.param(b"if search_depth == 10:\n    pass\n", id="arch inside a word"),
    pytest.param(b"if Version(torch.__version__).major >= 12:\n    pass\n", id="a version's major"),
    pytest.param(b"if arch.out_dim == 12:\n    pass\n", id="an arch config's dimension"),
    pytest.param(b"if major == MIN_MAJOR:\n    pass\n", id="no literal"),
    pytest.param(b"if (major, minor) == 10:\n    pass\n", id="tuple subject, int literal"),
    pytest.param(b"if (major, minor) in (10, 12):\n    pass\n", id="tuple subject, ints"),
    pytest.param(b"if arch // 10 == 100:\n    pass\n", id="sm // 10, SM number"),
    pytest.param(b"if max_capacity == 10 or cap_size == 12:\n    pass\n", id="capacity"),
    pytest.param(b"if major is 10:\n    pass\n", id="is"),
    pytest.param(b"if 10 in supported_archs:\n    pass\n", id="literal in a name"),
    pytest.param(
        b'# if major == 10:\n"""major == 10, {9: 1, 10: 2}"""\nmsg = "capability in (9, 10)"\n',
        id="comments and strings",
    ),
    pytest.param(b"if major == 3 or capability < (7, 0):\n    pass\n", id="old architectures"),
]


@pytest.mark.parametrize("source", LEAVES_ALONE)
def test_leaves_alone(source: bytes) -> None:
    assert _found(source) == []


def test_same_capability_finds_nothing() -> None:
    assert _found(b"SIZES = {9: 1, 10: 2}\nx = major == 10\n", 10, 10) == []


def test_snippet_name_and_patchable() -> None:
    source = (
        b"SIZES = {9: 1, 10: 2}\n"
        b"class C:\n    _WORLD_SIZES = {\n        9: [4],  # hopper\n        10: [4, 8],\n    }\n"
        b"    def f(self):\n        SIZES = {9: 1, 10: 2}\n        self.limits = {9: 1, 10: 2}\n"
        b"if flag:\n    SIZES = {9: 1, 10: 2}\n"
        b"OTHER = {9: 1, 10: 2}\n"
        b"ok = torch.cuda.get_device_capability(dev)[0] in (9, 10)\n"
    )
    got = [(f.line, f.name, f.patchable, f.snippet) for f in _found(source)]
    assert got == [
        (1, "SIZES", True, "SIZES = {9: 1, 10: 2}"),
        (3, "C._WORLD_SIZES", True, "_WORLD_SIZES = {9: [4], 10: [4, 8]}"),
        (8, "SIZES", False, "SIZES = {9: 1, 10: 2}"),  # a function's local: the rewriter does not look there
        (9, "self.limits", False, "self.limits = {9: 1, 10: 2}"),
        (11, "SIZES", False, "SIZES = {9: 1, 10: 2}"),  # under an if: neither
        (12, "OTHER", False, "OTHER = {9: 1, 10: 2}"),  # not a registry name
        (
            13,
            "torch.cuda.get_device_capability(dev)[0]",
            False,
            "torch.cuda.get_device_capability(dev)[0] in (9, 10)",
        ),
    ]
    found = _found(source)
    assert found[0] == Finding("pkg/mod.py", 1, "table", "SIZES = {9: 1, 10: 2}", (9, 10), "SIZES", True)
    assert finding_json(found[0], "unaware", None)["values"] == [9, 10]  # --json: the values as a list


@pytest.mark.parametrize(
    "code, line",
    [
        ("major not in (10,)", "major not in (10,)"),
        ("x in (\n    (10, 0),  # sm100\n    (10, 3),\n)", "x in ((10, 0), (10, 3))"),
        ("x in ((10, 0),)", "x in ((10, 0),)"),
        ("f((a,), [b,])", "f((a,), [b])"),
    ],
)
def test_one_line_keeps_1_tuples(code: str, line: str) -> None:
    import libcst as cst

    from patchkit.scan.gate_visitor import one_line

    assert one_line(cst.parse_expression(code)) == line


def test_long_snippets_are_cut() -> None:
    source = b"SIZES = {\n" + b"".join(b"    %d: [%s],\n" % (k, b", ".join([b"1"] * 60)) for k in (9, 10)) + b"}\n"
    (f,) = _found(source)
    assert len(f.snippet) == 160 and f.snippet.endswith("...")


# --- string capabilities ("12.0") ---------------------------------------------------

DOTTED = [
    # (source, from_cc, cc, expected)
    pytest.param(
        b'A = {"9.0": 1, "10.0": 2}\n', "10.0", "12.0", [("table", 1, ("9.0", "10.0"))], id="str keys, str cc"
    ),
    pytest.param(b'A = {"9.0": 1, "10.0": 2, "12.0": 2}\n', "10.0", "12.0", [], id="has 12.0"),
    pytest.param(b'A = {"9.0": 1, "10.0": 2, "12.0": 2}\n', 10, 12, [], id="has 12.0, int cc"),
    pytest.param(
        b'A = {"9.0": 1, "10.0": 2, "12.1": 2}\n',
        "10.0",
        "12.0",
        [("table", 1, ("9.0", "10.0", "12.1"))],
        id="12.1 is not 12.0",
    ),
    pytest.param(b'A = {"9.0": 1, "10.0": 2, "12.1": 2}\n', 10, 12, [], id="12.1 has major 12"),
    pytest.param(b"A = {9: 1, 10: 2}\n", "10.0", "12.0", [("table", 1, (9, 10))], id="int keys, str cc"),
    pytest.param(b'if arch == "10.3":\n    pass\n', 10, 12, [("equality", 1, ("10.3",))], id="10.3 by major"),
    pytest.param(b'if arch == "10.3":\n    pass\n', "10.0", "12.0", [], id="10.3 is not 10.0"),
    pytest.param(
        b'if cc in ("10.0", "10.3"):\n    pass\n', "10.0", "12.0", [("membership", 1, ("10.0", "10.3"))], id="in strs"
    ),
    pytest.param(
        b"if capability == (12, 1):\n    pass\n", "10.0", "12.1", [("equality", 1, ((12, 1),))], id="12.1 tuple"
    ),
    pytest.param(b"if capability == (12, 1):\n    pass\n", 10, 12, [], id="(12, 1) is not 12"),
    pytest.param(b"if get_device_sm() == 121:\n    pass\n", "10.0", "12.1", [("equality", 1, (121,))], id="SM 121"),
    pytest.param(b'if arch == "10.3":\n    pass\n', 10, "12.0", [], id="int from_cc, str cc: both as X.Y"),
    pytest.param(b'A = {"9.0": 1, "10.0": 2}\n', 10, "12.0", [("table", 1, ("9.0", "10.0"))], id="mixed, table"),
]


@pytest.mark.parametrize("source, from_cc, cc, expected", DOTTED)
def test_dotted(source: bytes, from_cc, cc, expected) -> None:
    assert _triples(source, from_cc, cc) == expected


def test_patchable_needs_the_exact_key() -> None:
    # The rewriter copies key "10.0" only where that very key exists.
    (f,) = _found(b"SIZES = {9: 1, 10: 2}\n", "10.0", "12.0")
    assert not f.patchable
    (f,) = _found(b'SIZES = {"9.0": 1, "10.0": 2}\n', "10.0", "12.0")
    assert f.patchable


def test_syntax_newer_than_this_python() -> None:
    # ast (Python 3.11) cannot read a type alias; LibCST reads the whole file instead.
    source = b"type Pair = tuple[int, int]\nok = major == 10\n"
    assert [(f.kind, f.line) for f in scan_source(source, "m.py", 10, 12)] == [("equality", 2)]


def test_bad_capability() -> None:
    with pytest.raises(ValueError):
        scan_source(b"x = 1\n", "m.py", 10, "sm120")


# --- the pre-filter never hides a gate ----------------------------------------------

SUBJECTS = ["major", "cap[0]", "torch.cuda.get_device_capability()", "self.sm_version", "(major, minor)", "count"]
OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in"]
LITERALS = st.one_of(
    st.integers(0, 140).map(str),
    st.tuples(st.integers(6, 14), st.integers(0, 9)).map(lambda t: f"({t[0]}, {t[1]})"),
    st.tuples(st.integers(6, 14), st.integers(0, 9)).map(lambda t: f'"{t[0]}.{t[1]}"'),
    st.lists(st.integers(6, 130), min_size=1, max_size=3).map(lambda xs: "(" + ", ".join(map(str, xs)) + ",)"),
)
CAPS = st.one_of(st.integers(7, 13), st.tuples(st.integers(7, 13), st.integers(0, 9)).map(lambda t: f"{t[0]}.{t[1]}"))


@settings(max_examples=300, deadline=None)
@given(
    subject=st.sampled_from(SUBJECTS),
    op=st.sampled_from(OPS),
    literal=LITERALS,
    reverse=st.booleans(),
    layout=st.sampled_from(["{s} {op} {l}", "(\n    {s}\n    {op} {l}\n)", "{s} {op} \\\n    {l}"]),
    from_cc=CAPS,
    cc=CAPS,
)
def test_fast_path_agrees_with_whole_file(subject, op, literal, reverse, layout, from_cc, cc) -> None:
    if reverse and op not in ("in", "not in"):
        subject, literal = literal, subject
    expr = layout.format(s=subject, op=op, l=literal)
    source = (
        f"import torch\n\n\ndef f(major, minor, cap, count):\n    x = 1\n    if {expr}:\n        return 1\n".encode()
    )
    with mock.patch.object(scan_module, "_fallback", _no_fallback):
        fast = scan_source(source, "m.py", from_cc, cc, TABLES)
    assert fast == scan_source(source, "m.py", from_cc, cc, TABLES, whole_file=True)


@settings(max_examples=200, deadline=None)
@given(
    op=st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
    v=st.integers(0, 140),
    a=st.integers(7, 13),
    b=st.integers(7, 13),
)
def test_decision_rule(op, v, a, b) -> None:
    """A gate ``major OP v`` is reported exactly when it tells ``a`` from ``b``."""
    found = _found(f"ok = major {op} {v}\n".encode(), a, b)
    scale = 1 if 7 <= v <= 13 else 10 if 70 <= v <= 139 else None
    if scale is None or a == b:
        assert found == []
    else:
        differs = eval(f"{a * scale} {op} {v}") != eval(f"{b * scale} {op} {v}")
        assert [f.kind for f in found] == (
            [("comparison" if "<" in op or ">" in op else "equality")] if differs else []
        )


# --- trees ----------------------------------------------------------------------------


def _tree(root: Path) -> Path:
    files = {
        "pkg/comm.py": b"SIZES = {\n    9: 1,\n    10: 2,\n}\n",
        "pkg/sub/gate.py": b"def f(major):\n    if major in (9, 10):\n        return 1\n",
        "pkg/clean.py": b"x = {2: 1, 4: 2}\nif major >= 9:\n    pass\n",
        "pkg/broken.py": b"if major == 10\n    pass\n",
        "pkg/notes.txt": b"major == 10\n",
        ".hidden/gate.py": b"ok = major == 10\n",
        "pkg/__pycache__/gate.py": b"ok = major == 10\n",
        "node_modules/gate.py": b"ok = major == 10\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (outside / "gate.py").write_bytes(b"ok = major == 10\n")
    os.symlink(root / "pkg" / "sub", root / "pkg" / "linked")  # a symlinked folder: not scanned twice
    os.symlink(outside, root / "elsewhere")  # ... nor anything outside the tree
    os.symlink(root / "pkg" / "comm.py", root / "pkg" / "comm_link.py")
    return root


def test_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    skipped: list = []
    findings, seen, parsed = scan_tree(root, 10, 12, TABLES, skipped=skipped)
    assert [(f.path, f.line, f.kind, f.patchable) for f in findings] == [
        ("pkg/comm.py", 1, "table", True),
        ("pkg/sub/gate.py", 2, "membership", False),
    ]
    assert seen == 4  # comm, sub/gate, clean, broken
    assert parsed == 2  # clean.py has no mark; broken.py cannot be parsed
    assert [rel for rel, _ in skipped] == ["pkg/broken.py"]
    assert skipped[0][1].startswith("cannot parse")
    # Same answer with two worker processes.
    assert scan_tree(root, 10, 12, TABLES, jobs=2) == (findings, seen, parsed)


def test_command_text(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    report = scan(root, 12, tables=TABLES)
    assert report.exit_code == PROBLEMS
    assert text(report, True) == [
        "unaware: 2 gates in 2 files",
        "  pkg/comm.py",
        "    1: table: SIZES = {9: 1, 10: 2} [patchable by patchkit]",
        "  pkg/sub/gate.py",
        "    2: membership: major in (9, 10)",
        "2 capability gates in 2 files (2 unaware, 0 aware, 0 covered; 1 patchable by patchkit); scanned 4 files, parsed 2",
        "skipped pkg/broken.py: " + document(report)["skipped"][0]["reason"],
    ]
    data = document(report)
    assert data["counts"] == {
        "table": 1, "membership": 1, "equality": 0, "comparison": 0, "platform-flag": 0, "preprocessor": 0
    }
    assert data["classes"] == {"unaware": 2, "aware": 0, "covered": 0}
    assert data["findings"][0] == {
        "path": "pkg/comm.py",
        "line": 1,
        "kind": "table",
        "snippet": "SIZES = {9: 1, 10: 2}",
        "values": [9, 10],
        "name": "SIZES",
        "patchable": True,
        "names_cc": False,
        "covered_by": None,  # SIZES is in no fix's rules
        "class": "unaware",
    }
    json.dumps(data)


def test_command_text_piped(tmp_path: Path) -> None:
    """When stdout is not a terminal each gate is one line, path:line: class: what, the path as it can be
    opened (PATH joined with the file), as compilers and ripgrep print; the grouped form is for a terminal."""
    root = _tree(tmp_path / "src")
    done = invoke("scan", str(root))
    assert done.returncode == PROBLEMS
    assert done.stdout.decode().splitlines()[:3] == [
        f"{root}/pkg/comm.py:1: unaware: table: SIZES = {{9: 1, 10: 2}}",
        f"{root}/pkg/sub/gate.py:2: unaware: membership: major in (9, 10)",
        "2 capability gates in 2 files (2 unaware, 0 aware, 0 covered; 0 patchable by patchkit); scanned 4 files, parsed 2",
    ]
    assert text(scan(root, 12, tables=TABLES), terminal=True)[:3] == [
        "unaware: 2 gates in 2 files", "  pkg/comm.py", "    1: table: SIZES = {9: 1, 10: 2} [patchable by patchkit]"]


def test_command_markdown(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    (root / "m.py").write_bytes(b"ok = capability[a | b] == 10\n")
    report = scan(root, 12, fmt="markdown")
    assert text(report, True)[1:7] == [
        "",
        "### unaware: 1 gate in 1 file",
        "",
        "| file | line | kind | code | values | patchable |",
        "| --- | ---: | --- | --- | --- | --- |",
        "| m.py | 1 | equality | `capability[a \\| b] == 10` | 10 |  |",
    ]
    assert text(report, True)[-1] == (
        "1 capability gate in 1 file (1 unaware, 0 aware, 0 covered; 0 patchable by patchkit); scanned 1 files, parsed 1"
    )


def test_command_nothing_found(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_bytes(b"SIZES = {9: 1, 10: 2, 12: 2}\n")
    report = scan(tmp_path, 12)
    assert report.exit_code == OK
    assert text(report, True) == [
        "0 capability gates in 0 files (0 unaware, 0 aware, 0 covered; 0 patchable by patchkit); scanned 1 files, parsed 1"
    ]


def test_command_default_tables_are_sglang(tmp_path: Path) -> None:
    (tmp_path / "u.py").write_bytes(b"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {9: {2: 1}, 10: {2: 1}}\n")
    (f,) = document(scan(tmp_path, 12))["findings"]
    assert f["patchable"] and f["name"] == "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"


@pytest.mark.parametrize("name", ["missing", "f.py"])
def test_command_bad_path(tmp_path: Path, name: str) -> None:
    (tmp_path / "f.py").write_bytes(b"ok = major == 10\n")
    path = tmp_path / name
    with pytest.raises(BadInput) as exc:
        scan(path, 12)
    assert exc.value.exit_code == BAD_INPUT
    assert str(exc.value) == f"{path}: no such directory"


@pytest.mark.parametrize("kwargs", [{"cc": 10}, {"cc": "sm120"}, {"cc": 12, "fmt": "html"}])
def test_command_bad_arguments(tmp_path: Path, kwargs) -> None:
    with pytest.raises(BadInput):
        scan(tmp_path, **kwargs)


def test_a_table_of_a_rule_names_its_fix(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/utils.py").write_text("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {9: {2: 1}, 10: {2: 2}}\n")
    report = scan(root, 12)
    assert text(report, True)[:3] == [
        "covered: 1 gate in 1 file",
        "  pkg/utils.py",
        "    1: table: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {9: {2: 1}, 10: {2: 2}} [covered by torch-symm-mem]",
    ]
    assert document(report)["findings"][0]["covered_by"] == "torch-symm-mem"
    assert document(report)["findings"][0]["class"] == "covered"
