"""What vLLM loads at every start, read from the release's own imports (``kernels/imports.py``), on
sparse copies of the vllm 0.34.0 wheel (``fixtures.py``: its twelve shared objects, RECORD's rows for
them, and the Python files patchkit reads there, whole) and the Python files of the vllm 0.20.2
source archive (cached once per test run).

0.34.0 has no ``vllm/_C.abi3.so``: ``vllm/platforms/cuda.py`` imports ``vllm._C_stable_libtorch`` and
its ``import_kernels`` ``vllm._moe_C_stable_libtorch``; ``_deepselect_C.abi3.so`` (``sm_100f`` only)
is imported by the DSA indexer alone.  doctor once said "vLLM imports vllm._C at every start", told
the user to install a wheel "whose vllm/_C.abi3.so" has code for 12.1, and exited 1 on every machine
with SM12x GPUs, whatever was applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures import install_release

from patchkit.kernels.imports import importers, start_imports
from support.cli import invoke
from support.venvs import make_venv

START_034 = ("vLLM imports _C_stable_libtorch.abi3.so and _moe_C_stable_libtorch.abi3.so at every start on CUDA "
             "(vllm/platforms/cuda.py)")


def gpus(tmp_path: Path, machine: str) -> dict:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpus"))
    from standin import standin

    return standin(tmp_path / "smi", machine)


@pytest.fixture(scope="module")
def venv034(tmp_path_factory) -> Path:
    """A virtualenv with vllm 0.34.0 as pip installs it: its shared objects (sparse copies), the Python
    files patchkit reads, RECORD's rows of its shared objects, and METADATA."""
    venv = make_venv(tmp_path_factory.mktemp("v034") / "V")
    install_release("vllm-0.34.0", site_of(venv))
    return venv


@pytest.fixture(scope="module")
def venv034_aarch64(tmp_path_factory) -> Path:
    """The same from vllm 0.34.0's aarch64 wheel, the one a GB10 (DGX Spark, an ARM machine) installs: its own
    shared objects (built apart from the x86_64 wheel's) and the same Python files."""
    venv = make_venv(tmp_path_factory.mktemp("v034a") / "V")
    install_release("vllm-0.34.0-aarch64", site_of(venv))
    return venv


def site_of(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def test_the_start_is_read_from_the_release(venv034: Path) -> None:
    start = start_imports(site_of(venv034), "vllm/platforms/cuda.py", "CudaPlatform.import_kernels")
    assert start.problem is None and start.read == ("vllm/platforms/cuda.py",)
    assert {m: w for m, w in start.modules.items() if m.startswith("vllm._")} == {
        "vllm._C_stable_libtorch": "vllm/platforms/cuda.py:23", "vllm._moe_C_stable_libtorch": "vllm/platforms/cuda.py:291"}
    assert importers(site_of(venv034), "vllm._deepselect_C") == (
        "vllm/model_executor/layers/indexer_topk.py", "vllm/models/kimi_k3/nvidia/ops/dcp_topk_merge/__init__.py")


@pytest.mark.network
def test_vllm_020_imports_vllm_c_through_the_base_class(tmp_path: Path) -> None:
    """0.20.2's CudaPlatform is NvmlCudaPlatform or NonNvmlCudaPlatform, neither defining import_kernels:
    Platform's (vllm/platforms/interface.py) imports vllm._C and vllm._moe_C."""
    import tarfile

    from support.mirror import default_cache, fetch_sdist

    site = tmp_path / "site"
    with tarfile.open(fetch_sdist("vllm", "0.20.2", default_cache())) as tar:
        for member in ("vllm/platforms/cuda.py", "vllm/platforms/interface.py"):
            data = tar.extractfile(f"vllm-0.20.2/{member}").read()
            (site / member).parent.mkdir(parents=True, exist_ok=True)
            (site / member).write_bytes(data)
    start = start_imports(site, "vllm/platforms/cuda.py", "CudaPlatform.import_kernels")
    assert start.read == ("vllm/platforms/cuda.py", "vllm/platforms/interface.py")
    assert {m for m in start.modules if m.startswith("vllm._")} == {"vllm._C", "vllm._C_stable_libtorch", "vllm._moe_C"}


def test_doctor_on_a_gb10_names_the_dsa_module_with_its_feature_and_exits_0(venv034: Path, tmp_path: Path) -> None:
    python = str(venv034 / "bin" / "python")
    done = invoke("doctor", "--python", python, env=gpus(tmp_path, "gb10"))
    lines = done.stdout.decode().splitlines()
    start = lines.index(f"compiled CUDA code for 12.1 (1 distribution of {python} carries it):")
    assert lines[start + 1:start + 5] == [
        f"  vllm 0.34.0: 1 of its 8 files with CUDA code cannot run on 12.1, and it is not loaded at every start: {START_034}; "
        "a start fails only where a feature loads it (below)",
        "    vllm/_deepselect_C.abi3.so: sm_100f: no code for 12.1 (DSA top-k kernels, for DeepSeek sparse-attention models; "
        "imported by vllm/model_executor/layers/indexer_topk.py and vllm/models/kimi_k3/nvidia/ops/dcp_topk_merge/__init__.py only)",
        "    do (if the server loads them): nothing: vLLM's DSA indexer calls DeepSelect on 10.x GPUs only (_has_deep_select in "
        "vllm/model_executor/layers/indexer_topk.py) and another top-k kernel on these",
        "",
    ]
    text = done.stdout.decode()
    assert "vllm/_C.abi3.so" not in text and "vllm._C " not in text and "in what the server loads" not in text
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=gpus(tmp_path, "gb10")).stdout)
    code = doc["compiled_code"]
    assert (code["no_code"], code["no_code_if_loaded"], code["distributions"][0]["always"]) == (
        [], ["vllm 0.34.0 (_deepselect_C.abi3.so)"], START_034)
    (dsa,) = [f for f in code["distributions"][0]["files"] if f["imported_by"]]
    assert dsa["path"] == "vllm/_deepselect_C.abi3.so"


