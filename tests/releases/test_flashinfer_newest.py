"""What the FlashInfer-facing fixes and speed-ups do on flashinfer-python 0.7.4, the newest on the index
and newer than every FlashInfer range of the data (docs/RELEASES.md): the real wheel installed by pip,
with the stand-in nvidia-smi of 8 x RTX PRO 6000 on PCIe and of one GB10.

- allreduce-fusion: its FlashInfer rule carries FlashInfer PR 3903, upstream since 0.6.17; 0.7.4's files
  hold it (``supported_major_versions=[9, 10, 12]`` in flashinfer/jit/comm.py), so it is "in effect (the
  release has it)" and apply writes nothing (rule 1); what it needs of the machine (nvcc for the JIT build:
  0.7.4 builds sm_120f for 12.0 with CUDA 12.9 or later, sm_120a with 12.8, and sm_121a for 12.1) is still said.
- sglang-pcie-ipc-allreduce (known-speedups.toml, FlashInfer ``since = "0.7.0"``): 0.7.4 still holds
  flashinfer/comm/pcie_ipc_ar.py with PcieIpcAllReduceWorkspace, which the advice names (rule 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpus.standin import standin, tool

from patchkit.digest import sha256
from support.cli import invoke, split_modes

GB10, RTX8 = "gb10", "rtxpro6000-8pcie"
BUILD = {RTX8: ("12.0", "CUDA 12.8 or later and nvcc, for FlashInfer's JIT build of sm_120f, or sm_120a with CUDA 12.8 (trtllm_comm.so)"),
         GB10: ("12.1", "CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_121a (trtllm_comm.so)")}
GPU = {RTX8: "SM120", GB10: "SM121"}  # the GPUs judged, as the need line names them (it said SM120 on a GB10 too)


def out(done) -> list[str]:
    """doctor's lines but its failure modes (tests/fixes/test_modes.py holds those)."""
    return split_modes(done.stdout.decode().splitlines())[0]


@pytest.fixture
def venv_of(prebuilt):
    """Wheels (name, version) -> the run's virtualenv with those real wheels installed.  Not copied (0.7.4
    installs some 300 MB): nothing here may write to it, and what could be written is checked unchanged."""
    from support.mirror import default_cache, fetch_wheel

    def make(*wheels: tuple[str, str]) -> Path:
        return prebuilt.venv(*(fetch_wheel(version, default_cache(), name) for name, version in wheels))

    return make


def written(site: Path) -> tuple:
    """What an apply of allreduce-fusion to FlashInfer could change: the eight files of FlashInfer PR 3903 (as its
    shipped patches name them, below site-packages), and the folders a state dir or a lock would appear in."""
    files = ["flashinfer/data/csrc/trtllm_allreduce.cu", "flashinfer/aot.py", "flashinfer/comm/trtllm_ar.py",
             "flashinfer/jit/comm.py", *(f"flashinfer/data/include/flashinfer/comm/{n}.cuh" for n in
                                        ("trtllm_allreduce", "trtllm_allreduce_fusion", "trtllm_moe_allreduce_fusion")),
             "flashinfer/data/include/flashinfer/utils.cuh"]
    return sorted(p.name for p in site.iterdir()), sorted(p.name for p in (site / "flashinfer").iterdir()), \
        {rel: sha256((site / rel).read_bytes()) for rel in files}


def machine(tmp_path: Path, name: str) -> dict:
    """The stand-in nvidia-smi, no nvcc on PATH, and $CUDA_HOME a folder without one: FlashInfer's JIT
    finds no compiler whatever this host has installed."""
    return {**standin(tmp_path / "smi", name), "CUDA_HOME": str(tmp_path / "cuda")}


def test_the_wheel_holds_what_the_data_expects() -> None:
    """The facts the verdicts below rest on, read in the wheel itself."""
    from support.mirror import wheel_zip

    wheel = wheel_zip("0.7.4", "flashinfer-python")
    comm = wheel.read("flashinfer/jit/comm.py").decode()
    ipc = wheel.read("flashinfer/comm/pcie_ipc_ar.py").decode()
    init = wheel.read("flashinfer/comm/__init__.py").decode()
    start = comm.index("def gen_trtllm_comm_module")
    assert "supported_major_versions=[9, 10, 12]" in comm[start:comm.index("def ", start + 4)]
    assert "class PcieIpcAllReduceWorkspace" in ipc and "PcieIpcAllReduceWorkspace as PcieIpcAllReduceWorkspace" in init


