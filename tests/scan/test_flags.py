"""``patchkit scan``'s platform-flag gates: ``is_sm100``, ``_is_sm100_supported``, ``is_sm90_supported()``.

Every snippet is written here for these tests, in the shape of SGLang's and FlashInfer's
code (the real files are in test_real_gates.py).  Unless a case says otherwise the scan is
from 10 (SM100) to 12 (SM120).
"""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import patchkit.scan.source as scan_module
from patchkit.rewrite.capability import pair
from patchkit.scan.classify import classify
from patchkit.scan.finding import short
from patchkit.scan.flags import flag
from patchkit.scan.source import scan_file, scan_source


def _no_fallback(*args):
    raise AssertionError("the fast path fell back to parsing the whole file")


def _found(source: bytes, from_cc=10, cc=12, path="pkg/mod.py") -> list[tuple]:
    with mock.patch.object(scan_module, "_fallback", _no_fallback):
        fast = scan_file(source, path, from_cc, cc)
    assert fast == scan_source(source, path, from_cc, cc, whole_file=True)
    target = pair(from_cc, cc)[1]
    return [(f.line, f.snippet, f.values, classify(f, target, None)) for f in fast if f.kind == "platform-flag"]


FINDS = [
    pytest.param(
        b'def _resolve_backend(backend):\n    if not (get_platform().is_sm90 or get_platform().is_sm100):\n'
        b'        raise ValueError("FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.")\n',
        [(2, "not (get_platform().is_sm90 or get_platform().is_sm100)", ("is_sm90", "is_sm100"), "unaware")],
        id="not (sm90 or sm100): the whole test",
    ),
    pytest.param(
        b"def applies(batch_size):\n    return (\n        (_is_sm90_supported or _is_sm100_supported)\n"
        b"        and _is_flashinfer_available\n        and batch_size > 0\n    )\n",
        [(3, "(_is_sm90_supported or _is_sm100_supported)", ("_is_sm90_supported", "_is_sm100_supported"), "unaware")],
        id="the part that decides, in an and with unknowns",
    ),
    pytest.param(
        b"if is_sm100_supported():\n    pass\n",
        [(1, "is_sm100_supported()", ("is_sm100_supported",), "unaware")],
        id="a call",
    ),
    pytest.param(b"if _is_sm10x():\n    pass\n", [(1, "_is_sm10x()", ("_is_sm10x",), "unaware")], id="sm10x"),
    pytest.param(
        b"def f(is_multi_node):\n    return get_platform().is_sm100 or is_multi_node\n",
        [(2, "get_platform().is_sm100", ("is_sm100",), "unaware")],
        id="or with an unknown: the flag alone",
    ),
    pytest.param(
        b"def f(is_multi_node):\n    return get_platform().is_sm90 and not is_multi_node or get_platform().is_sm100\n",
        [(2, "get_platform().is_sm90 and not is_multi_node or get_platform().is_sm100", ("is_sm90", "is_sm100"),
          "unaware")],
        id="decided despite an unknown: the whole",
    ),
    pytest.param(
        b"assert is_sm100a_supported(device), 'needs SM100'\n",
        [(1, "is_sm100a_supported(device)", ("is_sm100a_supported",), "unaware")],
        id="assert, FlashInfer's a-flag with an argument",
    ),
    pytest.param(
        b"tile = 128 if get_platform().is_sm100 else 64\n",
        [(1, "get_platform().is_sm100", ("is_sm100",), "unaware")],
        id="conditional expression",
    ),
    pytest.param(
        b"ks = [k for k in kernels if _is_sm100_supported]\n",
        [(1, "_is_sm100_supported", ("_is_sm100_supported",), "unaware")],
        id="comprehension if",
    ),
    pytest.param(
        b"run(x, use_tma=is_sm100_supported())\n",
        [(1, "is_sm100_supported()", ("is_sm100_supported",), "unaware")],
        id="a call's argument",
    ),
    pytest.param(
        b"use_fast = is_sm100_or_sm110_supported()\n",
        [(1, "is_sm100_or_sm110_supported()", ("is_sm100_or_sm110_supported",), "unaware")],
        id="assigned to a name that is no flag",
    ),
    pytest.param(
        b"if x:\n    pass\nelif get_platform().is_sm100:\n    pass\n",
        [(3, "get_platform().is_sm100", ("is_sm100",), "unaware")],
        id="elif",
    ),
    pytest.param(b"while is_sm100:\n    pass\n", [(1, "is_sm100", ("is_sm100",), "unaware")], id="while"),
    # aware: the statement names SM120
    pytest.param(
        b"if get_platform().is_sm100 and not get_platform().is_sm120:\n    pass\n",
        [(1, "get_platform().is_sm100 and not get_platform().is_sm120", ("is_sm100", "is_sm120"), "aware")],
        id="is_sm120 in the test: aware",
    ),
    pytest.param(
        b"if get_platform().is_sm120:\n    pass\n",
        [(1, "get_platform().is_sm120", ("is_sm120",), "aware")],
        id="is_sm120 alone: a gate for it",
    ),
    pytest.param(
        b"if is_sm100_supported():\n    a = 1\nelif is_sm120_supported():\n    a = 2\n",
        [(1, "is_sm100_supported()", ("is_sm100_supported",), "aware"),
         (3, "is_sm120_supported()", ("is_sm120_supported",), "aware")],
        id="if/elif chain with an SM120 branch",
    ),
]


