"""patchkit doctor and --to-cc auto, on real wheels in real virtualenvs (sglang 0.5.7, 0.5.9,
0.5.23; flashinfer-python 0.6.4, 0.6.17, 0.7.0, installed by pip) and a vLLM 0.33.0 checkout from
the release mirror, with a stand-in nvidia-smi first on PATH (standin.py) for each machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from standin import no_nvidia_smi, standin

from patchkit.patch.manifest import read_manifest
from patchkit.render.generate import why
from patchkit.rewrite.evaluate import tables
from support.cli import invoke, split_modes
from support.repos import symm_effect
from support.venvs import copy_venv, snapshot

PCIE = ("the communicator will then turn itself off (\"torch symmetric memory multicast operations are not supported\"): "
        "no multicast between PCIe GPUs; the all-reduce stays on NCCL")
# SGLang 0.5.4 - 0.5.20 turn JIT DeepGEMM on for SM12x (the DeepGEMM fix, on by default, prevents it).
DEEPGEMM_FAILS = ("RuntimeError: Assertion error (.../csrc/apis/attention.hpp:219): Unsupported architecture (the first "
                  "forward, in DeepGEMM's architecture dispatch (csrc/apis/*.hpp), with a DeepGEMM lacking the SM12x kernels)")
CLEAN_START = ("--enable-torch-symm-mem cannot speed anything up here (no multicast between PCIe GPUs): "
               "the fix only turns KeyError: 12 into a clean start")
# What the SGLang authors measured, as pcie_ipc_ar.py's docstring says it (known-speedups.toml).
MEASURED = [
    "  measured by the SGLang authors (the module docstring of sglang/srt/distributed/device_communicators/pcie_ipc_ar.py):",
    "    Measured on one 8x SM120 host (GPUs 0-3 and 4-7 on separate NUMA nodes), against NCCL, hidden 6144 bf16:",
    "    Message    FlashInfer   NCCL        Speed-up",
    "    12 KiB     5.3 us       205.1 us    38.8x",
    "    96 KiB     15.3 us      584.9 us    38.2x",
    "    384 KiB    34.6 us      1169.3 us   33.8x",
    "    100 MiB    8.5 ms       50.4 ms     5.9x",
]
PCIE_IPC = [
    "all-reduce on these GPUs (8 x SM120, linked through PCIe only: no NVLink, no multicast): FlashInfer's PCIe-IPC "
    "all-reduce (pcie_ipc_comm), which SGLang uses for the tensor-parallel all-reduce",
]
SERVES = "  it serves tensor-parallel groups of 2, 4 or 8 GPUs, bf16 reductions up to the decode size; the rest stays on NCCL"
NOT_NEEDED_0523 = (
    "no multicast between PCIe GPUs, and without it SGLang 0.5.23 warns \"TorchSymmMemCommunicator: Device capability 12 not "
    "supported, communicator is not available.\"; with the key the communicator would go on to torch_symm_mem.rendezvous, "
    "which maps every peer's memory (P2P between the GPUs), and then turn itself off anyway: a way to fail, and no speed")


@pytest.fixture(scope="module")
def venvs(prebuilt):
    """(sglang, flashinfer) -> a template virtualenv with those real wheels, built once a session."""
    from support.mirror import default_cache, fetch_wheel

    def build(sglang: str, flashinfer: str | None) -> Path:
        wheels = [fetch_wheel(sglang, default_cache())]
        if flashinfer:
            wheels.append(fetch_wheel(flashinfer, default_cache(), "flashinfer-python"))
        return prebuilt.venv(*wheels)

    return build


def env_of(tmp_path: Path, venvs, sglang: str, flashinfer: str | None) -> tuple[Path, str]:
    """A copy of the template, for a test that applies."""
    venv = copy_venv(venvs(sglang, flashinfer), tmp_path / "V")
    return venv, str(venv / "bin" / "python")


def read_only(venvs, sglang: str, flashinfer: str | None) -> str:
    """The template's python itself, for a test that runs doctor alone: doctor only reads (the test of
    SGLang 0.5.23 on PCIe below checks a template's SGLang files unchanged after it)."""
    return str(venvs(sglang, flashinfer) / "bin" / "python")


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
    assert lines[11:20] == [
        f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
        "  deepgemm-sm12x (on by default): needed here, not applied: SGLang 0.5.13's change is missing from configurer.py; sm_version == 120 lacks 121",
        f"    prevents: {DEEPGEMM_FAILS}",
        "  fusion-self-enable (on by default): in effect (the release has it)",  # 0.5.8's narrowing: upstream in 0.5.9
        "  torch-symm-mem (on by default): needed here, not applied: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks 12; _WORLD_SIZES_MULTIMEM lacks 12",
        "    prevents: KeyError: 12 (TorchSymmMemCommunicator.__init__ (torch_symm_mem.py))",
        f"    {PCIE}",
        f"    {CLEAN_START}",
        "  allreduce-fusion (opt-in): not applied: _is_sm100_supported in apply_flashinfer_allreduce_fusion() lacks '_is_sm120_supported'",
    ]
    assert "    not needed by default: only with --enable-flashinfer-allreduce-fusion" in lines
    assert f"{site}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer_python-0.6.4.dist-info" in lines
    assert ("    prevents: No supported CUDA architectures found for major versions [9, 10]. (gen_trtllm_comm_module (flashinfer/jit/comm.py): "
            "SGLang dies at CUDA graph capture (\"Capture cuda graph failed\", SGLang issue 15650))") in lines
    assert f"    it needs CUDA 12.8 or later and nvcc, for FlashInfer's JIT build of sm_120a (trtllm_comm.so): nvcc is {tmp_path}/bin/nvcc (PATH)" in lines
    # Older SGLang and FlashInfer: which of the two to upgrade for the all-reduce that helps on PCIe.
    start = lines.index(PCIE_IPC[0])
    assert lines[start - 1:-2] == ["", *PCIE_IPC,
                                   "  it needs SGLang 0.5.21 or later and FlashInfer 0.7.0 or later (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1): "
                                   "upgrade sglang (0.5.9 here), upgrade flashinfer-python (0.6.4 here)", SERVES, *MEASURED]
    assert lines[-2:] == ["", f"needed: deepgemm-sm12x, torch-symm-mem; to apply: patchkit apply --python {python} --to-cc auto"]
    assert snapshot(venv) == before  # read only

    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    assert (doc["command"], doc["ok"], doc["exit_code"], doc["needed"]) == ("doctor", False, 1, ["deepgemm-sm12x", "torch-symm-mem"])
    assert doc["apply"] == f"patchkit apply --python {python} --to-cc auto"
    assert doc["machine"]["pcie_only"] is True and len(doc["machine"]["links"]) == 28
    assert doc["machine"]["gpus"][7] == {"index": 7, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "cc": "12.0", "bus_id": "00000000:C2:00.0"}
    sglang, flashinfer = doc["targets"]
    assert (sglang["label"], sglang["version"], flashinfer["label"], flashinfer["version"]) == ("SGLang", "0.5.9", "FlashInfer", "0.6.4")
    deepgemm, self_enable, symm = sglang["fixes"][:3]
    assert (self_enable["fix"], self_enable["status"], self_enable["needed"]) == ("fusion-self-enable", "in effect", False)
    assert (deepgemm["fix"], deepgemm["status"], deepgemm["missing"], deepgemm["needed"]) == ("deepgemm-sm12x", "missing", [12], True)
    assert (symm["fix"], symm["status"], symm["missing"], symm["needed"]) == ("torch-symm-mem", "missing", [12], True)
    assert symm["why"] == "on by default, not applied: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks 12; _WORLD_SIZES_MULTIMEM lacks 12"
    assert (symm["reason"], symm["detail"], symm["why_reason"]) == (
        "lacks-key", "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks 12; _WORLD_SIZES_MULTIMEM lacks 12", "lacks-key")
    assert symm["effect_here"][-1] == CLEAN_START
    assert [(f["fix"], f["status"], f["needed"]) for f in flashinfer["fixes"]] == [("allreduce-fusion", "missing", False)]
    assert flashinfer["fixes"][0]["why"] == "opt-in: only with --enable-flashinfer-allreduce-fusion"
    advice = doc["recommendation"]
    assert (advice["name"], advice["available"], advice["upgrade"]) == ("pcie-ipc-allreduce", False, ["sglang", "flashinfer-python"])
    assert advice["installed"] == {"sglang": "0.5.9", "flashinfer": "0.6.4"}
    assert advice["requires"] == [{"project": "sglang", "since": "0.5.21", "otherwise": ""}, {
        "project": "flashinfer", "since": "0.7.0",
        "otherwise": "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set but this FlashInfer build has no pcie_ipc_comm; falling back to NCCL all-reduce."}]
    assert advice["turn_on"] == "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1" and advice["measured"] == [l.strip() for l in MEASURED[1:]]
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
    at = lines.index("  torch-symm-mem (on by default): applied (by patchkit)")
    # Still says what PCIe means for symm-mem, and what the fix did instead.
    assert lines[at + 1:at + 4] == ["    prevented: KeyError: 12 (TorchSymmMemCommunicator.__init__ (torch_symm_mem.py))", f"    {PCIE}", f"    {CLEAN_START}"]
    assert lines[-1] == "nothing this machine needs is missing"