@pytest.mark.parametrize("gpus", [RTX8, GB10])
def test_allreduce_fusion_on_flashinfer_074(tmp_path: Path, venv_of, gpus: str) -> None:
    venv = venv_of(("flashinfer-python", "0.7.4"))
    python = str(venv / "bin" / "python")
    site = next((venv / "lib").glob("python3*/site-packages"))
    env = machine(tmp_path, gpus)
    cc, build = BUILD[gpus]
    head = f"{site}/flashinfer: FlashInfer 0.7.4 (installed), from flashinfer_python-0.7.4.dist-info"

    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    at = lines.index(head)
    assert lines[at:] == [
        head,
        "  allreduce-fusion (opt-in): in effect (the release has it)",
        f"    it needs {build}: no nvcc at {tmp_path}/cuda/bin/nvcc ($CUDA_HOME); FlashInfer cannot build the comm module for {GPU[gpus]}",
        "",
        f"compiled CUDA code: no distribution installed for {python} carries any",
        "compiled at the first start (JIT), by what their sources admit and the compiler they call "
        "(used only where a server calls them; not counted in the exit code): 1 library",
        f"  flashinfer-python 0.7.4: FlashInfer JIT, compiles with nvcc, none at {tmp_path}/cuda/bin/nvcc ($CUDA_HOME)",
        f"    {cc}: cannot build: no nvcc at {tmp_path}/cuda/bin/nvcc",
        "",
        "nothing this machine needs is missing",
    ]
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    (fusion,) = doc["targets"][0]["fixes"]
    assert (fusion["fix"], fusion["status"], fusion["reason"], fusion["needed"], doc["needed"], doc["exit_code"]) == (
        "allreduce-fusion", "in effect", "in-release", False, [], 0)

    before = written(site)
    done = invoke("verify", "--python", python, env=env)
    assert (done.returncode, out(done)[2:]) == (0, [
        head, "verify: ok, nothing to patch: deepgemm-sm12x, fusion-self-enable, torch-symm-mem change nothing in "
        "FlashInfer 0.7.4; not checked: allreduce-fusion (--all-fixes)"]), done.stdout.decode()
    done = invoke("verify", "--python", python, "--fix", "allreduce-fusion", env=env)
    assert (done.returncode, out(done)[2:]) == (0, [head, "nothing to do: FlashInfer already holds key 12 for this machine's GPUs"])

    done = invoke("apply", "--python", python, env=env)
    assert (done.returncode, out(done)) == (0, [
        head, "note: no rule of deepgemm-sm12x, fusion-self-enable, torch-symm-mem patches FlashInfer; allreduce-fusion does (--fix NAME)",
        "nothing to patch: nothing written"])
    done = invoke("apply", "--python", python, "--fix", "allreduce-fusion", env=env)
    assert (done.returncode, out(done)) == (0, [
        head, "note: no shipped patch for FlashInfer 0.7.4", "already upstream (generated from the installed files): nothing written"])
    assert written(site) == before


@pytest.mark.parametrize("gpus", [RTX8, GB10])
def test_the_fusion_and_the_jit_section_find_one_nvcc(tmp_path: Path, venv_of, gpus: str) -> None:
    """nvcc found only through $CUDA_HOME, as FlashInfer's get_cuda_path finds it (nothing on PATH): the fusion's
    need line and the JIT section name the same nvcc (the fusion's said "no nvcc on PATH" beside the JIT
    section's "compiles with nvcc 13.0 (.../cuda/bin/nvcc, $CUDA_HOME)")."""
    venv = venv_of(("flashinfer-python", "0.7.4"))
    python = str(venv / "bin" / "python")
    nvcc = tool(tmp_path / "cuda" / "bin" / "nvcc", "nvcc-13.0.88")
    env = machine(tmp_path, gpus)
    assert str(nvcc.parent) not in env["PATH"].split(":") and env["CUDA_HOME"] == str(tmp_path / "cuda")
    cc, build = BUILD[gpus]
    target = {RTX8: "sm_120f", GB10: "sm_121a"}[gpus]
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    at = lines.index("  allreduce-fusion (opt-in): in effect (the release has it)")
    assert lines[at + 1] == f"    it needs {build}: nvcc is {nvcc} ($CUDA_HOME)"
    at = lines.index(f"  flashinfer-python 0.7.4: FlashInfer JIT, compiles with nvcc 13.0 ({nvcc}, $CUDA_HOME)")
    assert lines[at + 1].startswith(f"    {cc}: builds {target}, but 24 of its 65 modules leave major 12 out")


def test_sglang_0523_with_flashinfer_074_is_told_of_the_pcie_ipc_all_reduce(tmp_path: Path, venv_of) -> None:
    """SGLang 0.5.23 pins FlashInfer 0.7.2; with 0.7.4 the advice still holds (it has PcieIpcAllReduceWorkspace),
    and SGLang's own fusion gate is what keeps allreduce-fusion incomplete there, not FlashInfer."""
    venv = venv_of(("sglang", "0.5.23"), ("flashinfer-python", "0.7.4"))
    python = str(venv / "bin" / "python")
    site = next((venv / "lib").glob("python3*/site-packages"))
    env = machine(tmp_path, RTX8)
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    fusion = next(line for line in lines if line.startswith("  allreduce-fusion (opt-in): incomplete here"))
    assert "sglang/srt/layers/flashinfer_comm_fusion.py:48 in _resolve_backend()" in fusion
    head = f"{site}/flashinfer: FlashInfer 0.7.4 (installed), from flashinfer_python-0.7.4.dist-info"
    assert lines[lines.index(head) + 1] == "  allreduce-fusion (opt-in): in effect (the release has it)"
    at = lines.index("all-reduce on these GPUs (8 x SM120, linked through PCIe only: no NVLink, no multicast): FlashInfer's "
                     "PCIe-IPC all-reduce (pcie_ipc_comm), which SGLang uses for the tensor-parallel all-reduce")
    assert lines[at + 1] == "  SGLang 0.5.23 and FlashInfer 0.7.4 have it: start the server with SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"
    assert lines[-1] == "nothing this machine needs is missing"
