"""Modes 3, 4, 7, 15 and 17 (patchkit/fixes/modes/): each saved log holds a sign of its mode and is
listed with its thread in its folder's SOURCES.toml, and the signs name the SM12x part of their text,
so the same words printed for another GPU (lines as threads and released files have them) are no
sign of these modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.fixes.load import _read
from patchkit.fixes.modes import modes

LOGS = Path(__file__).resolve().parents[1] / "logs" / "data" / "modes"
MINE = ("mxfp4-moe-sm12x", "nvfp4-cutlass-crash", "fp4-moe-silent-wrong", "nvfp4-slow-kernels", "fp8-moe-cutlass-sm120")


def _mode(name: str):
    return next(m for m in modes() if m.name == name)


def test_the_five_modes_read() -> None:
    found = {m.name: m for m in modes() if m.name in MINE}
    assert sorted((m.survey, m.name, m.cost.value) for m in found.values()) == [
        (3, "mxfp4-moe-sm12x", "crash"), (4, "nvfp4-cutlass-crash", "crash"),
        (7, "fp4-moe-silent-wrong", "silent-wrong"), (15, "nvfp4-slow-kernels", "slowdown"),
        (17, "fp8-moe-cutlass-sm120", "crash")]
    # Silent wrong output prints nothing: mode 7 has no sign, only releases.
    assert found["fp4-moe-silent-wrong"].signs == ()
    assert [(e.project, e.since, e.fixed_in) for e in found["fp8-moe-cutlass-sm120"].exposed] == [("vllm", "0.14.0", "0.15.1")]


@pytest.mark.parametrize("name", [n for n in MINE if (LOGS / f"{_mode(n).survey:02d}-{n}").is_dir()])
def test_each_log_holds_a_sign_and_is_sourced(name: str) -> None:
    mode = _mode(name)
    folder = LOGS / f"{mode.survey:02d}-{name}"
    sources = _read(folder / "SOURCES.toml")["logs"]
    assert sorted(s["file"] for s in sources) == sorted(p.name for p in folder.glob("*.log"))
    for source in sources:
        assert source["thread"] in mode.sources and source["url"].startswith("https://github.com/") and source["what"]
        text = (folder / source["file"]).read_text()
        assert [s.text for s in mode.signs if s.text in text], source["file"]


# The same words for other GPUs, as their threads and files have them.
OTHER_GPUS = [
    # zai-org/GLM-4.5#47: 8x H20 (capability 90), GLM-4.5-FP8 on vLLM
    ("fp8-moe-cutlass-sm120", "RuntimeError: Worker failed with error 'No compiled get_cutlass_moe_mm_data: no "
     "cutlass_scaled_mm kernel for CUDA device capability: 90. Required capability: 90 or 100'"),
    # vllm PR#20086: B200 (capability 100)
    ("fp8-moe-cutlass-sm120", "NotImplementedError: No compiled get_cutlass_moe_mm_data: no cutlass_scaled_mm kernel "
     "for CUDA device capability: 100. Required capability: 90"),
    # vllm#9419: capability 75
    ("fp8-moe-cutlass-sm120", "NotImplementedError: Error in calling custom op cutlass_scaled_mm: No compiled "
     "cutlass_scaled_mm for a compute capability less than CUDA device capability: 75"),
    # flashinfer-python 0.6.5, flashinfer/data/include/flashinfer/gemm/fp4_gemm_template_sm100.h line 278
    ("nvfp4-cutlass-crash", 'std::string errMsg = "Failed to run cutlass FP4 gemm on sm100. Error: " +'),
]


@pytest.mark.parametrize("name, line", OTHER_GPUS)
def test_no_sign_for_other_gpus(name: str, line: str) -> None:
    assert [s.text for s in _mode(name).signs if s.text in line] == []