# What SGLang 0.5.7 does on SM12x when it turns the fusion on by itself (fusion-self-enable's [[effect.fails]]).
SELF_ENABLED_FAILS = (
    "No supported CUDA architectures found for major versions [9, 10]. (CUDA graph capture (\"Capture cuda graph failed\", "
    "SGLang issue 15650), in FlashInfer's JIT build of the TRT-LLM comm module (FlashInfer below 0.6.17): server_args.py turns "
    "the fusion on by itself for DeepseekV3ForCausalLM, GptOssForCausalLM, Glm4MoeForCausalLM and Qwen3MoeForCausalLM under "
    "is_sm90_supported() or is_blackwell_supported())")


def test_sglang_057_turns_the_fusion_on_by_itself(tmp_path: Path, venvs) -> None:
    venv, python = env_of(tmp_path, venvs, "0.5.7", "0.6.4")
    env = standin(tmp_path, "rtxpro6000-8pcie") | {"CUDA_HOME": str(tmp_path / "cuda")}  # FlashInfer's nvcc: none there
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 1, done.stderr.decode()
    lines = out(done)
    # The fix on by default that keeps 0.5.7 from it (0.5.8's narrowing), and what it prevents.
    at = lines.index("  fusion-self-enable (on by default): needed here, not applied: SGLang PR 16283 is missing from server_args.py")
    assert lines[at + 1] == f"    prevents: {SELF_ENABLED_FAILS}"
    assert lines.count("  allreduce-fusion (opt-in): needed here, not applied: _is_sm100_supported in _gather_hidden_states_and_residual() lacks '_is_sm120_supported'") == 1
    # Still true as released; since fusion-self-enable, the line says what ends it (intended).
    because = ("    needed because SGLang 0.5.7 turns it on by itself on SM120 for DeepseekV3ForCausalLM, GptOssForCausalLM, "
               "Glm4MoeForCausalLM, Qwen3MoeForCausalLM, with FlashInfer 0.6.4 (the fix is upstream from 0.6.17), "
               "until fusion-self-enable is applied")
    assert lines.count(because) == 2  # SGLang's gate and FlashInfer's list
    assert ("    it needs CUDA 12.8 or later and nvcc, for FlashInfer's JIT build of sm_120a (trtllm_comm.so): "
            f"no nvcc at {tmp_path}/cuda/bin/nvcc ($CUDA_HOME); FlashInfer cannot build the comm module for SM120") in lines
    assert lines[-1] == (f"needed: deepgemm-sm12x, fusion-self-enable, torch-symm-mem, allreduce-fusion; to apply: patchkit apply "
                         f"--python {python} --to-cc auto --all-fixes")

    # After the fixes on by default, 0.5.7 no longer turns the fusion on by itself on SM12x: the
    # opt-in fix is not needed, and nothing says it is.
    done = invoke("apply", "--python", python, "--to-cc", "auto", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert "  SGLang PR 16283 in sglang/srt/server_args.py: 2 hunks applied exactly" in out(done)
    server_args = (next((venv / "lib").glob("python3*/site-packages")) / "sglang/srt/server_args.py").read_bytes()
    assert b"            and (is_sm90_supported() or is_sm100_supported())\n" in server_args
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stderr.decode()
    lines = out(done)
    at = lines.index("  fusion-self-enable (on by default): applied (by patchkit)")
    assert lines[at + 1] == f"    prevented: {SELF_ENABLED_FAILS}"
    assert not any(l.startswith("    needed because") for l in lines)
    assert lines.count("    not needed by default: only with --enable-flashinfer-allreduce-fusion") == 2
    assert lines[-1] == "nothing this machine needs is missing"
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    assert (doc["ok"], doc["needed"], doc["apply"]) == (True, [], None)


def test_flashinfer_0617_has_the_fusion_upstream(tmp_path: Path, venvs) -> None:
    python = read_only(venvs, "0.5.7", "0.6.17")
    lines = out(invoke("doctor", "--python", python, env=standin(tmp_path, "rtxpro6000-8pcie")))
    assert "  allreduce-fusion (opt-in): in effect (the release has it)" in lines
    assert not any(l.startswith("    needed because") for l in lines)  # 0.6.17 does not fail


def test_sglang_0523_needs_no_symm_mem_on_pcie_and_gets_the_pcie_ipc_all_reduce(tmp_path: Path, venvs) -> None:
    """0.5.23 turns the communicator off cleanly without key 12 and the GPUs have no multicast:
    the fix is not needed; the all-reduce that helps is upstream, named with its measurement."""
    venv = venvs("0.5.23", "0.7.0")  # doctor only reads: the template itself, checked unchanged
    python = str(venv / "bin" / "python")
    site = next((venv / "lib").glob("python3*/site-packages"))
    env = standin(tmp_path, "rtxpro6000-8pcie")
    before = snapshot(site / "sglang")
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stderr.decode()
    lines = out(done)
    assert lines[11:16] == [
        f"{site}/sglang: SGLang 0.5.23 (installed), from sglang-0.5.23.dist-info",
        "  deepgemm-sm12x (on by default): in effect (the release has it)",  # 0.5.21's probe of the SM12x APIs
        "  fusion-self-enable (on by default): in effect (the release has it)",  # upstream since 0.5.8
        "  torch-symm-mem (on by default): not needed here, not applied: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks 12; _WORLD_SIZES_MULTIMEM lacks 12",
        f"    not needed because {NOT_NEEDED_0523}",
    ]
    assert not any("prevents: the warning" in l for l in lines)
    # The fusion: its rules would open SGLang's gate, but the resolver after it still refuses SM120.
    assert lines[16] == f"  allreduce-fusion (opt-in): incomplete here, not applied: {INCOMPLETE_0523_INSTALLED}"
    start = lines.index(PCIE_IPC[0])
    assert lines[start:] == [*PCIE_IPC, "  SGLang 0.5.23 and FlashInfer 0.7.0 have it: start the server with SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1",
                             SERVES, *MEASURED, "", "nothing this machine needs is missing"]
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    assert (doc["ok"], doc["needed"], doc["apply"]) == (True, [], None)
    assert [f["fix"] for f in doc["targets"][0]["fixes"][:2]] == ["deepgemm-sm12x", "fusion-self-enable"]
    # In effect because the release has it: a reason code like every other judgement (it was null).
    for fix in doc["targets"][0]["fixes"][:2]:
        assert {k: fix[k] for k in ("status", "reason", "detail", "applied_by_patchkit", "why", "why_reason")} == {
            "status": "in effect", "reason": "in-release", "detail": "the release has it", "applied_by_patchkit": False,
            "why": "in effect (the release has it)", "why_reason": "in-release"}, fix
    symm = doc["targets"][0]["fixes"][2]
    assert (symm["fix"], symm["status"], symm["needed"], symm["why"], symm["effect_here"]) == (
        "torch-symm-mem", "missing", False, NOT_NEEDED_0523, [])
    fusion = doc["targets"][0]["fixes"][3]
    assert (fusion["fix"], fusion["status"], fusion["detail"]) == ("allreduce-fusion", "incomplete", INCOMPLETE_0523_INSTALLED)
    assert (symm["reason"], symm["why_reason"], fusion["reason"]) == ("lacks-key", "not-needed-here", "gates-left")
    advice = doc["recommendation"]
    assert (advice["available"], advice["upgrade"], advice["installed"]) == (True, [], {"sglang": "0.5.23", "flashinfer": "0.7.0"})
    assert doc["recommendations"] == [advice]  # vLLM's variable is not for SGLang, though FlashInfer is here
    assert "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC" not in done.stdout.decode()
    assert snapshot(site / "sglang") == before


def test_sglang_0523_with_flashinfer_0617_is_told_to_upgrade_flashinfer(tmp_path: Path, venvs) -> None:
    python = read_only(venvs, "0.5.23", "0.6.17")
    lines = out(invoke("doctor", "--python", python, env=standin(tmp_path, "rtxpro6000-8pcie")))
    start = lines.index(PCIE_IPC[0])
    assert lines[start + 1:start + 3] == [
        "  it needs SGLang 0.5.21 or later and FlashInfer 0.7.0 or later (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1): upgrade flashinfer-python (0.6.17 here)",
        "  with FlashInfer 0.6.17, SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 only logs \"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set but this "
        "FlashInfer build has no pcie_ipc_comm; falling back to NCCL all-reduce.\"",
    ]


def test_one_gpu_sm12x_gets_no_all_reduce_advice(tmp_path: Path, venvs) -> None:
    """A GB10 (cc 12.1, one GPU): nothing to all-reduce with, no multicast: torch-symm-mem is not
    needed on 0.5.23, and the PCIe all-reduce is not for it."""
    python = read_only(venvs, "0.5.23", None)
    done = invoke("doctor", "--python", python, env=standin(tmp_path, "gb10"))
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    assert lines[5] == "  deepgemm-sm12x (on by default): in effect (the release has it)"  # 0.5.21's probe admits 121
    assert lines[6] == "  fusion-self-enable (on by default): in effect (the release has it)"  # 0.5.8's narrowing holds for 121 too
    assert lines[8] == "    not needed because " + NOT_NEEDED_0523.replace("no multicast between PCIe GPUs", "one GPU, no peer to share multicast memory with")
    assert not any(l.startswith("all-reduce on these GPUs") for l in lines)
    assert json.loads(invoke("doctor", "--python", python, "--json", env=standin(tmp_path, "gb10")).stdout)["recommendation"] is None


# Why allreduce-fusion is incomplete on SGLang 0.5.23 (its manifest's reason).
INCOMPLETE_0523 = (
    "the feature's path still refuses the GPU at python/sglang/srt/layers/flashinfer_comm_fusion.py:48 in _resolve_backend(): "
    "not (get_platform().is_sm90 or get_platform().is_sm100); python/sglang/srt/layers/flashinfer_comm_fusion.py:54 in "
    "_resolve_backend(): not get_platform().is_sm100; python/sglang/srt/layers/flashinfer_comm_fusion.py:63 in "
    "_resolve_backend(): get_platform().is_sm100 (and 2 more)")
# The same where the target is an installed package: its gates' paths as the wheel has them.
INCOMPLETE_0523_INSTALLED = INCOMPLETE_0523.replace("python/sglang/", "sglang/")


def test_apply_to_cc_auto_leaves_sglang_0523_alone_on_pcie(tmp_path: Path, venvs) -> None:
    venv, python = env_of(tmp_path, venvs, "0.5.23", None)
    site = next((venv / "lib").glob("python3*/site-packages"))
    env = standin(tmp_path, "rtxpro6000-8pcie")
    before = snapshot(site / "sglang")
    skipped = f"not needed here: torch-symm-mem: {NOT_NEEDED_0523} (--fix torch-symm-mem applies it anyway)"
    head = ["this machine: 8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (cc 12.0)",
            f"{site}/sglang: SGLang 0.5.23 (installed), from sglang-0.5.23.dist-info"]
    for command in ("apply", "verify"):
        done = invoke(command, "--python", python, "--to-cc", "auto", env=env)
        assert (done.returncode, done.stderr) == (0, b""), done.stdout.decode()
        # verify says what it judged in the environment after the machine (issue 41, D12)
        judged = [f"{python}: SGLang (wheel); not installed: vLLM, FlashInfer"] if command == "verify" else []
        verdict = "verify: ok" if command == "verify" else "nothing to do"
        assert out(done) == [head[0], *judged, head[1], skipped, f"{verdict}: SGLang lacks nothing this machine's GPUs need"]
        assert snapshot(site / "sglang") == before  # its tables left alone, byte for byte
    doc = json.loads(invoke("apply", "--python", python, "--to-cc", "auto", "--json", env=env).stdout)
    assert (doc["command"], doc["targets"], doc["nothing_to_do"]) == ("apply", [], [str(site)])
    assert doc["not_needed"] == [{"path": str(site), "project": "sglang", "fix": "torch-symm-mem", "reason": "not-needed-here",
                                  "why": NOT_NEEDED_0523}]
    # --all-fixes names no fix: the fusion, incomplete on 0.5.23 (its resolver and its multicast
    # preflight refuse SM120 after the gate), is left out and said; asked for by name, it is refused whole.
    done = invoke("apply", "--python", python, "--to-cc", "auto", "--all-fixes", env=env)
    assert done.returncode == 0, done.stdout.decode()
    assert f"note: allreduce-fusion left out: incomplete on SGLang 0.5.23: {INCOMPLETE_0523_INSTALLED}" in out(done)
    # The DeepGEMM fix alone is left (upstream in 0.5.23, no patch of it shipped): no cc pair is why, so
    # none is named (it said "... that copies key 10 to key 12 (the shipped one copies key 10 to key 12)").
    assert "note: no shipped patch for SGLang 0.5.23" in out(done)
    done = invoke("apply", "--python", python, "--to-cc", "auto", "--fix", "allreduce-fusion", env=env)
    assert done.returncode == 3, done.stdout.decode()
    assert done.stderr.decode() == f"patchkit: allreduce-fusion incomplete on SGLang 0.5.23: {INCOMPLETE_0523_INSTALLED}; nothing written\n"
    assert snapshot(site / "sglang") == before


# A plain apply leaves it out as doctor does (tests/releases/test_newer_than_data.py); named, it is applied.
@pytest.mark.parametrize("asked", [("--to-cc", "auto", "--fix", "torch-symm-mem"), ("--fix", "torch-symm-mem")],
                         ids=["auto-fix-named", "fix-named"])
def test_asking_for_torch_symm_mem_still_applies_it(tmp_path: Path, venvs, asked) -> None:
    venv, python = env_of(tmp_path, venvs, "0.5.23", None)
    site = next((venv / "lib").glob("python3*/site-packages"))
    done = invoke("apply", "--python", python, *asked, env=standin(tmp_path, "rtxpro6000-8pcie"))
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    assert not any(l.startswith("not needed here") for l in lines)
    assert symm_effect("SGLang", "0.5.23", "TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not available.") in lines
    utils = site / "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
    (table,) = tables(utils.read_bytes(), ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",), str(utils)).values()
    assert table[12] == table[10]


def test_an_h200_needs_nothing(tmp_path: Path, venvs) -> None:
    venv, python = env_of(tmp_path, venvs, "0.5.9", "0.6.4")
    env = standin(tmp_path, "h200-1gpu") | {"CUDA_HOME": str(tmp_path / "cuda")}  # FlashInfer's nvcc: none there
    before = snapshot(venv)
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    assert lines[:3] == [f"GPUs ({tmp_path}/bin/nvidia-smi):", "  GPU0  NVIDIA H200  cc 9.0 (SM90)  00000000:00:06.0",
                         "links: one GPU: no peer to link to, no multicast"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert lines[3:] == [
        "",
        f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
        "  deepgemm-sm12x (on by default): not for these GPUs",
        "  fusion-self-enable (on by default): not for these GPUs",
        "  torch-symm-mem (on by default): not needed: the release holds key 9 for these GPUs",
        "  allreduce-fusion (opt-in): not for these GPUs",
        "",
        f"{site}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer_python-0.6.4.dist-info",
        "  allreduce-fusion (opt-in): not for these GPUs",  # its backport (FlashInfer PR 3903) is for SM12x
        "",
        f"compiled CUDA code: no distribution installed for {python} carries any",  # the wheels are Python only
        # FlashInfer compiles at the first start: what its sources admit and where its nvcc is (docs/KERNELS.md)
        "compiled at the first start (JIT), by what their sources admit and the compiler they call "
        "(used only where a server calls them; not counted in the exit code): 1 library",
        f"  flashinfer-python 0.6.4: FlashInfer JIT, compiles with nvcc, none at {tmp_path}/cuda/bin/nvcc ($CUDA_HOME)",
        f"    9.0: cannot build: no nvcc at {tmp_path}/cuda/bin/nvcc",
        "",
        "nothing this machine needs is missing",
    ]
    verified = invoke("verify", "--python", python, "--to-cc", "auto", env=env)
    assert verified.returncode == 0 and out(verified)[3] == "nothing to do: SGLang already holds key 9 for this machine's GPUs"
    done = invoke("apply", "--python", python, "--to-cc", "auto", env=env)
    assert done.returncode == 0
    assert out(done) == ["this machine: 1 x NVIDIA H200 (cc 9.0)",
                         f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
                         "nothing to do: SGLang already holds key 9 for this machine's GPUs",
                         f"{site}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer_python-0.6.4.dist-info",
                         "note: no rule of deepgemm-sm12x, fusion-self-enable, torch-symm-mem patches FlashInfer; allreduce-fusion does (--fix NAME)",
                         "nothing to patch: nothing written"]
    done = invoke("apply", "--python", python, "--to-cc", "auto", "--all-fixes", env=env)
    assert done.returncode == 0
    # FlashInfer's one fix, a backport, is for SM12x: it has no key 9 to hold.
    assert out(done)[-1] == "nothing to do: no fix for FlashInfer is for this machine's GPUs (key 9)"
    assert snapshot(venv) == before


@pytest.mark.parametrize("machine, why", [
    ("missing", "patchkit: nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH"),
    ("none", "No devices were found (the driver sees no NVIDIA GPU)"),
    ("hung", "did not answer within 0.5 s (a hung driver?); killed it"),
    ("garbled", "printed what patchkit cannot read: line 1 is not index, name, compute_cap, pci.bus_id"),
])
@pytest.mark.parametrize("command", [("apply", "--to-cc", "auto"), ("verify", "--to-cc", "auto")])
def test_no_gpu_a_hung_or_a_garbled_driver(tmp_path: Path, venvs, machine: str, why: str, command) -> None:
    _, python = env_of(tmp_path, venvs, "0.5.9", None)
    env = no_nvidia_smi(tmp_path) if machine == "missing" else standin(tmp_path, machine)
    done = invoke(*command, "--python", python, env=dict(env, PATCHKIT_NVIDIA_SMI_TIMEOUT="0.5"))
    assert done.returncode == 2 and done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert why in line and line.startswith("patchkit: ")
    doc = json.loads(invoke(*command, "--python", python, "--json", env=dict(env, PATCHKIT_NVIDIA_SMI_TIMEOUT="0.5")).stdout)
    assert doc["command"] == command[0] and doc["exit_code"] == 2 and why.removeprefix("patchkit: ") in doc["error"]


def test_a_gb10_on_vllm_0330_gets_key_12_1_when_asked(tmp_path: Path, prebuilt) -> None:
    """One GPU has no multicast, and vLLM turns its communicator off cleanly without the key:
    doctor and --to-cc auto leave it; asked for with --fix, the key is "12.1" (a GB10's cc)."""
    mirror = prebuilt.mirror("vllm")
    checkout = tmp_path / "vllm"
    import subprocess

    subprocess.run(["git", "clone", "-q", "--branch", "v0.33.0", str(mirror), str(checkout)], check=True, capture_output=True)
    env = standin(tmp_path, "gb10")
    done = invoke("doctor", str(checkout), env=env)
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    assert lines[1] == "  GPU0  NVIDIA GB10  cc 12.1 (SM121)  0000000F:01:00.0"
    assert any(l.startswith("  torch-symm-mem (on by default): not needed here, not applied: CUSTOM_ALL_REDUCE_MAX_SIZES lacks '12.1'") for l in lines)
    # vLLM prints the GPU's capability.as_version_str(): 12.1 here (it read 12.0 before the GB10 was a target of its own).
    why = ("one GPU, no peer to share multicast memory with, and without it vLLM 0.33.0 warns \"SymmMemCommunicator: Device "
           "capability 12.1 not supported, communicator is not available.\"; with the key the communicator would go on to "
           "torch_symm_mem.rendezvous, which maps every peer's memory (P2P between the GPUs), and then turn itself off anyway: "
           "a way to fail, and no speed")
    assert f"    not needed because {why}" in lines and lines[-1] == "nothing this machine needs is missing"
    done = invoke("apply", str(checkout), "--to-cc", "auto", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert out(done)[2:] == [f"not needed here: torch-symm-mem: {why} (--fix torch-symm-mem applies it anyway)",
                             "nothing to do: vLLM lacks nothing this machine's GPUs need"]
    assert subprocess.run(["git", "-C", str(checkout), "status", "--porcelain"], capture_output=True).stdout == b""
    done = invoke("apply", str(checkout), "--to-cc", "auto", "--fix", "torch-symm-mem", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert out(done)[0] == "this machine: 1 x NVIDIA GB10 (cc 12.1)"
    utils = checkout / "vllm/distributed/device_communicators/all_reduce_utils.py"
    found = tables(utils.read_bytes(), ("CUSTOM_ALL_REDUCE_MAX_SIZES", "SYMM_MEM_ALL_REDUCE_MAX_SIZES"), str(utils))
    assert found and all(t["12.1"] == t["10.0"] and "12.0" not in t for t in found.values())
    assert invoke("verify", str(checkout), "--to-cc", "auto", env=env).returncode == 0
    assert invoke("doctor", str(checkout), env=env).returncode == 0


def test_generate_to_cc_auto_leaves_out_what_is_not_needed_here(tmp_path: Path, prebuilt) -> None:
    """The series for this machine: 0.5.9 keeps torch-symm-mem (it crashes without it), 0.5.23's
    leaves it out and says why in its line and manifest; --fix torch-symm-mem writes it anyway."""
    mirror = prebuilt.mirror("sglang")
    env = standin(tmp_path, "rtxpro6000-8pcie")
    tags = ("--tag", "v0.5.9", "--tag", "v0.5.23")
    done = invoke("generate", "--repo", str(mirror), *tags, "--out", str(tmp_path / "out"), "--to-cc", "auto", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert out(done) == [
        f"v0.5.9   patched -> {tmp_path}/out/0.5.9/series: deepgemm-sm12x 2 changes in 1 file; fusion-self-enable already "
        "upstream; torch-symm-mem 2 tables in 2 files; allreduce-fusion 1 gate in 1 file",
        # 0.5.23 has the DeepGEMM fix upstream (0.5.21's probe): the tag is "already upstream", not "nothing to patch".
        f"v0.5.23  already upstream: torch-symm-mem not needed here ({NOT_NEEDED_0523}); "
        f"allreduce-fusion incomplete ({INCOMPLETE_0523})",
        "2 tags: 1 patched, 0 nothing to patch, 1 already upstream, 0 errors",
    ]
    assert sorted(p.name for p in (tmp_path / "out/0.5.23").iterdir()) == ["manifest.json"]  # it says why, no patch
    assert (tmp_path / "out/0.5.9/series").read_text().splitlines()[:2] == [
        "0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch", "0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"]
    manifest = json.loads((tmp_path / "out/0.5.23/manifest.json").read_text())
    assert manifest["fixes"][0] == {"fix": "deepgemm-sm12x", "status": "already upstream", "reason": None}
    assert manifest["fixes"][1] == {"fix": "fusion-self-enable", "status": "already upstream", "reason": None}
    # Why torch-symm-mem is not needed here is kept as the judge's reason, its code and fields (the line above is said from them).
    assert manifest["fixes"][2] == {"fix": "torch-symm-mem", "status": "not needed here", "reason": None, "unneeded": {
        "code": "not-needed-here", "lack": {"code": "no-multicast", "kind": "pcie-only", "ccs": []}, "label": "SGLang",
        "version": "0.5.23", "failing": [{
            "project": "sglang", "since": "0.5.14", "until": "0.5.23", "outcome": "warning",
            "says": "TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not available.",
            "where": "TorchSymmMemCommunicator.__init__ (torch_symm_mem.py); the communicator stays off",
            "shown_in": "python/sglang/srt/distributed/device_communicators/torch_symm_mem.py",
            "holds": ["supported_max_sizes = TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(", "if supported_max_sizes is None:"],
            "read_in": ""}],
        "adds_without": "with the key the communicator would go on to torch_symm_mem.rendezvous, which maps every peer's memory "
                        "(P2P between the GPUs), and then turn itself off anyway: a way to fail, and no speed"}}
    (saved,) = [f for f in read_manifest(tmp_path / "out/0.5.23/manifest.json").fixes if f.fix == "torch-symm-mem"]
    assert why(saved) == NOT_NEEDED_0523
    # The manifest keeps the gates, a value; the sentence (the line above) is said from them when read.
    assert (manifest["fixes"][3]["status"], manifest["fixes"][3]["reason"], manifest["series"]) == ("incomplete", None, [])
    assert len(manifest["fixes"][3]["gates"]) == 5
    assert manifest["fixes"][3]["gates"][0] == {
        "path": "python/sglang/srt/layers/flashinfer_comm_fusion.py", "line": 48, "function": "_resolve_backend",
        "snippet": "not (get_platform().is_sm90 or get_platform().is_sm100)"}
    done = invoke("generate", "--repo", str(mirror), *tags, "--out", str(tmp_path / "named"), "--to-cc", "auto",
                  "--fix", "torch-symm-mem", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert out(done)[1] == f"v0.5.23  patched -> {tmp_path}/named/0.5.23/series: torch-symm-mem 2 tables in 2 files"


@pytest.mark.parametrize(("cc", "products"), [("12.0", "RTX PRO 6000 and RTX 50 have no NVLink"), ("12.1", "GB10 is one GPU")])
def test_an_sm12x_cc_given_is_known_to_lack_multicast(tmp_path: Path, venvs, cc: str, products: str) -> None:
    """No SM12x product has multicast (gpus/products.py): --to-cc 12.x without GPUs judges SGLang
    0.5.23's torch-symm-mem not needed, as on the machines themselves (it said "needed" before)."""
    python = read_only(venvs, "0.5.23", None)
    done = invoke("doctor", "--python", python, "--to-cc", cc, env=no_nvidia_smi(tmp_path))
    assert done.returncode == 0, done.stdout.decode()
    lines = out(done)
    assert lines[4] == "  deepgemm-sm12x (on by default): in effect (the release has it)"
    assert lines[5] == "  fusion-self-enable (on by default): in effect (the release has it)"
    assert lines[6] == (f"  torch-symm-mem (on by default): not needed for cc {cc}, not applied: "
                        "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks 12; _WORLD_SIZES_MULTIMEM lacks 12")
    assert lines[7] == "    not needed because " + NOT_NEEDED_0523.replace(
        "no multicast between PCIe GPUs", f"no multicast on any GPU of cc {cc} ({products})")
    assert lines[-1] == f"nothing GPUs of cc {cc} need is missing"


def test_a_gb10_is_told_of_a_jit_build_of_sm_121a_never_sm_120a(tmp_path: Path, venvs) -> None:
    """sm_120a runs on 12.0 only: FlashInfer 0.7.0's JIT builds sm_121a for a GB10, with CUDA 12.9 or later
    (compilation_context.py: "SM 12.x requires CUDA >= 12.9"); for 12.0 it builds sm_120f, with 12.9 too."""
    python = read_only(venvs, "0.5.23", "0.7.0")
    no_cuda = {"CUDA_HOME": str(tmp_path / "cuda")}  # FlashInfer's nvcc: none there
    for cc, build in (("12.1", "CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_121a (trtllm_comm.so)"),
                      ("12.0", "CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_120f (trtllm_comm.so)")):
        done = invoke("doctor", "--python", python, "--to-cc", cc, env=no_nvidia_smi(tmp_path) | no_cuda)
        assert (f"    it needs {build}: no nvcc at {tmp_path}/cuda/bin/nvcc ($CUDA_HOME); "
                f"FlashInfer cannot build the comm module for SM{cc.replace('.', '')}") in out(done)
        said = "\n".join(split_modes(out(done))[0])  # the failure modes' ways out name both (tests/fixes/test_modes.py)
        assert "sm_120a" not in said and ("sm_120f" in said) == (cc == "12.0")
        doc = json.loads(invoke("doctor", "--python", python, "--to-cc", cc, "--json", env=no_nvidia_smi(tmp_path)).stdout)
        said = json.dumps(doc | {"failure_modes": None})
        assert "sm_120a" not in said and ("sm_120f" in said) == (cc == "12.0")
    done = invoke("doctor", "--python", python, env=standin(tmp_path, "gb10") | no_cuda)
    said = "\n".join(split_modes(out(done))[0])
    assert "sm_121a" in said and "sm_120a" not in said
    assert ("    it needs CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_121a (trtllm_comm.so): "
            f"no nvcc at {tmp_path}/cuda/bin/nvcc ($CUDA_HOME); FlashInfer cannot build the comm module for SM121") in out(done)


# What FlashInfer's JIT builds for the fusion, and the CUDA it takes, per FlashInfer release (compilation_context.py,
# tests/fixes/test_need_data.py reads it in the wheels): 0.6.6 and older sm_120a, which CUDA 12.8 knows; from 0.6.7
# sm_120f, below CUDA 12.9 "SM 12.x requires CUDA >= 12.9"; 0.6.7 builds sm_120f on a GB10 too (0.6.8 on: sm_121a).
@pytest.mark.parametrize(("flashinfer", "gpus", "build", "sm"), [
    ("0.6.4", "rtxpro6000-8pcie", "CUDA 12.8 or later and nvcc, for FlashInfer's JIT build of sm_120a (trtllm_comm.so)", "SM120"),
    ("0.6.16.post4", "rtxpro6000-8pcie", "CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_120f (trtllm_comm.so)", "SM120"),
    ("0.6.7", "gb10", "CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_120f (trtllm_comm.so)", "SM121"),
])
def test_the_fusion_needs_the_cuda_of_the_flashinfer_installed(tmp_path: Path, venvs, flashinfer: str, gpus: str, build: str,
                                                               sm: str) -> None:
    """SGLang's gate and FlashInfer's list both name the JIT build of the FlashInfer installed beside SGLang, in
    doctor and in apply."""
    python = str(venvs("0.5.9", flashinfer) / "bin" / "python")  # read only: doctor writes nothing
    env = standin(tmp_path, gpus) | {"CUDA_HOME": str(tmp_path / "cuda")}  # FlashInfer's nvcc: none there
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 1, done.stderr.decode()
    lines = split_modes(out(done))[0]
    need = f"    it needs {build}: no nvcc at {tmp_path}/cuda/bin/nvcc ($CUDA_HOME); FlashInfer cannot build the comm module for {sm}"
    assert lines.count(need) == 2, "\n".join(lines)
    assert [line for line in lines if "FlashInfer's JIT build of" in line and line != need] == []
    assert f"FlashInfer {flashinfer} (installed), from flashinfer_python-{flashinfer}.dist-info" in done.stdout.decode()
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    assert [f"    {line}" for t in doc["targets"] for f in t["fixes"] if f["fix"] == "allreduce-fusion"
            for line in f["effect_here"] if line.startswith("it needs")] == [need, need]
    # apply says the same of both targets (a dry run: nothing written, no lock taken).
    done = invoke("apply", "--python", python, "--fix", "allreduce-fusion", "--to-cc", "12", "--dry-run", "--json", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert [(t["project"], e["needs"]) for t in json.loads(done.stdout)["targets"] for e in t["effects"]] == [
        ("sglang", [build]), ("flashinfer", [build])]


def test_plain_verify_proves_for_the_sm12x_gpus_it_finds(tmp_path: Path, prebuilt) -> None:
    """vLLM 0.33.0 applied with key '12.0' (an RTX PRO 6000's): on a GB10 a plain verify proves for
    12.1, as --to-cc auto does (it said "ok" for the '12.0' applied); with no GPU seen, or on an H200
    (a build machine), it proves what was applied."""
    import subprocess

    checkout = tmp_path / "vllm"
    subprocess.run(["git", "clone", "-q", "--branch", "v0.33.0", str(prebuilt.mirror("vllm")), str(checkout)], check=True,
                   capture_output=True)
    # Not needed for cc 12.0 (no product of it has multicast, and 0.33.0 only warns): applied by name.
    assert invoke("apply", str(checkout), "--to-cc", "12.0", "--fix", "torch-symm-mem", env=no_nvidia_smi(tmp_path)).returncode == 0
    gb10 = standin(tmp_path / "gb10", "gb10")
    done = invoke("verify", str(checkout), "--fix", "torch-symm-mem", env=gb10)
    assert done.returncode == 1, done.stdout.decode()
    lines = out(done)
    assert lines[0] == "this machine: 1 x NVIDIA GB10 (cc 12.1)"
    assert ("vllm/distributed/device_communicators/symm_mem.py: SymmMemCommunicator._WORLD_SIZES_MULTIMEM has no key '12.1' "
            "(the patch is not applied)") in lines
    assert lines[-1] == "verify: 3 problems"
    # Without --fix, the GB10 does not need torch-symm-mem (one GPU): ok, and said why, as doctor says it.
    done = invoke("verify", str(checkout), env=gb10)
    assert done.returncode == 0 and out(done)[2].startswith("not needed here: torch-symm-mem: one GPU, no peer"), done.stdout.decode()
    for env in (no_nvidia_smi(tmp_path), standin(tmp_path / "h200", "h200-1gpu")):
        done = invoke("verify", str(checkout), "--fix", "torch-symm-mem", env=env)
        assert (done.returncode, out(done)[-1]) == (0, "verify: ok (key '12.0' = key '10.0' in every table)")


def test_a_cc_given_gets_the_pcie_all_reduce_where_its_gpus_meet_over_pcie_only(tmp_path: Path, venvs) -> None:
    """Without GPUs, --to-cc 12.0 is a machine whose GPUs can only meet over PCIe (no RTX PRO 6000 or RTX 50 has
    NVLink): SGLang 0.5.23 with FlashInfer 0.7.0 are told of SGLANG_ENABLE_PCIE_IPC_ALLREDUCE (it was never named
    there); a GB10 (12.1) is one GPU, with nothing to all-reduce with."""
    venv = venvs("0.5.23", "0.7.0")
    python = str(venv / "bin" / "python")
    lines = out(invoke("doctor", "--python", python, "--to-cc", "12.0", env=no_nvidia_smi(tmp_path)))
    start = lines.index("all-reduce on two or more GPUs of cc 12.0 (linked through PCIe only: RTX PRO 6000 and RTX 50 have "
                        "no NVLink): FlashInfer's PCIe-IPC all-reduce (pcie_ipc_comm), which SGLang uses for the tensor-parallel "
                        "all-reduce")
    assert lines[start + 1:start + 3] == [
        "  SGLang 0.5.23 and FlashInfer 0.7.0 have it: start the server with SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1", SERVES]
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", "12.0", "--json", env=no_nvidia_smi(tmp_path)).stdout)
    assert (doc["recommendation"]["name"], doc["recommendation"]["available"]) == ("pcie-ipc-allreduce", True)
    gb10 = out(invoke("doctor", "--python", python, "--to-cc", "12.1", env=no_nvidia_smi(tmp_path)))
    assert not any(line.startswith("all-reduce on") for line in gb10)