@pytest.mark.parametrize("source, expected", FINDS)
def test_finds(source: bytes, expected: list) -> None:
    assert _found(source) == expected


def test_a_file_named_for_sm120_is_aware() -> None:
    source = b"if _is_sm100_supported:\n    pass\n"
    assert _found(source, path="pkg/attention_sm120.py") == [
        (1, "_is_sm100_supported", ("_is_sm100_supported",), "aware")
    ]


LEAVES_ALONE = [
    pytest.param(b"if is_blackwell_supported():\n    pass\n", id="is_blackwell_supported(): majors 10, 11, 12"),
    pytest.param(b"if not get_platform().is_blackwell:\n    raise E\n", id="get_platform().is_blackwell"),
    pytest.param(b"if get_platform().is_sm100 or get_platform().is_sm120:\n    pass\n", id="sm100 or sm120"),
    pytest.param(b"ok = (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported) and x\n", id="patched gate"),
    pytest.param(b"if is_sm90_supported():\n    pass\n", id="sm90 alone: false for both"),
    pytest.param(b"if is_hopper_with_cuda_12_3():\n    pass\n", id="hopper"),
    pytest.param(b"if get_platform().is_sm90 and not multi_node:\n    pass\n", id="sm90 and unknown"),
    pytest.param(b"x = is_sm103\n", id="sm103 is (10, 3): not 10"),
    pytest.param(b"_is_sm100_supported = _is_cuda and is_sm100_supported()\n", id="a flag's definition"),
    pytest.param(b"_is_sm100_supported: bool = _is_cuda and get_platform().is_sm100\n", id="annotated definition"),
    pytest.param(b"self.is_sm100 = is_sm100_supported()\n", id="attribute definition"),
    pytest.param(b"from sglang.srt.utils import (\n    is_sm90_supported,\n    is_sm100_supported,\n)\n", id="import"),
    pytest.param(b"def is_sm100_supported(device=None):\n    return check([10])\n", id="def"),
    pytest.param(b"if is_sm100_or_newer():\n    pass\n", id="a range: no flag"),
    pytest.param(b"if is_sm90_plus:\n    pass\n", id="plus: no flag"),
    pytest.param(b"if has_sm100:\n    pass\n", id="has_: build targets"),
    pytest.param(b"if use_sm100_kernel:\n    pass\n", id="use_: a choice"),
    pytest.param(b"if cfg.is_sm100_kernel:\n    pass\n", id="a kernel's property"),
    pytest.param(b'msg = "is_sm100"\n# if is_sm100_supported():\n', id="string and comment"),
    pytest.param(b"if is_sm100_supported(d) == expected:\n    pass\n", id="inside a comparison"),
    pytest.param(b"f = lambda: get_platform().is_sm100\n", id="a lambda's body"),
]


@pytest.mark.parametrize("source", LEAVES_ALONE)
def test_leaves_alone(source: bytes) -> None:
    assert _found(source) == []


