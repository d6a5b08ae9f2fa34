"""patchkit doctor and --to-cc auto, on real wheels in real virtualenvs (sglang 0.5.7, 0.5.9,
0.5.23; flashinfer-python 0.6.4, 0.6.17, installed by pip) and a vLLM 0.33.0 checkout from
the release mirror, with a stand-in nvidia-smi first on PATH (standin.py) for each machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import copy_venv, invoke, make_venv, pip_install, real_mirror
from standin import standin, no_nvidia_smi
from patchkit.digest import sha256
from patchkit.rewrite.evaluate import tables

_BUILT: dict[tuple, Path] = {}
PCIE = ("the communicator will then turn itself off (\"torch symmetric memory multicast operations are not supported\"): "
        "no multicast between PCIe GPUs; the all-reduce stays on NCCL")


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """(sglang, flashinfer) -> a template virtualenv with those real wheels, built once."""
    from patchkit.dev.mirror import default_cache, fetch_wheel

    def build(sglang: str, flashinfer: str | None) -> Path:
        key = (sglang, flashinfer)
        if key not in _BUILT:
            venv = make_venv(tmp_path_factory.mktemp("doctor-venv") / "V")
            wheels = [fetch_wheel(sglang, default_cache())]
            if flashinfer:
                wheels.append(fetch_wheel(flashinfer, default_cache(), "flashinfer-python"))
            pip_install(venv / "bin" / "python", *map(str, wheels))
            _BUILT[key] = venv
        return _BUILT[key]

    return build


def env_of(tmp_path: Path, venvs, sglang: str, flashinfer: str | None) -> tuple[Path, str]:
    venv = copy_venv(venvs(sglang, flashinfer), tmp_path / "V")
    return venv, str(venv / "bin" / "python")


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha256(p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def out(done) -> list[str]:
    return done.stdout.decode().splitlines()


def test_eight_pcie_rtx_pro_6000_with_sglang_059_and_flashinfer_064(tmp_path: Path, venvs) -> None:
    venv, python = env_of(tmp_path, venvs, "0.5.9", "0.6.4")
    site = next((venv / "lib").glob("python3*/site-packages"))
    env = standin(tmp_path, "rtxpro6000-8pcie", nvcc=True)
    before = snapshot(venv)
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 1, done.stderr.decode()
    assert done.stderr == b""
    lines = out(done)
    assert lines[0] == f"GPUs ({tmp_path}/bin/nvidia-smi):"
    assert lines[1] == "  GPU0  NVIDIA RTX PRO 6000 Blackwell Workstation Edition  cc 12.0 (SM120)  00000000:01:00.0"
    assert len([l for l in lines if "(SM120)" in l]) == 8
    assert lines[9] == "links: every pair through PCIe (NODE 8, PIX 4, SYS 16): no NVLink, so no multicast between these GPUs"
    assert lines[11:16] == [
        f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info/METADATA",
        "  torch-symm-mem (on by default): needed here, not applied: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks 12; _WORLD_SIZES_MULTIMEM lacks 12",
        "    prevents: KeyError: 12 (TorchSymmMemCommunicator.__init__ (torch_symm_mem.py))",
        f"    {PCIE}",
        "  allreduce-fusion (opt-in): not applied: _is_sm100_supported in apply_flashinfer_allreduce_fusion() lacks '_is_sm120_supported'",
    ]
    assert "    not needed by default: only with --enable-flashinfer-allreduce-fusion" in lines
    assert f"{site}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer_python-0.6.4.dist-info/METADATA" in lines
    assert ("    prevents: No supported CUDA architectures found for major versions [9, 10]. (gen_trtllm_comm_module (flashinfer/jit/comm.py): "
            "SGLang dies at CUDA graph capture (\"Capture cuda graph failed\", SGLang issue 15650))") in lines
    assert f"    it needs CUDA 12.8 or later and nvcc, for FlashInfer's JIT build of sm_120a (trtllm_comm.so): nvcc is {tmp_path}/bin/nvcc" in lines
    assert lines[-1] == f"needed: torch-symm-mem; to apply: patchkit apply --python {python} --to-cc auto"
    assert snapshot(venv) == before  # read only

    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    assert (doc["command"], doc["ok"], doc["exit_code"], doc["needed"]) == ("doctor", False, 1, ["torch-symm-mem"])
    assert doc["apply"] == f"patchkit apply --python {python} --to-cc auto"
    assert doc["machine"]["pcie_only"] is True and len(doc["machine"]["links"]) == 28
    assert doc["machine"]["gpus"][7] == {"index": 7, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "cc": "12.0", "bus_id": "00000000:C2:00.0"}
    sglang, flashinfer = doc["targets"]
    assert (sglang["label"], sglang["version"], flashinfer["label"], flashinfer["version"]) == ("SGLang", "0.5.9", "FlashInfer", "0.6.4")
    symm = sglang["fixes"][0]
    assert (symm["fix"], symm["status"], symm["missing"], symm["needed"]) == ("torch-symm-mem", "missing", [12], True)
    assert [(f["fix"], f["status"], f["needed"]) for f in flashinfer["fixes"]] == [("allreduce-fusion", "missing", False)]
    assert snapshot(venv) == before

    done = invoke("apply", "--python", python, "--to-cc", "auto", "--all-fixes", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert out(done)[0] == "this machine: 8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (cc 12.0)"
    utils = site / "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
    (table,) = tables(utils.read_bytes(), ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",), str(utils)).values()
    assert table[12] == table[10]

    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stderr.decode()
    lines = out(done)
    assert "  torch-symm-mem (on by default): applied (by patchkit)" in lines
    assert f"    {PCIE}" in lines  # still says what PCIe means for symm-mem
    assert lines[-1] == "nothing this machine needs is missing"


def test_sglang_057_turns_the_fusion_on_by_itself(tmp_path: Path, venvs) -> None:
    _, python = env_of(tmp_path, venvs, "0.5.7", "0.6.4")
    done = invoke("doctor", "--python", python, env=standin(tmp_path, "rtxpro6000-8pcie"))
    assert done.returncode == 1, done.stderr.decode()
    lines = out(done)
    assert lines.count("  allreduce-fusion (opt-in): needed here, not applied: _is_sm100_supported in _gather_hidden_states_and_residual() lacks '_is_sm120_supported'") == 1
    because = ("    needed because SGLang 0.5.7 turns it on by itself on SM120 for DeepseekV3ForCausalLM, GptOssForCausalLM, "
               "Glm4MoeForCausalLM, Qwen3MoeForCausalLM, with FlashInfer 0.6.4 (the fix is upstream from 0.6.17)")
    assert lines.count(because) == 2  # SGLang's gate and FlashInfer's list
    assert ("    it needs CUDA 12.8 or later and nvcc, for FlashInfer's JIT build of sm_120a (trtllm_comm.so): "
            "no nvcc on PATH; FlashInfer cannot build the comm module for SM120") in lines
    assert lines[-1] == f"needed: torch-symm-mem, allreduce-fusion; to apply: patchkit apply --python {python} --to-cc auto --all-fixes"


def test_flashinfer_0617_has_the_fusion_upstream(tmp_path: Path, venvs) -> None:
    _, python = env_of(tmp_path, venvs, "0.5.7", "0.6.17")
    lines = out(invoke("doctor", "--python", python, env=standin(tmp_path, "rtxpro6000-8pcie")))
    assert "  allreduce-fusion (opt-in): in effect (the release has it)" in lines
    assert not any(l.startswith("    needed because") for l in lines)  # 0.6.17 does not fail


def test_sglang_0523_warns_instead(tmp_path: Path, venvs) -> None:
    _, python = env_of(tmp_path, venvs, "0.5.23", None)
    done = invoke("doctor", "--python", python, env=standin(tmp_path, "rtxpro6000-8pcie"))
    assert done.returncode == 1
    assert ("    prevents: the warning TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not available. "
            "(TorchSymmMemCommunicator.__init__ (torch_symm_mem.py); the communicator stays off)") in out(done)


def test_an_h200_needs_nothing(tmp_path: Path, venvs) -> None:
    venv, python = env_of(tmp_path, venvs, "0.5.9", "0.6.4")
    env = standin(tmp_path, "h200-1gpu")
    before = snapshot(venv)
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    assert lines[:3] == [f"GPUs ({tmp_path}/bin/nvidia-smi):", "  GPU0  NVIDIA H200  cc 9.0 (SM90)  00000000:00:06.0",
                         "links: one GPU: no peer to link to, no multicast"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert lines[3:] == [
        "",
        f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info/METADATA",
        "  torch-symm-mem (on by default): not needed: the release holds key 9 for these GPUs",
        "  allreduce-fusion (opt-in): not for these GPUs",
        "",
        f"{site}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer_python-0.6.4.dist-info/METADATA",
        "  allreduce-fusion (opt-in): not needed: the release holds key 9 for these GPUs",
        "",
        "nothing this machine needs is missing",
    ]
    verified = invoke("verify", "--python", python, "--to-cc", "auto", env=env)
    assert verified.returncode == 0 and out(verified)[2] == "nothing to do: SGLang already holds key 9 for this machine's GPUs"
    done = invoke("apply", "--python", python, "--to-cc", "auto", env=env)
    assert done.returncode == 0
    assert out(done) == ["this machine: 1 x NVIDIA H200 (cc 9.0)",
                         f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info/METADATA",
                         "nothing to do: SGLang already holds key 9 for this machine's GPUs",
                         f"{site}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer_python-0.6.4.dist-info/METADATA",
                         "note: no rule of torch-symm-mem patches FlashInfer; allreduce-fusion does (--fix NAME)",
                         "nothing to patch: nothing written"]
    done = invoke("apply", "--python", python, "--to-cc", "auto", "--all-fixes", env=env)
    assert done.returncode == 0
    assert out(done)[-1] == "nothing to do: FlashInfer already holds key 9 for this machine's GPUs"
    assert snapshot(venv) == before


@pytest.mark.parametrize("machine, why", [
    ("missing", "patchkit: nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH"),
    ("none", "No devices were found (the driver sees no NVIDIA GPU)"),
    ("hung", "did not answer within 0.5 s (a hung driver?); killed it"),
    ("garbled", "printed what patchkit cannot read: line 1 is not index, name, compute_cap, pci.bus_id"),
])
@pytest.mark.parametrize("command", [("doctor",), ("apply", "--to-cc", "auto"), ("verify", "--to-cc", "auto")])
def test_no_gpu_a_hung_or_a_garbled_driver(tmp_path: Path, venvs, machine: str, why: str, command) -> None:
    _, python = env_of(tmp_path, venvs, "0.5.9", None)
    env = no_nvidia_smi(tmp_path) if machine == "missing" else standin(tmp_path, machine)
    done = invoke(*command, "--python", python, env=dict(env, PATCHKIT_NVIDIA_SMI_TIMEOUT="0.5"))
    assert done.returncode == 2 and done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert why in line and line.startswith("patchkit: ")
    doc = json.loads(invoke(*command, "--python", python, "--json", env=dict(env, PATCHKIT_NVIDIA_SMI_TIMEOUT="0.5")).stdout)
    assert doc["command"] == command[0] and doc["exit_code"] == 2 and why.removeprefix("patchkit: ") in doc["error"]


def test_a_gb10_on_vllm_0330_gets_key_12_1(tmp_path: Path, tmp_path_factory) -> None:
    mirror = real_mirror(tmp_path_factory, "PATCHKIT_REAL_VLLM_MIRROR", "vllm", ["0.33.0"])
    checkout = tmp_path / "vllm"
    import subprocess

    subprocess.run(["git", "clone", "-q", "--branch", "v0.33.0", str(mirror), str(checkout)], check=True, capture_output=True)
    env = standin(tmp_path, "gb10")
    done = invoke("doctor", str(checkout), env=env)
    assert done.returncode == 1
    lines = out(done)
    assert lines[1] == "  GPU0  NVIDIA GB10  cc 12.1 (SM121)  0000000F:01:00.0"
    assert any(l.startswith("  torch-symm-mem (on by default): needed here, not applied: CUSTOM_ALL_REDUCE_MAX_SIZES lacks '12.1'") for l in lines)
    assert lines[-1] == f"needed: torch-symm-mem; to apply: patchkit apply {checkout} --to-cc auto"
    done = invoke("apply", str(checkout), "--to-cc", "auto", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert out(done)[0] == "this machine: 1 x NVIDIA GB10 (cc 12.1)"
    utils = checkout / "vllm/distributed/device_communicators/all_reduce_utils.py"
    found = tables(utils.read_bytes(), ("CUSTOM_ALL_REDUCE_MAX_SIZES", "SYMM_MEM_ALL_REDUCE_MAX_SIZES"), str(utils))
    assert found and all(t["12.1"] == t["10.0"] and "12.0" not in t for t in found.values())
    assert invoke("verify", str(checkout), "--to-cc", "auto", env=env).returncode == 0
    assert invoke("doctor", str(checkout), env=env).returncode == 0