def test_a_start_module_without_code_fails_and_names_the_files_of_this_release(venv034: Path, tmp_path: Path) -> None:
    """For a V100 (7.0) the files vLLM loads at every start have no code (sm_75 and up, PTX compute_80):
    doctor exits 1, and the remedy names those files, not a _C.abi3.so that 0.34.0 does not have."""
    python = str(venv034 / "bin" / "python")
    done = invoke("doctor", "--python", python, "--to-cc", "7.0")
    assert done.returncode == 1, done.stdout.decode()
    lines = done.stdout.decode().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  vllm 0.34.0: "))
    assert lines[at] == f"  vllm 0.34.0: 5 of its 8 files with CUDA code cannot run on 7.0; {START_034}"
    assert lines[at + 1].startswith("    vllm/_C_stable_libtorch.abi3.so: sm_75, sm_80, ")
    assert lines[at + 1].endswith(": no code for 7.0 (sm_75 needs 7.5 or later)")
    assert lines[at + 3] == ("    vllm/_flashkda_C.abi3.so: sm_90a, sm_100f, sm_120f: no code for 7.0 (imported by "
                             "vllm/models/glm5next/common/kda.py and vllm/models/kimi_k3/nvidia/kda.py only)")
    assert lines[at + 4] == ("    vllm/_moe_C_stable_libtorch.abi3.so: sm_75, sm_80, sm_86, sm_89, sm_90, sm_100, sm_100f, sm_120, "
                             "PTX compute_80: no code for 7.0 (sm_75 needs 7.5 or later) (MoE ops)")
    assert lines[at + 6] == ("    do: install a vLLM built for sm_70 (a wheel whose vllm/_C_stable_libtorch.abi3.so and "
                             "vllm/_moe_C_stable_libtorch.abi3.so `patchkit kernels` shows with code for 7.0), or build it from "
                             "source with TORCH_CUDA_ARCH_LIST=\"7.0\"")
    assert lines[-1] == ("no code for GPUs of cc 7.0 in what the server loads: vllm 0.34.0 (_C_stable_libtorch.abi3.so, "
                         "_moe_C_stable_libtorch.abi3.so); no patch adds it (what to do is above)")


def test_the_aarch64_wheel_a_gb10_installs_is_judged_from_its_own_files(venv034: Path, venv034_aarch64: Path,
                                                                        tmp_path: Path) -> None:
    """vLLM's aarch64 wheel targets other GPUs than its x86_64 twin: its two start modules carry sm_87 and sm_110
    (Jetson Orin, Thor) and no sm_75.  Read from its own ELF files, on a GB10 it runs as the x86_64 wheel does:
    kernels differs in those two lines only, and doctor says the same, word for word, and exits the same."""
    env = gpus(tmp_path, "gb10")
    said = {}
    for arch, venv in (("x86_64", venv034), ("aarch64", venv034_aarch64)):
        python = str(venv / "bin" / "python")
        kernels, doctor = invoke("kernels", "--python", python, env=env), invoke("doctor", "--python", python, env=env)
        # kernels: 1, a file without code for 12.1 (_deepselect_C); doctor: 5, the settings a GB10 needs with vLLM
        # 0.34.0 (VLLM_USE_DEEP_GEMM=0, TRITON_ATTN, the memory)
        assert (kernels.returncode, doctor.returncode) == (1, 5), doctor.stdout.decode()
        said[arch] = [out.stdout.decode().replace(str(venv), "VENV").splitlines() for out in (kernels, doctor)]
    (x86, x86_doctor), (arm, arm_doctor) = said["x86_64"], said["aarch64"]
    assert arm_doctor == x86_doctor
    assert len(arm) == len(x86) and [(a, b) for a, b in zip(x86, arm, strict=True) if a != b] == [
        ("    vllm/_C_stable_libtorch.abi3.so: sm_75, sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_100f, sm_120, sm_120f, "
         "PTX compute_80, compute_89, compute_90: runs on 12.1 (sm_120, sm_120f)",
         "    vllm/_C_stable_libtorch.abi3.so: sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a, sm_100, sm_100f, sm_110, sm_110f, "
         "sm_120, sm_120f, PTX compute_80, compute_89, compute_90: runs on 12.1 (sm_120, sm_120f)"),
        ("    vllm/_moe_C_stable_libtorch.abi3.so: sm_75, sm_80, sm_86, sm_89, sm_90, sm_100, sm_100f, sm_120, PTX compute_80: "
         "runs on 12.1 (sm_120) (MoE ops)",
         "    vllm/_moe_C_stable_libtorch.abi3.so: sm_80, sm_87, sm_89, sm_90, sm_100, sm_100f, sm_110, sm_120, PTX compute_80: "
         "runs on 12.1 (sm_120) (MoE ops)")]
