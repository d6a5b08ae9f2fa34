"""NVIDIA's compatibility rules (patchkit.kernels.compat) on the entries of real nvcc 13.0 builds
(shared/fixtures/fatbin/): what each GPU gets from each file."""

from __future__ import annotations

import pytest
from oracle import FIXTURES

from patchkit.cc import CC
from patchkit.kernels.compat import JIT, NONE, SASS, fit, near_misses, worst
from patchkit.kernels.fatbin import read_binary
from patchkit.render.kernels import fit_words, miss_words

# (fixture, cc) -> (what the GPU gets, the architectures that serve it)
CASES = {
    # sm_90a, sm_100a: arch-specific code runs on its own cc only.
    ("hopper-blackwell-dc", CC(9, 0)): (SASS, ("sm_90a",)),
    ("hopper-blackwell-dc", CC(10, 0)): (SASS, ("sm_100a",)),
    ("hopper-blackwell-dc", CC(10, 3)): (NONE, ()),
    ("hopper-blackwell-dc", CC(12, 0)): (NONE, ()),
    # sm_120a: 12.0 only, not a GB10's 12.1.
    ("sm120a-only", CC(12, 0)): (SASS, ("sm_120a",)),
    ("sm120a-only", CC(12, 1)): (NONE, ()),
    # sm_120 + compute_120: the cubin runs on 12.x (minor at or above), the PTX on anything later.
    ("sm120-plus-ptx", CC(12, 1)): (SASS, ("sm_120",)),
    ("sm120-plus-ptx", CC(13, 0)): (JIT, ("compute_120",)),
    ("sm120-plus-ptx", CC(10, 0)): (NONE, ()),
    # sm_120f: the 12 family at or above 12.0; no other major.
    ("sm120f", CC(12, 1)): (SASS, ("sm_120f",)),
    ("sm120f", CC(13, 0)): (NONE, ()),
    ("sm120f", CC(10, 0)): (NONE, ()),
    # the fat build: the highest of each major runs; sm_121a only on 12.1; PTX for later majors.
    ("fat-compressed", CC(8, 6)): (SASS, ("sm_80",)),
    ("fat-compressed", CC(9, 0)): (SASS, ("sm_90",)),  # sm_80 is another major
    ("fat-compressed", CC(10, 3)): (SASS, ("sm_100",)),
    ("fat-compressed", CC(12, 0)): (SASS, ("sm_120",)),
    ("fat-compressed", CC(12, 1)): (SASS, ("sm_120", "sm_121a")),
    ("fat-compressed", CC(11, 0)): (NONE, ()),  # compute_120 PTX cannot be compiled for an older GPU
    ("fat-compressed", CC(13, 0)): (JIT, ("compute_120",)),
    # compute_80 PTX only: a JIT on every GPU from 8.0 on.
    ("ptx-only-80", CC(7, 5)): (NONE, ()),
    ("ptx-only-80", CC(8, 0)): (JIT, ("compute_80",)),
    ("ptx-only-80", CC(12, 1)): (JIT, ("compute_80",)),
}


@pytest.mark.parametrize("name, cc", sorted(CASES), ids=[f"{n}-{cc.smi_text()}" for n, cc in sorted(CASES)])
def test_what_a_gpu_gets(name: str, cc: CC) -> None:
    got = fit(read_binary(str(FIXTURES / f"{name}.so")).entries, cc)
    assert (got.runs, got.by) == CASES[name, cc]


def test_words_and_the_worst_verdict() -> None:
    entries = read_binary(str(FIXTURES / "sm120a-only.so")).entries
    fits = [fit(entries, CC(12, 0)), fit(entries, CC(12, 1))]
    assert [fit_words(f) for f in fits] == ["runs on 12.0 (sm_120a)", "no code for 12.1"]
    assert worst(fits) == NONE and worst(fits[:1]) == SASS
    assert [miss_words(m) for m in near_misses(entries, CC(12, 1))] == ["sm_120a runs on 12.0 only"]
    assert [miss_words(m) for m in near_misses(read_binary(str(FIXTURES / "fat-compressed.so")).entries, CC(12, 0))] == ["sm_121a runs on 12.1 only"]
    ptx = read_binary(str(FIXTURES / "ptx-only-80.so")).entries
    assert fit_words(fit(ptx, CC(12, 0))) == "runs on 12.0 after a JIT (compute_80: the driver compiles it at the first start)"
    assert worst([fit(ptx, CC(12, 0)), fit(entries, CC(12, 0))]) == JIT
