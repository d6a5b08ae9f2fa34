"""``patchkit scan`` on C/C++/CUDA: ``#if``/``#elif`` conditions on ``__CUDA_ARCH__``.

Every snippet is written here for these tests, in the shape of FlashInfer's and CUTLASS's
headers (the real ones are in test_real_gates.py).  Unless a case says otherwise the scan
is from 10 (``__CUDA_ARCH__`` 1000) to 12 (1200).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.rewrite.capability import pair
from patchkit.scan.classify import classify
from patchkit.scan.finding import Finding
from patchkit.scan.preprocessor import evaluate, parse
from patchkit.scan.source import scan_file

GUARD = b"#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))\n"


def _found(source: bytes, from_cc=10, cc=12, path="include/comm/allreduce.cuh") -> list[tuple]:
    target = pair(from_cc, cc)[1]
    return [(f.line, f.values, classify(f, target, None)) for f in scan_file(source, path, from_cc, cc)]


FINDS = [
    pytest.param(GUARD + b"  cudaGridDependencySynchronize();\n#endif\n", [(1, (900, 1200), "unaware")], id="guard"),
    pytest.param(b"#if __CUDA_ARCH__ < 1200\n#endif\n", [(1, (1200,), "unaware")], id="< 1200"),
    pytest.param(b"#if __CUDA_ARCH__ != 1200\n#endif\n", [(1, (1200,), "unaware")], id="!= 1200 shuts it out"),
    pytest.param(b"#if __CUDA_ARCH__ == 1000\n#endif\n", [(1, (1000,), "unaware")], id="== 1000"),
    pytest.param(b"#if 1000 == __CUDA_ARCH__\n#endif\n", [(1, (1000,), "unaware")], id="literal on the left"),
    pytest.param(b"#if __CUDA_ARCH__ >= 1200\n#endif\n", [(1, (1200,), "aware")], id=">= 1200: a path for it"),
    pytest.param(b"#if __CUDA_ARCH__ < 0x4b0\n#endif\n", [(1, (1200,), "unaware")], id="hex"),
    pytest.param(b"#if __CUDA_ARCH__ < 1200u\n#endif\n", [(1, (1200,), "unaware")], id="suffix"),
    pytest.param(b"#if __CUDA_ARCH__ / 100 == 10\n#endif\n", [(1, (), "unaware")], id="arithmetic"),
    pytest.param(b"#if __CUDA_ARCH__ >= 1200 ? 0 : 1\n#endif\n", [(1, (1200,), "aware")], id="?:"),
    pytest.param(b"  #  if __CUDA_ARCH__ < 1200\n  #  endif\n", [(1, (1200,), "unaware")], id="indented"),
    pytest.param(
        b"#if defined(__CUDA_ARCH__) && \\\n    (__CUDA_ARCH__ < 1200)\n#endif\n#if __CUDA_ARCH__ == 1000\n#endif\n",
        [(1, (1200,), "unaware"), (4, (1000,), "unaware")],
        id="continued line, and the line after it",
    ),
    pytest.param(
        b"#if __CUDA_ARCH__ >= 900 /* SM90 and\n   up */ && __CUDA_ARCH__ < 1200\n#endif\n",
        [(1, (900, 1200), "unaware")],
        id="block comment over lines inside the condition",
    ),
    pytest.param(
        b"#if __CUDA_ARCH__ < 1200  // SM120 has no multicast\n#endif\n",
        [(1, (1200,), "unaware")],
        id="a comment naming SM120 does not count",
    ),
    pytest.param(
        b"#if __CUDA_ARCH__ < 1200 && (1 || SOMETHING)\n#endif\n", [(1, (1200,), "unaware")], id="1 || unknown is 1"
    ),
    pytest.param(
        b"#if __CUDA_ARCH__ == 1200 || __CUDA_ARCH__ == 1210\n  a();\n#elif __CUDA_ARCH__ == 1000\n  b();\n#endif\n",
        [(1, (1200, 1210), "aware"), (3, (1000,), "aware")],
        id="#elif of a chain that names 1200",
    ),
    pytest.param(
        b"#if __CUDA_ARCH__ == 1000\n  a();\n#elif defined(__CUDA_ARCH_FEAT_SM120_ALL)\n  b();\n#endif\n",
        [(1, (1000,), "aware")],
        id="a macro of the chain names SM120",
    ),
    pytest.param(
        b"#if __CUDA_ARCH__ == 1200\n#endif\n#if __CUDA_ARCH__ == 1000\n#endif\n",
        [(1, (1200,), "aware"), (3, (1000,), "unaware")],
        id="two chains",
    ),
    pytest.param(
        b"#if A\n#if __CUDA_ARCH__ == 1200\n#endif\n#elif __CUDA_ARCH__ == 1000\n#endif\n",
        [(2, (1200,), "aware"), (4, (1000,), "unaware")],
        id="a nested chain is another chain",
    ),
    pytest.param(b"#ifdef X\n#elif __CUDA_ARCH__ < 1200\n#endif\n", [(2, (1200,), "unaware")], id="#elif"),
    pytest.param(b"#if __CUDA_ARCH__ < 1200\r\n#endif\r\n", [(1, (1200,), "unaware")], id="CRLF"),
]


@pytest.mark.parametrize("source, expected", FINDS)
def test_finds(source: bytes, expected: list) -> None:
    assert _found(source) == expected


LEAVES_ALONE = [
    pytest.param(b"#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))\n#endif\n", id=">= 900 alone"),
    pytest.param(b"#if __CUDA_ARCH__ >= 1000\n#endif\n", id=">= 1000"),
    pytest.param(b"#if __CUDA_ARCH__ < 800\n#endif\n", id="< 800"),
    pytest.param(b"#if __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1300\n#endif\n", id="both inside"),
    pytest.param(b"#ifdef __CUDA_ARCH__\n#endif\n#ifndef __CUDA_ARCH__\n#endif\n", id="#ifdef / #ifndef"),
    pytest.param(b"#if defined(__CUDA_ARCH__)\n#elif !defined(__CUDA_ARCH__)\n#endif\n", id="defined()"),
    pytest.param(b"#if __CUDACC_VER_MAJOR__ >= 12 && __CUDA_ARCH__ < 1200\n#endif\n", id="unknown macro && bound"),
    pytest.param(b"#if __CUDA_ARCH__ < 1200 || defined(ENABLE_SM120)\n#endif\n", id="bound || unknown"),
    pytest.param(
        b"#if !defined(CUTLASS_ARCH_MMA_SM100_ENABLED) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1000\n#endif\n",
        id="!defined(unknown) && == 1000",
    ),
    pytest.param(b"#if CUDA_ARCH_FAMILY(1000) && __CUDA_ARCH__ >= 1000\n#endif\n", id="function-like macro"),
    pytest.param(
        b"#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && defined(__CUDA_ARCH_FEAT_SM100_ALL)\n#endif\n",
        id="feature macro: unknown",
    ),
    pytest.param(b"#if defined(__CUDA_ARCH_FEAT_SM100_ALL)\n#endif\n", id="feature macro alone"),
    pytest.param(b"/* old code:\n#if __CUDA_ARCH__ < 1200\n#endif\n*/\n", id="in a block comment"),
    pytest.param(b"// #if __CUDA_ARCH__ < 1200\n", id="in a line comment"),
    pytest.param(b"// note \\\n#if __CUDA_ARCH__ < 1200\n#endif\n", id="line comment continued"),
    pytest.param(b'const char* k = R"(\n#if __CUDA_ARCH__ < 1200\n)";\n', id="in a raw string"),
    pytest.param(b"#define GUARD(x) \\\n#if __CUDA_ARCH__ < 1200\n", id="a #define's continuation"),
    pytest.param(b'const char* s = "/*";\n#if __CUDA_ARCH__ >= 900\n#endif\n', id="/* in a string"),
    pytest.param(b"#if __CUDA_ARCH__ < 1200.0\n#endif\n", id="a float: not read"),
    pytest.param(b"#if __CUDA_ARCH__ <\n#endif\n", id="broken condition"),
    pytest.param(b"#if __CUDA_ARCH__ < 1200 +\n#endif\n", id="dangling operator"),
    pytest.param(b"#if __CUDA_ARCH__ / 0 == 1\n#endif\n", id="division by zero"),
    pytest.param(b"#if 0\n#endif\n#if __CUDA_ARCH__\n#endif\n", id="no comparison"),
    pytest.param(b"int cuda_arch = __CUDA_ARCH__ < 1200;\n", id="not a directive"),
    pytest.param(b"#include <cuda.h>\n#pragma unroll\n", id="no __CUDA_ARCH__"),
]


@pytest.mark.parametrize("source", LEAVES_ALONE)
def test_leaves_alone(source: bytes) -> None:
    assert scan_file(source, "include/comm/allreduce.cuh", 10, 12) == []


@pytest.mark.parametrize(
    "source, from_cc, cc, expected",
    [
        pytest.param(b"#if __CUDA_ARCH__ == 1210\n#endif\n", "10.0", "12.1", [(1, (1210,), "aware")], id="12.1: 1210"),
        pytest.param(b"#if __CUDA_ARCH__ == 1210\n#endif\n", 10, 12, [], id="12: 1200 is not 1210"),
        pytest.param(b"#if __CUDA_ARCH__ == 1030\n#endif\n", "10.3", "12.0", [(1, (1030,), "unaware")], id="10.3: 1030"),
        pytest.param(b"#if __CUDA_ARCH__ >= 1000\n#endif\n", 9, 12, [(1, (1000,), "unaware")], id="9 -> 12: >= 1000"),
        pytest.param(GUARD, 9, 12, [(1, (900, 1200), "unaware")], id="9 -> 12: the guard"),
        pytest.param(GUARD, 12, 12, [], id="one capability"),
    ],
)
def test_capabilities(source: bytes, from_cc, cc, expected) -> None:
    assert _found(source, from_cc, cc) == expected


def test_finding_fields() -> None:
    source = b"// x\n#if (defined(__CUDA_ARCH__) && \\\n  (__CUDA_ARCH__ >= 900) /* Hopper */ && (__CUDA_ARCH__ < 1200))\n#endif\n"
    assert scan_file(source, "include/flashinfer/comm/x.cuh", 10, 12) == [
        Finding(
            "include/flashinfer/comm/x.cuh",
            2,
            "preprocessor",
            "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))",
            (900, 1200),
            "__CUDA_ARCH__",
            False,
            False,
        )
    ]


@pytest.mark.parametrize("path", ["a.cu", "a.cuh", "a.h", "a.hpp", "a.cpp", "dir/A.CU"])
def test_every_c_extension(path: str) -> None:
    assert [f.kind for f in scan_file(GUARD, path, 10, 12)] == ["preprocessor"]


@pytest.mark.parametrize("path", ["a.c", "a.txt", "a.cuh.orig", "Makefile", "cu"])
def test_other_files_have_none(path: str) -> None:
    assert scan_file(GUARD, path, 10, 12) == []


def test_path_names_the_cc() -> None:
    (f,) = scan_file(GUARD, "csrc/sm120/allreduce.cuh", 10, 12)
    assert classify(f, pair(10, 12)[1], None) == "aware"


# --- the evaluator against C's own rules, as Python computes them --------------------------

OPS = ["==", "!=", "<", "<=", ">", ">="]


@settings(max_examples=300, deadline=None)
@given(
    terms=st.lists(st.tuples(st.sampled_from(OPS), st.integers(700, 1300)), min_size=1, max_size=4),
    joins=st.lists(st.sampled_from(["&&", "||"]), min_size=3, max_size=3),
    negate=st.booleans(),
    from_cc=st.sampled_from([9, 10, "10.3", 11]),
    cc=st.sampled_from([12, "12.1", 10]),
)
def test_found_exactly_when_the_values_differ(terms, joins, negate, from_cc, cc) -> None:
    c_expr = " ".join(
        (f"{joins[i - 1]} " if i else "") + f"(__CUDA_ARCH__ {op} {n})" for i, (op, n) in enumerate(terms)
    )
    c_expr = f"!({c_expr})" if negate else c_expr
    source = f"#if {c_expr}\n#endif\n".encode()
    py = c_expr.replace("&&", " and ").replace("||", " or ").replace("!(", " not (")
    a, b = (x.major * 100 + x.minor * 10 for x in pair(from_cc, cc))
    differs = a != b and bool(eval(py, {"__CUDA_ARCH__": a})) != bool(eval(py, {"__CUDA_ARCH__": b}))
    assert len(scan_file(source, "k.cu", from_cc, cc)) == int(differs)
    assert evaluate(parse(c_expr), a) == int(bool(eval(py, {"__CUDA_ARCH__": a})))


# --- bounded: linear in the file's size ---------------------------------------------------

HOSTILE = [
    pytest.param(GUARD + b"  int x = 1; /* c */ // d\n#endif\n", id="guards"),
    pytest.param(b"#if A \\\n", id="one directive continued over every line"),
    pytest.param(b'R"x( "\n', id="unterminated raw strings"),
    pytest.param(b"/* \n", id="an unterminated comment"),
    pytest.param(b'"\' \\\n', id="quotes and splices"),
    pytest.param(b"#if ((((__CUDA_ARCH__ < 1200))))\n#endif\n", id="nesting"),
]


def _cpu(source: bytes) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        scan_file(source, "big.cuh", 10, 12)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("unit", HOSTILE)
def test_linear_time(unit: bytes) -> None:
    """16x the bytes costs about 16x the time, under 40x allowing for a loaded machine (a quadratic scan: 256x).

    It tells a quadratic scan from a linear one as well as 1 MB against 250 KB under 10x did, for less
    than half the work: on nesting, a scan that counts each finding's line from the file's start (at
    C's speed) measures 55x here, 11x there; one that looks through its findings so far at each (at
    Python's) 86x here, 14x there."""
    small = b"// __CUDA_ARCH__\n" + unit * (31_250 // len(unit))
    large = b"// __CUDA_ARCH__\n" + unit * (500_000 // len(unit))
    ratio = _cpu(large) / max(_cpu(small), 1e-3)
    assert ratio < 40, ratio


def test_deep_nesting_is_not_read() -> None:
    deep = b"#if " + b"(" * 5000 + b"__CUDA_ARCH__ < 1200" + b")" * 5000 + b"\n#endif\n"
    assert scan_file(deep, "k.cu", 10, 12) == []
    long_chain = b"#if " + b" || ".join([b"__CUDA_ARCH__ == 1000"] * 5000) + b"\n#endif\n"
    (f,) = scan_file(long_chain, "k.cu", 10, 12)
    assert f.line == 1 and f.values == (1000,) * 5000
