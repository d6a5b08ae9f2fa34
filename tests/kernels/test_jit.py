"""FlashInfer, DeepGEMM and Triton judged from their installed sources and the compiler they would
call (``kernels/jit.py``, ``judge/jit.py``).  The sources: FlashInfer's real wheels (cached, as the
mirror tests fetch them); the names of DeepGEMM's kernel templates as vLLM 0.27.1 and 0.34.0 bundle
them (data/jit/, listed from those wheels); Triton's ``knobs.py`` line that names ptxas-blackwell
(3.6.0's).  The compilers: stand-ins that print what the real ones print for ``--version`` and
``--help`` (data/tools/: nvcc and ptxas of the nvidia-cuda-nvcc 13.0.88 wheel, the ptxas of Triton
3.5.1 and the ptxas and ptxas-blackwell of Triton 3.6.0), and fail on anything else: patchkit never
asks a compiler to compile."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from gpus.standin import TOOLS
from gpus.standin import tool as standin

from patchkit.cc import CC
from patchkit.judge.jit import (
    BUILDS,
    COMPILER_LACKS,
    MODULES_LEAVE_OUT,
    NO_COMPILER,
    NO_IMPLS,
    NOT_A_TARGET,
    REFUSES,
    SOME,
    jit_here,
)
from patchkit.kernels.jit import allowed_targets, jit_installs
from patchkit.render.jit import jit_lines
from support.cli import invoke
from support.venvs import make_venv

DATA = Path(__file__).resolve().parent / "data"
# triton/knobs.py of Triton 3.6.0 (line 492), the line patchkit reads to know that ptxas-blackwell is used from 10.0 on.
BLACKWELL_LINE = '    ptxas_blackwell: env_nvidia_tool = env_nvidia_tool("ptxas-blackwell")\n'
def no_cuda(tmp_path: Path, nvcc: str | None = "nvcc-13.0.88") -> dict:
    """An environment whose PATH has a stand-in nvcc (or none) and no CUDA_HOME."""
    bin_dir = tmp_path / "cuda-bin"
    bin_dir.mkdir(exist_ok=True)
    if nvcc:
        standin(bin_dir / "nvcc", nvcc)
    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvcc").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH")}
    return env | {"PATH": os.pathsep.join([str(bin_dir), *keep])}


def dist_info(site: Path, name: str) -> None:
    """A dist-info whose RECORD lists no shared object (the libraries' own files are not what is judged here)."""
    (site / f"{name}.dist-info").mkdir(parents=True)
    (site / f"{name}.dist-info" / "RECORD").write_text(f"{name}.dist-info/METADATA,,\n")


def flashinfer(site: Path, version: str) -> None:
    from oracle import wheel

    with zipfile.ZipFile(wheel("flashinfer-python", version, "any")) as zf:
        for name in zf.namelist():
            if name.startswith("flashinfer/") and name.endswith(".py"):
                (site / name).parent.mkdir(parents=True, exist_ok=True)
                (site / name).write_bytes(zf.read(name))
    dist_info(site, f"flashinfer_python-{version}")


def triton(site: Path, version: str) -> None:
    package = site / "triton"
    (package / "backends" / "nvidia" / "bin").mkdir(parents=True)
    blackwell = version == "3.6.0"
    (package / "knobs.py").write_text(BLACKWELL_LINE if blackwell else "")
    standin(package / "backends" / "nvidia" / "bin" / "ptxas", f"triton-{version}-ptxas")
    if blackwell:
        standin(package / "backends" / "nvidia" / "bin" / "ptxas-blackwell", f"triton-{version}-ptxas-blackwell")
    dist_info(site, f"triton-{version}")


def deep_gemm_in_vllm(site: Path, version: str) -> None:
    impls = site / "vllm" / "third_party" / "deep_gemm" / "include" / "deep_gemm" / "impls"
    impls.mkdir(parents=True)
    for name in (DATA / "jit" / f"vllm-{version}-deep_gemm-impls.txt").read_text().split():
        (impls / name).touch()
    dist_info(site, f"vllm-{version}")


def test_the_targets_a_compiler_knows() -> None:
    def known(name: str, option: str) -> tuple:
        return allowed_targets((TOOLS / f"{name}.help.txt").read_text(), option)

    ptxas351 = known("triton-3.5.1-ptxas", "--gpu-name")
    assert "sm_120a" in ptxas351 and "sm_121a" not in ptxas351 and "sm_121" not in ptxas351
    assert {"sm_120a", "sm_120f", "sm_121a", "sm_121f"} <= set(known("triton-3.6.0-ptxas-blackwell", "--gpu-name"))
    assert {"sm_120f", "sm_121a", "sm_90a"} <= set(known("nvcc-13.0.88", "--gpu-architecture"))
    assert set(known("ptxas-13.0.88", "--gpu-name")) >= {"sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f"}
    assert allowed_targets((TOOLS / "nvcc-13.0.88.help.txt").read_text(), "--no-such-option") is None


def test_triton_351_cannot_build_for_a_gb10(tmp_path: Path) -> None:
    """Triton 3.5.1's bundled ptxas (CUDA 12.8) answers "Value 'sm_121a' is not defined for option
    'gpu-name'" (shared fixture triton-ptxas-sm_121a.txt): its --help lists no sm_121a."""
    site = tmp_path / "site"
    triton(site, "3.5.1")
    (j,) = jit_here(jit_installs([site], no_cuda(tmp_path)), [CC(12, 0), CC(12, 1)])
    assert [(f.verdict, f.target, f.why, f.compiler.tool, f.compiler.release) for f in j.fits] == [
        (BUILDS, "sm_120a", None, "ptxas", "12.8"), (COMPILER_LACKS, "sm_121a", NOT_A_TARGET, "ptxas", "12.8")]
    ptxas = site / "triton" / "backends" / "nvidia" / "bin" / "ptxas"
    assert jit_lines(j) == [
        f"  triton 3.5.1: Triton JIT, compiles with ptxas 12.8 ({ptxas}, bundled with Triton)",
        "    12.0: builds sm_120a",
        f"    12.1: cannot build sm_121a: ptxas 12.8 ({ptxas}) does not know it; Triton calls the ptxas $TRITON_PTXAS_PATH names instead",
    ]
    # Triton takes $TRITON_PTXAS_PATH first: a ptxas of CUDA 13.0 knows sm_121a.
    env = no_cuda(tmp_path) | {"TRITON_PTXAS_PATH": str(standin(tmp_path / "cu13" / "ptxas", "ptxas-13.0.88"))}
    (j,) = jit_here(jit_installs([site], env), [CC(12, 1)])
    assert [(f.verdict, f.compiler.chosen_by, f.compiler.release) for f in j.fits] == [(BUILDS, "$TRITON_PTXAS_PATH", "13.0")]


def test_triton_360_uses_ptxas_blackwell_from_10(tmp_path: Path) -> None:
    site = tmp_path / "site"
    triton(site, "3.6.0")
    (j,) = jit_here(jit_installs([site], no_cuda(tmp_path)), [CC(9, 0), CC(12, 1)])
    assert [(f.verdict, f.target, f.compiler.tool, f.compiler.release) for f in j.fits] == [
        (BUILDS, "sm_90a", "ptxas", "12.8"), (BUILDS, "sm_121a", "ptxas-blackwell", "12.9")]


@pytest.mark.parametrize("version, targets, modules, leave_out", [
    # before 0.6.7: minor + "a" for every GPU from 9.0 on; the fusion's trtllm_comm module is for [9, 10] only
    ("0.6.4", ("sm_120a", "sm_121a"), 24, 7),
    # 0.6.11 on: 12.0 -> sm_120f, 12.1 -> sm_121a, with CUDA 12.9 or later; trtllm_comm admits 12 (upstream's list)
    ("0.6.17", ("sm_120f", "sm_121a"), 44, 16),
])
@pytest.mark.network
def test_flashinfer(tmp_path: Path, version: str, targets: tuple, modules: int, leave_out: int) -> None:
    site = tmp_path / "site"
    flashinfer(site, version)
    (j,) = jit_here(jit_installs([site], no_cuda(tmp_path)), [CC(12, 0), CC(12, 1)])
    assert [(f.verdict, f.target, f.why) for f in j.fits] == [(SOME, t, MODULES_LEAVE_OUT) for t in targets]
    assert (j.install.sources.modules, len(j.fits[0].names)) == (modules, leave_out)
    assert ("gen_trtllm_comm_module" in j.fits[0].names) == (version == "0.6.4")
    assert "gen_cutlass_fused_moe_sm100_module" in j.fits[0].names
    assert jit_lines(j)[1] == (f"    12.0: builds {targets[0]}, but {leave_out} of its {modules} modules leave major 12 out of "
                               f"supported_major_versions (gen_cutlass_fused_moe_sm100_module, gen_cutlass_fused_moe_sm103_module, "
                               f"{j.fits[0].names[2]}, {j.fits[0].names[3]} and {leave_out - 4} more)")
    # $CUDA_HOME first: FlashInfer calls the nvcc there, and there is none.
    (none,) = jit_here(jit_installs([site], no_cuda(tmp_path) | {"CUDA_HOME": str(tmp_path / "no-cuda")}), [CC(12, 0)])
    assert (none.fits[0].verdict, none.fits[0].compiler.chosen_by) == (NO_COMPILER, "$CUDA_HOME")
    assert jit_lines(none)[1] == f"    12.0: cannot build: no nvcc at {tmp_path}/no-cuda/bin/nvcc"


@pytest.mark.network
def test_flashinfer_074_builds_sm_121a_for_a_gb10(tmp_path: Path) -> None:
    """0.7.4's _normalize_cuda_arch: 12.0 -> "0f" with CUDA 12.9 ("0a" with 12.8), 12.1 -> str(minor) + "a" with
    12.9.  It holds the 0.6.7 form's lines too (`if is_cuda_version_at_least("12.9"): return (major, "0f")`), which
    once made doctor say "12.1: builds sm_120f" beside the fix's "FlashInfer's JIT build of sm_121a"."""
    site = tmp_path / "site"
    flashinfer(site, "0.7.4")
    (j,) = jit_here(jit_installs([site], no_cuda(tmp_path)), [CC(12, 0), CC(12, 1)])
    assert j.install.sources.form.release == "0.7.4"
    assert [(f.verdict, f.target, f.compiler.release) for f in j.fits] == [(SOME, "sm_120f", "13.0"), (SOME, "sm_121a", "13.0")]
    # Each get_nvcc_flags_list call is owned by the function that holds it: gen_gemm_sm120_module passes [12]
    # (jit/gemm/core.py:703), and the helper after it, _trtllm_gen_gemm_nvcc_flags ([10], line 724), stands for
    # the two gen_* functions that call it; cake_gemm_allreduce.py's nvcc_flags ((10,), a module constant) is
    # called by no gen_* function and is named after its file.
    assert j.fits[0].names == j.fits[1].names == (
        "cake_gemm_allreduce.nvcc_flags", "gen_allreduce_mhc_post_prenorm_module", "gen_blackwell_softmax_module",
        "gen_cake_router_gemm_module", "gen_cutlass_fused_moe_sm100_module", "gen_cutlass_fused_moe_sm103_module",
        "gen_fmha_cutlass_sm100a_module", "gen_gemm_sm100_module", "gen_gemm_sm100_module_cutlass_bf16",
        "gen_gemm_sm100_module_cutlass_fp4", "gen_gemm_sm100_module_cutlass_fp8", "gen_gemm_sm100_module_cutlass_mxfp8",
        "gen_gemm_sm100_module_cutlass_nvfp4_svdquant", "gen_gemm_sm103_module_cutlass_fp4",
        "gen_mhc_pre_big_fuse_with_norm_module", "gen_mixed_comm_module", "gen_mla_module", "gen_mla_swa_sm90_module",
        "gen_qsa_nvfp4_module", "gen_selective_state_update_module", "gen_selective_state_update_sm90_module",
        "gen_trtllm_gen_gemm_module", "gen_trtllm_low_latency_gemm_module", "gen_trtllm_mnnvl_comm_module")
    core = (site / "flashinfer" / "jit" / "gemm" / "core.py").read_text()
    start = core.index("def gen_gemm_sm120_module()")
    assert "supported_major_versions=[12,]" in "".join(core[start:core.index("\ndef ", start)].split())
    leave_out = ("(cake_gemm_allreduce.nvcc_flags, gen_allreduce_mhc_post_prenorm_module, gen_blackwell_softmax_module, "
                 "gen_cake_router_gemm_module and 20 more)")
    assert jit_lines(j)[1:] == [
        f"    12.0: builds sm_120f, but 24 of its 65 modules leave major 12 out of supported_major_versions {leave_out}",
        f"    12.1: builds sm_121a, but 24 of its 65 modules leave major 12 out of supported_major_versions {leave_out}",
    ]
    # 0.6.7, the form whose lines 0.7.4 also holds: sm_120f for both.
    old = tmp_path / "old"
    flashinfer(old, "0.6.7")
    (j,) = jit_here(jit_installs([old], no_cuda(tmp_path)), [CC(12, 1)])
    assert (j.install.sources.form.release, j.fits[0].target) == ("0.6.7", "sm_120f")


def test_deep_gemm_bundled_in_vllm(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    deep_gemm_in_vllm(old, "0.27.1")
    deep_gemm_in_vllm(new, "0.34.0")
    (j,) = jit_here(jit_installs([old], no_cuda(tmp_path)), [CC(9, 0), CC(10, 0), CC(12, 0), CC(12, 1)])
    assert [(f.verdict, f.why) for f in j.fits] == [(BUILDS, None), (BUILDS, None), (REFUSES, NO_IMPLS), (REFUSES, NO_IMPLS)]
    assert j.label == "DeepGEMM bundled in vllm 0.27.1" and j.fits[2].names == ("sm90", "sm100")
    assert jit_lines(j)[3] == ("    12.0: nothing to build: its kernel templates are for sm90, sm100 only (include/deep_gemm/impls), "
                               "so its APIs assert \"Unsupported architecture\" on 12.0")
    (j,) = jit_here(jit_installs([new], no_cuda(tmp_path)), [CC(12, 1)])
    assert [(f.verdict, len(f.names)) for f in j.fits] == [(BUILDS, 11)]


def test_kernels_python_shows_them_without_counting_them(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "V")
    site = next((venv / "lib").glob("python3*")) / "site-packages"
    triton(site, "3.5.1")
    deep_gemm_in_vllm(site, "0.27.1")
    env = no_cuda(tmp_path)
    done = invoke("kernels", "--python", str(venv / "bin" / "python"), "--to-cc", "12.1", env=env)
    assert done.returncode == 0, done.stdout  # said, not counted: vLLM calls its DeepGEMM on 9.0 and 10.x only (0.20.2)
    lines = done.stdout.decode().splitlines()
    assert lines[:2] == [f"{venv}/bin/python: 0 distributions with CUDA code for 12.1 (--to-cc)",
                         "compiled at the first start (JIT), by what their sources admit and the compiler they call "
                         "(used only where a server calls them; not counted in the exit code): 2 libraries"]
    assert "    12.1: cannot build sm_121a: ptxas 12.8 (" in lines[-1]
    assert lines[2].startswith("  DeepGEMM bundled in vllm 0.27.1: DeepGEMM JIT, compiles with nvcc 13.0 (") and "cuda-bin/nvcc, PATH)" in lines[2]
    doc = json.loads(invoke("kernels", "--python", str(venv / "bin" / "python"), "--to-cc", "12.0", "--json", env=env).stdout)
    assert (doc["ok"], [(j["library"], j["verdict"]) for j in doc["jit"]]) == (True, [("deep-gemm", "refuses"), ("triton", "builds")])
    assert doc["jit"][1]["gpus"][0]["compiler"]["knows_target"] is True