@pytest.mark.parametrize(
    "source, from_cc, cc, expected",
    [
        pytest.param(b"if is_sm90_supported():\n    pass\n", 9, 12,
                     [(1, "is_sm90_supported()", ("is_sm90_supported",), "unaware")], id="9 -> 12: sm90"),
        pytest.param(b"if is_hopper():\n    pass\n", 9, 12, [(1, "is_hopper()", ("is_hopper",), "unaware")], id="hopper"),
        pytest.param(b"if is_blackwell():\n    pass\n", 9, 12, [(1, "is_blackwell()", ("is_blackwell",), "unaware")],
                     id="9 -> 12: blackwell holds for 12"),
        pytest.param(b"x = is_sm103\n", "10.3", "12.0", [(1, "is_sm103", ("is_sm103",), "unaware")], id="10.3: sm103"),
        pytest.param(b"x = is_sm121\n", 10, "12.1", [(1, "is_sm121", ("is_sm121",), "aware")], id="12.1: sm121"),
        pytest.param(b"x = is_sm100\n", 10, 10, [], id="one capability"),
    ],
)
def test_capabilities(source: bytes, from_cc, cc, expected) -> None:
    assert _found(source, from_cc, cc) == expected


@pytest.mark.parametrize(
    "name, majors, exact",
    [
        ("is_sm100", {10}, set()),
        ("_is_sm100_supported", {10}, set()),
        ("is_sm90_supported", {9}, set()),
        ("is_sm_90", {9}, set()),
        ("_is_sm10x", {10}, set()),
        ("_is_sm12x", {12}, set()),
        ("is_sm100a_supported", {10}, set()),
        ("is_sm100f_supported", {10}, set()),
        ("is_sm103", set(), {(10, 3)}),
        ("is_sm121a_supported", set(), {(12, 1)}),
        ("is_sm100_or_sm110_supported", {10, 11}, set()),
        ("is_hopper_with_cuda_12_3", {9}, set()),
        ("is_blackwell_supported", {10, 11, 12}, set()),
        ("IS_SM120", {12}, set()),
    ],
)
def test_flag_names(name: str, majors: set, exact: set) -> None:
    f = flag(name)
    assert (set(f.majors), set(f.exact)) == (majors, exact)


@pytest.mark.parametrize(
    "name",
    ["is_sm100_or_newer", "is_sm90_plus", "is_sm80_before", "is_sm100_kernel", "has_sm100", "use_sm100_kernel",
     "is_sm0", "is_sm1000", "is_sm200", "is_sm_supported", "is_smaller", "is_sm100x", "sm100", "is_sm90_template"],
)
def test_not_flags(name: str) -> None:
    assert flag(name) is None


# --- without unknowns, a flag expression is a gate exactly when its two values differ --------

FLAGS = {  # name -> (holds for 10, holds for 12)
    "is_sm90": (False, False),
    "get_platform().is_sm100": (True, False),
    "_is_sm10x()": (True, False),
    "is_sm120_supported()": (False, True),
    "is_blackwell": (True, True),
    "True": (True, True),
}
EXPRESSIONS = st.recursive(
    st.sampled_from(sorted(FLAGS)),
    lambda inner: st.one_of(
        inner.map(lambda e: f"not ({e})"),
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    ),
    max_leaves=6,
)


def _plain(expr: str) -> str:
    return expr.replace("get_platform().", "").replace("()", "")


@settings(max_examples=300, deadline=None)
@given(expr=EXPRESSIONS, layout=st.sampled_from(["if {e}:\n    pass\n", "ok = {e}\n", "def f():\n    return {e}\n"]))
def test_known_expressions(expr: str, layout: str) -> None:
    on_10, on_12 = (eval(_plain(expr), {_plain(n): v[i] for n, v in FLAGS.items()}) for i in (0, 1))
    found = _found(layout.format(e=expr).encode())
    if on_10 != on_12:  # the whole expression is the gate
        assert [(snippet, cls) for _, snippet, _, cls in found] == [(short(expr), "aware" if "sm120" in expr else "unaware")]
    else:  # known the same for both: nothing inside it is looked at either
        assert found == []
