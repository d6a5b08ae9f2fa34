"""The real sglang-kernel 0.4.10 wheel installed by pip beside SGLang 0.5.23 (once per session, read
only): ``kernels --python``, doctor on 8 RTX PRO 6000 (12.0) and on a GB10 (12.1), and diagnose of a
missing kernel image whose frames are in that environment's sgl_kernel."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from oracle import installed_venv

from support.cli import invoke

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gpus"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "logs"))
import real_text as r  # noqa: E402
from standin import no_nvidia_smi, standin  # noqa: E402

COMMON = "sm_80, sm_89, sm_90, sm_90a, sm_100f, sm_120a"
FA3 = "sgl_kernel/flash_ops.abi3.so: sm_80, sm_86, sm_90a"
MLA = "sgl_kernel/flashmla_ops.abi3.so: sm_90a, sm_100f, sm_103a"
ALWAYS = ("SGLang imports sgl_kernel at every start on CUDA (sglang/srt/layers/layernorm.py), which loads its common_ops "
          "(sgl_kernel/load_utils.py)")
FA3_DO = ("    do (if the server loads them): leave --attention-backend fa3 out on these GPUs: sgl_kernel's is_fa3_supported() holds for 8.x and 9.x "
          "GPUs only (sgl_kernel/flash_attn.py), so SGLang does not choose FA3 here by itself")


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    return installed_venv(tmp_path_factory)


def python_of(venv: Path) -> str:
    return str(venv / "bin" / "python")


def test_kernels_lists_each_file_of_the_distribution(venv: Path, tmp_path: Path) -> None:
    done = invoke("kernels", "--python", python_of(venv), "--to-cc", "12.0")
    assert done.returncode == 1, done.stderr
    assert done.stdout.decode().splitlines() == [
        f"{python_of(venv)}: 1 distribution with CUDA code for 12.0 (--to-cc)",
        "  sglang-kernel 0.4.10: 6 files with CUDA code",
        f"    {FA3}: no code for 12.0 (FA3: used with --attention-backend fa3)",
        f"    {MLA}: no code for 12.0 (FlashMLA: used with --attention-backend flashmla)",
        "    sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so: sm_80, sm_90, sm_120a: runs on 12.0 (sm_120a) "
        "(InfLLM-V2 attention: loaded on first use (sgl_kernel/infllm_v2/_loader.py))",
        f"    sgl_kernel/sm100/common_ops.abi3.so: {COMMON}: runs on 12.0 (sm_120a) "
        "(common ops: loaded by `import sgl_kernel` on every GPU but 9.0 (sgl_kernel/load_utils.py))",
        f"    sgl_kernel/sm90/common_ops.abi3.so: {COMMON}: runs on 12.0 (sm_120a) "
        "(common ops for 9.0: loaded by `import sgl_kernel` on 9.0 GPUs only (sgl_kernel/load_utils.py)) (not loaded on these GPUs)",
        f"    sgl_kernel/spatial_ops.abi3.so: {COMMON}: runs on 12.0 (sm_120a) (green-context streams: loaded by sgl_kernel.spatial on first use)",
    ]
    doc = json.loads(invoke("kernels", "--python", python_of(venv), "--json", env=no_nvidia_smi(tmp_path)).stdout)
    assert (doc["ok"], doc["gpus"], doc["note"]) == (True, None, ["no verdict: nvidia-smi is not on PATH (give --to-cc 12.0 to judge for a GPU)"])
    assert [(f["path"], f["distribution"], f["version"], f["sass"], f["ptx"]) for f in doc["files"]][:2] == [
        ("sgl_kernel/flash_ops.abi3.so", "sglang-kernel", "0.4.10", ["sm_80", "sm_86", "sm_90a"], []),
        ("sgl_kernel/flashmla_ops.abi3.so", "sglang-kernel", "0.4.10", ["sm_90a", "sm_100f", "sm_103a"], []),
    ]


def doctor_section(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith("compiled CUDA code"))
    return lines[start:lines.index("", start)]


def test_doctor_on_eight_rtx_pro_6000_names_fa3_with_its_feature_and_exits_0(venv: Path, tmp_path: Path) -> None:
    """flash_ops (FA3) and flashmla_ops have no code for 12.0, but `import sgl_kernel` loads common_ops alone:
    each is named with its feature, and the machine is not failed (it was, exit 1, whatever was applied)."""
    done = invoke("doctor", "--python", python_of(venv), env=standin(tmp_path, "rtxpro6000-8pcie"))
    assert done.returncode == 0, done.stdout.decode()
    lines = done.stdout.decode().splitlines()
    assert doctor_section(lines) == [
        f"compiled CUDA code for 12.0 (1 distribution of {python_of(venv)} carries it):",
        f"  sglang-kernel 0.4.10: 2 of its 6 files with CUDA code cannot run on 12.0, and none of them is loaded at every "
        f"start: {ALWAYS}; a start fails only where a feature loads one (below)",
        f"    {FA3}: no code for 12.0 (FA3: used with --attention-backend fa3)",
        f"    {MLA}: no code for 12.0 (FlashMLA: used with --attention-backend flashmla)",
        FA3_DO,
        "    do (if the server loads them): leave --attention-backend flashmla out on these GPUs: this build of FlashMLA "
        "carries no code for 12.0",
    ]
    assert lines[-1] == ("nothing this machine needs is missing; sglang-kernel 0.4.10 (flash_ops.abi3.so, flashmla_ops.abi3.so) "
                         "cannot run on them, which matters only if the server loads them (above)")
    doc = json.loads(invoke("doctor", "--python", python_of(venv), "--json", env=standin(tmp_path, "rtxpro6000-8pcie")).stdout)
    code = doc["compiled_code"]
    assert (doc["ok"], doc["exit_code"], code["gpus"]) == (True, 0, ["12.0"])
    assert (code["no_code"], code["no_code_if_loaded"]) == ([], ["sglang-kernel 0.4.10 (flash_ops.abi3.so, flashmla_ops.abi3.so)"])
    (sk,) = code["distributions"]
    assert [(f["path"], f["verdict"]) for f in sk["files"]] == [
        ("sgl_kernel/flash_ops.abi3.so", "none"), ("sgl_kernel/flashmla_ops.abi3.so", "none"),
        ("sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so", "sass"), ("sgl_kernel/sm100/common_ops.abi3.so", "sass"),
        ("sgl_kernel/sm90/common_ops.abi3.so", "sass"), ("sgl_kernel/spatial_ops.abi3.so", "sass")]


def test_doctor_on_a_gb10_names_common_ops(venv: Path, tmp_path: Path) -> None:
    done = invoke("doctor", "--python", python_of(venv), env=standin(tmp_path, "gb10"))
    assert done.returncode == 1, done.stderr
    lines = done.stdout.decode().splitlines()
    section = doctor_section(lines)
    assert section[:2] == [f"compiled CUDA code for 12.1 (1 distribution of {python_of(venv)} carries it):",
                           f"  sglang-kernel 0.4.10: 5 of its 6 files with CUDA code cannot run on 12.1; {ALWAYS}"]
    assert (f"    sgl_kernel/sm100/common_ops.abi3.so: {COMMON}: no code for 12.1 (sm_120a runs on 12.0 only) "
            "(common ops: loaded by `import sgl_kernel` on every GPU but 9.0 (sgl_kernel/load_utils.py))") in section
    assert not any("sm90/common_ops" in line for line in section)  # loaded on 9.0 only
    assert section[-1] == (
        "    do: install an sglang-kernel that carries sm_121 in that file (`patchkit kernels` shows what a build carries): "
        "sglang-kernel 0.4.10's aarch64 wheel on PyPI (the one a GB10 installs) carries sm_121a in its common and spatial "
        "ops, its x86_64 wheel sm_120a; SGLang's +cu130 builds (its wheel index for CUDA 13, as SGLang issue 29317 installs "
        "sglang-kernel 0.4.4+cu130) are the ones for sm_121 (SGLang PR 9495: \"Support sm_110 and sm_121 on cuda 130\"); "
        "check a build with `patchkit kernels` before the start")
    # common_ops, which `import sgl_kernel` loads, fails the start; the features' modules are named with them.  The
    # failure mode of a package without code for the GPU says the same of the common ops installed (the x86_64 wheel's).
    assert lines[-2:] == ["no code for these GPUs in what the server loads: sglang-kernel 0.4.10 (common_ops.abi3.so); "
                          "no patch adds it (what to do is above)",
                          "known to break with this install: prebuilt-no-sm12x (the ways out are above)"]
    assert "    do (if the server loads them): leave --attention-backend fa3 out on these GPUs: sgl_kernel's is_fa3_supported() " \
           "holds for 8.x and 9.x GPUs only (sgl_kernel/flash_attn.py), so SGLang does not choose FA3 here by itself" in section


def test_doctor_on_an_h200_finds_code_for_it(venv: Path, tmp_path: Path) -> None:
    done = invoke("doctor", "--python", python_of(venv), env=standin(tmp_path, "h200-1gpu"))
    assert done.returncode == 0, done.stdout.decode()
    assert doctor_section(done.stdout.decode().splitlines()) == [
        f"compiled CUDA code for 9.0 (1 distribution of {python_of(venv)} carries it):",
        "  sglang-kernel 0.4.10: every file with CUDA code runs on 9.0 (6 files with CUDA code)"]


def crash_log(tmp_path: Path, venv: Path) -> Path:
    """SGLang issues 7249 / 9600's traceback (logs/real_text.py), its frames in this environment."""
    log = tmp_path / "server.log"
    log.write_bytes(r.log(r.START, r.LOAD, r.CAPTURE, r.NO_KERNEL).replace(b"/opt/venv", str(venv).encode()))
    return log


