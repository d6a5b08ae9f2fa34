"""Relocatable device code (``__nv_relfatbin``), LTO IR and an empty module, on builds by a real nvcc
13.0.88 (data/rdc/: the nvidia-cuda-nvcc wheel's; each ``NAME.cuobjdump.txt`` holds the command and
cuobjdump 13.4's listings), and what the same builds did on a real H200 (9.0, driver 580.159.04, nvcc
13.0 of the same compiler build): ``h200-rdc-lto.txt`` and ``h200-rdc-lto-2.txt`` (data/rdc/README.md).

What the runtime runs is what patchkit counts: a kernel ran from relocatable SASS or PTX the runtime
links at the first start, not from LTO IR ("named symbol not found"), not from sm_80 alone ("no kernel
image is available"); an empty module starts and launches nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from oracle import parse_headers, parse_lists
from test_fatbin import as_cuobjdump

from patchkit.cc import CC
from patchkit.judge.kernels import judge
from patchkit.kernels.compat import JIT, LINKED, NO_KERNELS, NONE, SASS, UNKNOWN
from patchkit.kernels.evidence import kernels_in
from patchkit.kernels.fatbin import EXECUTABLE, read_binary
from patchkit.render.kernels import verdict
from support.cli import invoke

RDC = Path(__file__).resolve().parent / "data" / "rdc"
# fixture -> (the same build's name on the H200, what patchkit says for 9.0)
BUILDS = {
    "rdc-sm80-ptx80": ("A-rdc-sm80-ptx80", (JIT, ("compute_80",), LINKED)),
    "sm80-only": ("C-sm80", (NONE, (), None)),
    "rdc-sm90": ("D-rdc-sm90", (SASS, ("sm_90",), None)),
    "rdc-empty-sm75": ("F-empty-sm75", (UNKNOWN, (), NO_KERNELS)),
    "rdc-sm80-ptx80-lto90": ("H-rdc-sm80-lto90", (JIT, ("compute_80",), LINKED)),
    "link80-rel90": ("J-link80-rel90", (JIT, ("sm_90",), LINKED)),
    "link80-lto90": ("K-link80-lto90", (NONE, (), None)),
    "link80-ptx90": ("P-link80-ptx90", (JIT, ("compute_90",), LINKED)),
}
# What the program that dlopens each build and launches its kernel printed there (EAGER and LAZY alike).
RAN = {SASS: "kernel ran (0)", JIT: "kernel ran (0)", UNKNOWN: "runtime up, nothing launched (0)"}


def recorded(name: str) -> dict[str, str]:
    text = (RDC / f"{name}.cuobjdump.txt").read_text()
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1] for p in text.split("## ")[1:]}


def on_the_h200() -> dict[tuple[str, str], str]:
    """(loading mode, build) -> what the program printed, from both recorded runs."""
    found = {}
    for log in ("h200-rdc-lto.txt", "h200-rdc-lto-2.txt"):
        mode = None
        for line in (RDC / log).read_text().splitlines():
            if line.startswith("== CUDA_MODULE_LOADING="):
                mode = line.split("=")[-1]
            elif mode and (m := re.match(r"\./(\S+)\.so: (.*)$", line)):
                found[mode, m.group(1)] = m.group(2)
    return found


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_entries_as_cuobjdump_lists_them(name: str) -> None:
    b = read_binary(str(RDC / f"{name}.so"))
    said = recorded(name)
    assert as_cuobjdump([e for e in b.entries if e.section == EXECUTABLE]) == parse_headers(said["cuobjdump FILE"])
    lto = [e for e in b.entries if e.name.startswith("lto_")]
    # cuobjdump -all shows every entry but the LTO IR, which it cannot read ("Can't deobfuscate entry").
    assert sorted(as_cuobjdump(b.entries)) == sorted(parse_headers(said["cuobjdump -all FILE"]))
    assert bool(lto) == ("Can't deobfuscate entry" in said["cuobjdump -all -lelf -lptx FILE"])
    assert parse_lists(said["cuobjdump -lelf -lptx FILE"]) == ({e.listed for e in b.entries if e.loads and e.kind == 2},
                                                               {e.listed for e in b.entries if e.loads and e.kind == 1})


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_verdict_is_what_the_h200_did(name: str) -> None:
    on_h200, (runs, by, why) = BUILDS[name]
    f = judge(str(RDC / f"{name}.so"), name, [CC(9, 0)])
    assert [(x.runs, x.by, x.why) for x in f.fits] == [(runs, by, why)]
    seen = on_the_h200()
    for mode in ("EAGER", "LAZY"):
        if runs in RAN:
            assert seen[mode, on_h200] == RAN[runs]
        else:
            assert seen[mode, on_h200] in ("no kernel image is available for execution on the device (209)", "named symbol not found (500)")


def test_the_lto_only_build_failed_differently() -> None:
    seen = on_the_h200()
    assert seen["EAGER", "K-link80-lto90"] == seen["EAGER", "I-rdc-sm80-lto90"] == "named symbol not found (500)"
    assert seen["EAGER", "C-sm80"] == "no kernel image is available for execution on the device (209)"


def test_words() -> None:
    words = {name: verdict(judge(str(RDC / f"{name}.so"), name, [CC(9, 0)])) for name in BUILDS}
    assert words["link80-rel90"] == ("sm_80; relocatable sm_80, sm_90: runs on 9.0 after a JIT link (relocatable sm_90: "
                                     "the runtime links __nv_relfatbin's code at the first start)")
    assert words["link80-lto90"] == "sm_80; relocatable sm_80 (never loaded: LTO IR lto_90): no code for 9.0 (lto_90 is LTO IR, which the runtime does not link)"
    assert words["rdc-empty-sm75"] == ("sm_75; relocatable sm_75: cannot tell for 9.0: its cubins hold no kernel (no .text section: "
                                       "an empty module), so it launches none of its own; any it runs are loaded another way")


def test_an_empty_module_is_told_from_its_cubin() -> None:
    assert kernels_in(str(RDC / "rdc-empty-sm75.so"), read_binary(str(RDC / "rdc-empty-sm75.so")).entries) is False
    assert kernels_in(str(RDC / "sm80-only.so"), read_binary(str(RDC / "sm80-only.so")).entries) is True
    done = invoke("kernels", str(RDC / "rdc-empty-sm75.so"), str(RDC / "link80-lto90.so"), "--to-cc", "9.0")
    assert done.returncode == 1  # the LTO-only build has no code for 9.0; the empty module is no failure
    empty = invoke("kernels", str(RDC / "rdc-empty-sm75.so"), "--to-cc", "9.0")
    assert empty.returncode == 0
