"""The CUDA wheels people install, whole, read by patchkit beside NVIDIA's cuobjdump 13.4 run on them
(``make check-kernels``; fetched once by pip and cached, like sglang-kernel's): every shared object of
nvidia-cufft 12.0.0.61, nvidia-nccl-cu13 2.28.9, cupy-cuda13x 14.2.0 and vllm 0.20.2, entry by entry;
kernels over them for an H200 (9.0) and the SM12x GPUs; vLLM 0.20.2 installed by pip, judged by doctor
for a GB10 (12.1); Triton 3.5.1 and 3.6.0 installed by pip, their bundled ptxas asked what it knows.
``test_wheels.py`` does the same in ``make test`` on small copies of some of these files."""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from oracle import cuobjdump, headers, lists, wheel
from test_fatbin import as_cuobjdump
from test_wheels import as_listed

from patchkit.kernels.fatbin import EXECUTABLE, RELOCATABLE, read_binary
from support.cli import invoke
from support.venvs import make_venv, pip_install

WHEELS = {  # distribution: (version, platform)
    "nvidia-cufft": ("12.0.0.61", "manylinux2014_x86_64"),
    "nvidia-nccl-cu13": ("2.28.9", "manylinux_2_18_x86_64"),
    "cupy-cuda13x": ("14.2.0", "manylinux2014_x86_64"),
    "vllm": ("0.20.2", "manylinux_2_35_x86_64"),
}
SHARED = re.compile(r"\.so(\.\d+)*$")
_UNPACKED: dict[str, list[Path]] = {}


def unpacked(distribution: str, factory) -> list[Path]:
    """Every shared object of the wheel, unzipped once per session."""
    if distribution not in _UNPACKED:
        version, platform = WHEELS[distribution]
        dest = factory.mktemp(distribution)
        found = []
        with zipfile.ZipFile(wheel(distribution, version, platform)) as zf:
            for name in zf.namelist():
                if SHARED.search(name):
                    target = dest / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(name) as src, open(target, "wb") as out:
                        while chunk := src.read(1 << 20):
                            out.write(chunk)
                    found.append(target)
        _UNPACKED[distribution] = sorted(found)
    return _UNPACKED[distribution]


@pytest.mark.parametrize("distribution", sorted(WHEELS))
def test_every_shared_object_as_cuobjdump(distribution: str, tmp_path_factory) -> None:
    files = unpacked(distribution, tmp_path_factory)
    assert files
    for so in files:
        b = read_binary(str(so))
        assert b.problem is None, so
        if not b.entries:  # cuobjdump: "does not contain device code"
            done = subprocess.run([str(cuobjdump()), "-all", str(so)], capture_output=True, text=True, timeout=600)
            assert "Fatbin" not in done.stdout, so
            continue
        assert as_cuobjdump([e for e in b.entries if e.section == EXECUTABLE]) == headers(so), so
        assert sorted(as_cuobjdump(b.entries)) == sorted(headers(so, "-all")), so
        assert (as_listed(b.sass()), as_listed(b.ptx())) == lists(so), so
        elf, ptx = lists(so, "-all")
        assert elf | ptx == as_listed(b.sass()) | as_listed(b.ptx()) | {e.listed for e in b.entries if e.section == RELOCATABLE}, so


def test_a_cuda_13_environment_exits_0(tmp_path_factory) -> None:
    files = [str(p) for d in ("nvidia-cufft", "nvidia-nccl-cu13", "cupy-cuda13x") for p in unpacked(d, tmp_path_factory)]
    for ccs in (["9.0"], ["12.0", "12.1"]):
        done = invoke("kernels", *files, *(a for cc in ccs for a in ("--to-cc", cc)), "--json")
        doc = json.loads(done.stdout)
        assert (done.returncode, doc["ok"]) == (0, True), [f["path"] for f in doc["files"] if f["verdict"] == "none"]
        cufft = [f for f in doc["files"] if Path(f["path"]).name in ("libcufft.so.12", "libcufftw.so.12")]
        assert [(f["verdict"], [g["why"] for g in f["gpus"]]) for f in cufft] == [("unknown", ["not-registered"] * len(ccs))] * 2


@pytest.fixture(scope="module")
def vllm_venv(tmp_path_factory) -> Path:
    venv = make_venv(tmp_path_factory.mktemp("vllm") / "V")
    pip_install(venv / "bin" / "python", str(wheel("vllm", *WHEELS["vllm"])))
    return venv


def test_doctor_on_vllm_for_a_gb10_says_one_thing(vllm_venv: Path) -> None:
    python = str(vllm_venv / "bin" / "python")
    done = invoke("doctor", "--python", python, "--to-cc", "12.1")
    lines = done.stdout.decode().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("compiled CUDA code"))
    section = lines[start:lines.index("", start)]
    assert section[:2] == [f"compiled CUDA code for 12.1 (1 distribution of {python} carries it):",
                           "  vllm 0.20.2: every file with CUDA code runs on 12.1 (7 files with CUDA code, 2 without)"]
    assert not any("do:" in line or "cannot run" in line for line in section)
    kernels = invoke("kernels", "--python", python, "--to-cc", "12.1")
    text = kernels.stdout.decode()
    assert kernels.returncode == 0, text
    assert ("    vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so: sm_90a: no code for 12.1 (FA3: used on 9.x GPUs only "
            "(vllm/vllm_flash_attn/flash_attn_interface.py)) (not loaded on these GPUs)") in text.splitlines()
    assert "  DeepGEMM bundled in vllm 0.20.2: DeepGEMM JIT, compiles with " in text


@pytest.mark.parametrize("version, sm121a", [("3.5.1", False), ("3.6.0", True)])
def test_triton_and_its_bundled_ptxas(version: str, sm121a: bool, tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "V")
    pip_install(venv / "bin" / "python", str(wheel("triton", version, "manylinux_2_27_x86_64")))
    doc = json.loads(invoke("kernels", "--python", str(venv / "bin" / "python"), "--to-cc", "12.0", "--to-cc", "12.1", "--json").stdout)
    (triton,) = doc["jit"]
    assert [(g["verdict"], g["target"], g["compiler"]["knows_target"]) for g in triton["gpus"]] == [
        ("builds", "sm_120a", True), ("builds" if sm121a else "compiler-lacks", "sm_121a", sm121a)]
    assert triton["gpus"][1]["compiler"]["tool"] == ("ptxas-blackwell" if version == "3.6.0" else "ptxas")