def test_diagnose_names_flash_ops(venv: Path, tmp_path: Path) -> None:
    log = crash_log(tmp_path, venv)
    at = len(r.START) + len(r.LOAD) + len(r.CAPTURE) + 1 + r.NO_KERNEL.index(  # the exception's line
        "RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device")
    done = invoke("diagnose", str(log), env=standin(tmp_path, "rtxpro6000-8pcie"))
    assert done.returncode == 1
    assert done.stdout.decode().splitlines()[3:] == [
        f"{log}:{at}: mode: prebuilt-no-sm12x: A prebuilt package carries no code for SM12x (crash; 12.0 and 12.1)",
        f"{log}:{at}: files with no code for this machine's GPUs (12.0, nvidia-smi):",
        f"{log}:{at}:   {FA3.replace(':', ' (sglang-kernel 0.4.10):', 1)}: no code for 12.0 (FA3: used with --attention-backend fa3)",
        f"{log}:{at}:   {MLA.replace(':', ' (sglang-kernel 0.4.10):', 1)}: no code for 12.0 (FlashMLA: used with --attention-backend flashmla)",
        f"1 known SM120 failure in {log}",
    ]
    # Without nvidia-smi (the log read on another machine): every 12.x.
    other = invoke("diagnose", str(log), "--python", python_of(venv), "--json", env=no_nvidia_smi(tmp_path))
    (finding,) = json.loads(other.stdout)["logs"][0]["findings"]
    assert [(k["path"], [g["runs"] for g in k["gpus"]]) for k in finding["kernels"]] == [
        ("sgl_kernel/flash_ops.abi3.so", ["none", "none"]), ("sgl_kernel/flashmla_ops.abi3.so", ["none", "none"]),
        ("sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so", ["sass", "none"]),
        ("sgl_kernel/sm100/common_ops.abi3.so", ["sass", "none"]), ("sgl_kernel/spatial_ops.abi3.so", ["sass", "none"])]
    text = invoke("diagnose", str(log), env=no_nvidia_smi(tmp_path)).stdout.decode().splitlines()
    assert text[3:5] == [f"{log}:{at}: mode: prebuilt-no-sm12x: A prebuilt package carries no code for SM12x (crash; 12.0 and 12.1)",
                         f"{log}:{at}: files with no code for any 12.x GPU (nvidia-smi is not on PATH):"]
