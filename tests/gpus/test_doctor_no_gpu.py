"""patchkit doctor on a host that shows no GPU (an image build), and ``doctor --to-cc CC``: the
real SGLang 0.5.9 wheel installed by pip (``sglang_venv``), the stand-in nvidia-smi of
standin.py (no nvidia-smi on PATH, "No devices were found", a hang, a failing driver, garbled
output; the real H200's output for a machine with GPUs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from standin import no_nvidia_smi, standin
from test_doctor import MEASURED, SERVES

from support.cli import invoke, split_modes
from support.venvs import copy_venv, snapshot

QUERY = "`nvidia-smi --query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader`"
CANNOT = ("no GPU seen, so doctor cannot say what this machine needs (the report is for cc 12.0); "
          "give --to-cc with the cc of the GPUs the server will run on")
# A cc given without GPUs is known to lack multicast, as every product of it does (gpus/products.py); before
# a GB10 was a target of its own these lines said "how the GPUs are linked is not known (none measured)".
PRODUCTS = {"12.0": "RTX PRO 6000 and RTX 50 have no NVLink", "12.1": "GB10 is one GPU"}


def multicast(cc: str = "12.0") -> list[str]:
    why = f"no multicast on any GPU of cc {cc} ({PRODUCTS[cc]})"
    return [f"    the communicator will then turn itself off (\"torch symmetric memory multicast operations are not supported\"): "
            f"{why}; the all-reduce stays on NCCL",
            f"    --enable-torch-symm-mem cannot speed anything up here ({why}): the fix only turns KeyError: 12 into a clean start"]


# Where FlashInfer's JIT looks for nvcc first ($CUDA_HOME/bin/nvcc): a folder without one, whatever this host has.
NO_CUDA = Path(__file__).resolve().parent / "no-cuda"


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch) -> None:
    assert not NO_CUDA.exists()
    monkeypatch.setenv("CUDA_HOME", str(NO_CUDA))


# FlashInfer's JIT build for each cc (the fusion's need, for_cc in its data): sm_121a for a GB10.  No FlashInfer
# is installed here, so the words are those for any release (FlashInfer 0.6.7 - 0.7.0 build sm_120f and want 12.9).
BUILDS = {"12.0": "CUDA 12.8 or later (12.9 or later with FlashInfer 0.6.7 to 0.7.0) and nvcc, for FlashInfer's JIT build of sm_120a or sm_120f",
          "12.1": "CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_121a, or sm_120f with FlashInfer 0.6.7 to 0.6.7.post3"}


def fusion(cc: str = "12.0") -> list[str]:
    return [
        "  allreduce-fusion (opt-in): not applied: _is_sm100_supported in apply_flashinfer_allreduce_fusion() lacks '_is_sm120_supported'",
        "    not needed by default: only with --enable-flashinfer-allreduce-fusion",
        "    without it SGLang never runs the fusion on SM120 (SGLang's fusion gate (_is_sm90_supported or _is_sm100_supported), "
        "communicator.py / add_norm.py)",
        f"    it needs {BUILDS[cc]} (trtllm_comm.so): no nvcc at {NO_CUDA}/bin/nvcc ($CUDA_HOME); FlashInfer cannot build the comm module for SM{cc.replace('.', '')}",
    ]


def projects(venv: Path, python: str, symm: list[str], cc: str = "12.0") -> list[str]:
    """What doctor says of the projects of ``venv`` (SGLang 0.5.9 alone), with ``symm`` the lines of torch-symm-mem."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    return ["", f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info", *symm,
            *fusion(cc), "",
            f"compiled CUDA code: no distribution installed for {python} carries any", ""]


# The DeepGEMM fix (on by default since issue 32): SGLang 0.5.9 enables JIT DeepGEMM on SM12x; its shipped
# patch carries 0.5.13's refusal of SM120 and widens it to 121.
DEEPGEMM_FAILS = ("RuntimeError: Assertion error (.../csrc/apis/attention.hpp:219): Unsupported architecture (the first "
                  "forward, in DeepGEMM's architecture dispatch (csrc/apis/*.hpp), with a DeepGEMM lacking the SM12x kernels)")


# The fix that keeps SGLang from turning the all-reduce fusion on by itself on SM12x (on by default since
# issue 32): 0.5.9 has upstream's narrowing (0.5.8), for 12.0 and 12.1 alike.
SELF_ENABLE = "  fusion-self-enable (on by default): in effect (the release has it)"


def missing(cc: str = "12.0") -> list[str]:
    """The default fixes' lines on SGLang 0.5.9 as released, judged for ``cc``."""
    return [f"  deepgemm-sm12x (on by default): needed for cc {cc}, not applied: SGLang 0.5.13's change is missing from configurer.py; "
            "sm_version == 120 lacks 121", f"    prevents: {DEEPGEMM_FAILS}", SELF_ENABLE,
            f"  torch-symm-mem (on by default): needed for cc {cc}, not applied: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks 12; "
            "_WORLD_SIZES_MULTIMEM lacks 12",
            "    prevents: KeyError: 12 (TorchSymmMemCommunicator.__init__ (torch_symm_mem.py))", *multicast(cc)]


def applied(cc: str = "12.0") -> list[str]:
    return ["  deepgemm-sm12x (on by default): applied (by patchkit)", f"    prevented: {DEEPGEMM_FAILS}", SELF_ENABLE,
            "  torch-symm-mem (on by default): applied (by patchkit)",
            "    prevented: KeyError: 12 (TorchSymmMemCommunicator.__init__ (torch_symm_mem.py))", *multicast(cc)]


ADVICE_HEAD = ("all-reduce on two or more GPUs of cc 12.0 (linked through PCIe only: RTX PRO 6000 and RTX 50 have no NVLink): "
               "FlashInfer's PCIe-IPC all-reduce (pcie_ipc_comm), which SGLang uses for the tensor-parallel all-reduce")
NEEDS = "  it needs SGLang 0.5.21 or later and FlashInfer 0.7.0 or later (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1): upgrade sglang (0.5.9 here), "


def advice(cc: str, python: str) -> list[str]:
    """The PCIe all-reduce doctor names for a cc given whose GPUs can only meet over PCIe (12.0: no RTX PRO 6000
    or RTX 50 has NVLink), for SGLang 0.5.9 alone in the environment of ``python``; none for a GB10 (12.1), one GPU.
    doctor looked in that environment (--python): FlashInfer is not installed there, said plainly."""
    if cc != "12.0":
        return []
    return [ADVICE_HEAD, f"{NEEDS}install flashinfer-python (not installed for {python})", SERVES, *MEASURED, ""]


def lines(done) -> list[str]:
    """doctor's lines but its failure modes (tests/fixes/test_modes.py holds those)."""
    return split_modes(done.stdout.decode().splitlines())[0]


@pytest.mark.parametrize("machine, why", [
    ("missing", "nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH"),
    ("none", "{exe}: " + QUERY + ": No devices were found (the driver sees no NVIDIA GPU)"),
    ("hung", "{exe}: " + QUERY + " did not answer within 0.5 s (a hung driver?); killed it"),
    ("failing", "{exe}: " + QUERY + " failed (exit 18): NVML library version: 580.95"),
    ("garbled", "{exe}: " + QUERY + " printed what patchkit cannot read: line 1 is not index, name, compute_cap, pci.bus_id: "
                "'\\x1b[1mGPU 0: ??? 0x1f'"),
])
def test_a_host_without_gpus_reports_the_projects_and_exits_2(tmp_path: Path, sglang_venv: Path, machine: str, why: str) -> None:
    python = str(sglang_venv / "bin" / "python")  # doctor only reads: the template itself, checked unchanged
    env = no_nvidia_smi(tmp_path) if machine == "missing" else standin(tmp_path, machine)
    env["PATCHKIT_NVIDIA_SMI_TIMEOUT"] = "0.5"
    before = snapshot(sglang_venv)
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 2
    assert done.stderr.decode() == f"patchkit: {CANNOT}\n"
    assert lines(done) == [
        "no GPU seen: " + why.format(exe=tmp_path / "bin" / "nvidia-smi"),
        "cannot say what this machine needs: each fix below is judged for cc 12.0, the GPUs the fixes are for "
        "(--to-cc CC judges for GPUs of that cc)",
        *projects(sglang_venv, python, missing()), *advice("12.0", python),
        f"needed for cc 12.0: deepgemm-sm12x, torch-symm-mem; to apply: patchkit apply --python {python} --to-cc 12",
    ]
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    assert (doc["command"], doc["ok"], doc["exit_code"], doc["machine"], doc["error"]) == ("doctor", False, 2, None, CANNOT)
    assert doc["no_gpu"] == why.format(exe=tmp_path / "bin" / "nvidia-smi")
    assert doc["judged_for"] == {"ccs": ["12.0"], "from": "default"}
    assert [(f["fix"], f["status"], f["needed"]) for f in doc["targets"][0]["fixes"]] == [
        ("deepgemm-sm12x", "missing", True), ("fusion-self-enable", "in effect", False), ("torch-symm-mem", "missing", True),
        ("allreduce-fusion", "missing", False)]
    assert snapshot(sglang_venv) == before


@pytest.mark.parametrize("written, cc", [("12", "12.0"), ("12.0", "12.0"), ("12.1", "12.1")])
def test_to_cc_judges_a_host_without_gpus_for_that_cc(tmp_path: Path, sglang_venv: Path, written: str, cc: str) -> None:
    venv = copy_venv(sglang_venv, tmp_path / "V")
    python = str(venv / "bin" / "python")
    env = no_nvidia_smi(tmp_path)
    head = ["no GPU seen: nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH",
            f"judged for cc {cc} as given (--to-cc {written}) and not measured: how the GPUs are linked is not known"]
    done = invoke("doctor", "--python", python, "--to-cc", written, env=env)
    assert (done.returncode, done.stderr) == (1, b"")
    assert lines(done) == [*head, *projects(venv, python, missing(cc), cc), *advice(cc, python),
                           f"needed for cc {cc}: deepgemm-sm12x, torch-symm-mem; to apply: patchkit apply --python {python} --to-cc 12"]
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", written, "--json", env=env).stdout)
    assert (doc["ok"], doc["exit_code"], doc["needed"], doc["judged_for"]) == (False, 1, ["deepgemm-sm12x", "torch-symm-mem"], {"ccs": [cc], "from": "--to-cc"})
    assert doc["apply"] == f"patchkit apply --python {python} --to-cc 12" and "error" not in doc

    done = invoke("apply", "--python", python, "--to-cc", "12", env=env)
    assert done.returncode == 0, done.stderr.decode()
    done = invoke("doctor", "--python", python, "--to-cc", written, env=env)
    assert (done.returncode, done.stderr) == (0, b"")
    assert lines(done) == [*head, *projects(venv, python, applied(cc), cc), *advice(cc, python), f"nothing GPUs of cc {cc} need is missing"]
    # Without --to-cc it still cannot judge this machine: the state is shown, and the exit stays 2.
    done = invoke("doctor", "--python", python, env=env)
    assert done.returncode == 2 and done.stderr.decode() == f"patchkit: {CANNOT}\n"
    assert lines(done)[2:] == [*projects(venv, python, applied()), *advice("12.0", python), "nothing GPUs of cc 12.0 need is missing"]


def test_to_cc_wins_over_the_gpus_nvidia_smi_shows(tmp_path: Path, sglang_venv: Path) -> None:
    """On the real H200's output (cc 9.0, a key the tables hold): plain doctor needs nothing;
    --to-cc 12 lists the H200 and judges for cc 12.0, saying so."""
    python = str(sglang_venv / "bin" / "python")
    env = standin(tmp_path, "h200-1gpu")
    gpus = [f"GPUs ({tmp_path}/bin/nvidia-smi):", "  GPU0  NVIDIA H200  cc 9.0 (SM90)  00000000:00:06.0",
            "links: one GPU: no peer to link to, no multicast"]
    assert invoke("doctor", "--python", python, env=env).returncode == 0
    done = invoke("doctor", "--python", python, "--to-cc", "12", env=env)
    assert (done.returncode, done.stderr) == (1, b"")
    assert lines(done) == [
        *gpus, "judged for cc 12.0 as given (--to-cc 12) instead of the GPUs above: how GPUs of cc 12.0 would be linked is not known",
        *projects(sglang_venv, python, missing()), *advice("12.0", python),
        f"needed for cc 12.0: deepgemm-sm12x, torch-symm-mem; to apply: patchkit apply --python {python} --to-cc 12"]
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", "12", "--json", env=env).stdout)
    assert doc["machine"]["gpus"] == [{"index": 0, "name": "NVIDIA H200", "cc": "9.0", "bus_id": "00000000:00:06.0"}]
    assert (doc["no_gpu"], doc["judged_for"], doc["exit_code"]) == (None, {"ccs": ["12.0"], "from": "--to-cc"}, 1)
    # --to-cc 9.0: the H200's own cc, given: the release holds key 9.
    done = invoke("doctor", "--python", python, "--to-cc", "9.0", env=env)
    assert done.returncode == 0
    assert lines(done)[6:10] == ["  deepgemm-sm12x (on by default): not for GPUs of cc 9.0",
                                "  fusion-self-enable (on by default): not for GPUs of cc 9.0",
                                "  torch-symm-mem (on by default): not needed: the release holds key 9 for GPUs of cc 9.0",
                                "  allreduce-fusion (opt-in): not for GPUs of cc 9.0"]
    assert lines(done)[-1] == "nothing GPUs of cc 9.0 need is missing"


# One message for every value that is no cc of an NVIDIA GPU, in every command (it was two: "not a compute
# capability NVIDIA has (1.0 to 15.x)" and "not a compute capability such as 12, 12.0 or 12.1, nor auto").
NOT_NVIDIA = ("is not the compute capability of an NVIDIA GPU: NVIDIA's are 3.0 3.2 3.5 3.7 5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 "
              "7.5 8.0 8.6 8.7 8.8 8.9 9.0 10.0 10.1 10.3 11.0 12.0 12.1, written like 12.1, 12 (for 12.0) or sm_121a")


@pytest.mark.parametrize("value, why", [
    ("99", f"--to-cc '99' {NOT_NVIDIA}"),
    ("9999.0", f"--to-cc '9999.0' {NOT_NVIDIA}"),
    ("0", f"--to-cc '0' {NOT_NVIDIA}"),
    ("12.10", f"--to-cc '12.10' {NOT_NVIDIA}"),
    ("abc", f"--to-cc 'abc' {NOT_NVIDIA}"),
    ("", f"--to-cc '' {NOT_NVIDIA}"),
    ("sm12x", f"--to-cc 'sm12x' {NOT_NVIDIA}"),  # sm120 is a cc now, as nvcc and SGLang's flags name it
    ("12.5", f"--to-cc '12.5' {NOT_NVIDIA}"),  # was judged for, as a GPU of cc 12.5
])
def test_a_bad_to_cc_is_one_line(tmp_path: Path, sglang_venv: Path, value: str, why: str) -> None:
    python = str(sglang_venv / "bin" / "python")
    done = invoke("doctor", "--python", python, "--to-cc", value, env=no_nvidia_smi(tmp_path))
    assert (done.returncode, done.stdout, done.stderr.decode()) == (2, b"", f"patchkit: {why}\n")
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", value, "--json", env=no_nvidia_smi(tmp_path)).stdout)
    assert doc == {"schema": 2, "command": "doctor", "ok": False, "exit_code": 2, "error": why, "path": None}


def test_a_bad_time_limit_is_bad_input_even_with_to_cc(tmp_path: Path, sglang_venv: Path) -> None:
    env = dict(standin(tmp_path, "h200-1gpu"), PATCHKIT_NVIDIA_SMI_TIMEOUT="nan")
    done = invoke("doctor", "--python", str(sglang_venv / "bin" / "python"), "--to-cc", "12", env=env)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode() == "patchkit: PATCHKIT_NVIDIA_SMI_TIMEOUT='nan' is not a number of seconds above 0\n"


def not_for(venv: Path, python: str, cc: str) -> list[str]:
    """What doctor says of SGLang 0.5.9 as released, judged for GPUs of ``cc``, a cc the fixes are not for."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    return ["", f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
            f"  deepgemm-sm12x (on by default): not for GPUs of cc {cc}",
            f"  fusion-self-enable (on by default): not for GPUs of cc {cc}",
            f"  torch-symm-mem (on by default): not for GPUs of cc {cc}",
            f"  allreduce-fusion (opt-in): not for GPUs of cc {cc}", "",
            f"compiled CUDA code: no distribution installed for {python} carries any", "",
            f"nothing GPUs of cc {cc} need is missing"]


@pytest.mark.parametrize("written, cc", [("8.0", "8.0"), ("8", "8.0"), ("11.0", "11.0")])
def test_to_cc_of_gpus_the_fixes_are_not_for(tmp_path: Path, sglang_venv: Path, written: str, cc: str) -> None:
    """An A100 (8.0) or a cc 11.0 GPU: SGLang 0.5.9 lacks their key too, but torch-symm-mem copies SM100's
    keys for SM120 only, so it is not for them, not missing: exit 0 (it said "needed", exit 1)."""
    python = str(sglang_venv / "bin" / "python")
    done = invoke("doctor", "--python", python, "--to-cc", written, env=no_nvidia_smi(tmp_path))
    assert (done.returncode, done.stderr) == (0, b"")
    assert lines(done) == ["no GPU seen: nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH",
                           f"judged for cc {cc} as given (--to-cc {written}) and not measured: how the GPUs are linked is not known",
                           *not_for(sglang_venv, python, cc)]
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", written, "--json", env=no_nvidia_smi(tmp_path)).stdout)
    assert (doc["ok"], doc["exit_code"], doc["needed"], doc["apply"]) == (True, 0, [], None)
    assert [(f["fix"], f["status"], f["missing"], f["needed"], f["why"]) for f in doc["targets"][0]["fixes"]] == [
        ("deepgemm-sm12x", "not for these GPUs", [], False, f"not for GPUs of cc {cc}"),
        ("fusion-self-enable", "not for these GPUs", [], False, f"not for GPUs of cc {cc}"),
        ("torch-symm-mem", "not for these GPUs", [], False, f"not for GPUs of cc {cc}"),
        ("allreduce-fusion", "not for these GPUs", [], False, f"not for GPUs of cc {cc}")]
    # Over the real H200's output: the H200 is listed, and the judgement is the same.
    env = standin(tmp_path, "h200-1gpu")
    done = invoke("doctor", "--python", python, "--to-cc", written, env=env)
    assert (done.returncode, done.stderr) == (0, b"")
    assert lines(done) == [f"GPUs ({tmp_path}/bin/nvidia-smi):", "  GPU0  NVIDIA H200  cc 9.0 (SM90)  00000000:00:06.0",
                           "links: one GPU: no peer to link to, no multicast",
                           f"judged for cc {cc} as given (--to-cc {written}) instead of the GPUs above: how GPUs of cc {cc} "
                           "would be linked is not known", *not_for(sglang_venv, python, cc)]


@pytest.mark.parametrize("command", ["apply", "verify"])
def test_to_cc_auto_adds_no_key_the_fixes_are_not_for(tmp_path: Path, sglang_venv: Path, monkeypatch, command: str) -> None:
    """--to-cc auto on GPUs of cc 8.0, given as --to-cc 8.0 gives them (no real A100 output is at hand): apply
    writes no key 8 (it wrote one), verify proves none (it failed on it)."""
    from patchkit.gpus.smi import given
    from patchkit.judge import auto

    monkeypatch.setattr(auto, "read_machine", lambda *_: given(CC(8, 0)))
    venv = copy_venv(sglang_venv, tmp_path / "V")
    python = str(venv / "bin" / "python")
    site = next((venv / "lib").glob("python3*/site-packages"))
    before = snapshot(venv)
    done = invoke(command, "--python", python, "--to-cc", "auto", env=no_nvidia_smi(tmp_path))
    assert (done.returncode, done.stderr) == (0, b"")
    judged = [f"{python}: SGLang (wheel); not installed: vLLM, FlashInfer"] if command == "verify" else []  # what verify judged
    assert lines(done)[1:] == [*judged, f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
                               "nothing to do: no fix for SGLang is for this machine's GPUs (key 8)"]
    assert snapshot(venv) == before


def test_to_cc_auto_adds_only_the_key_a_fix_is_for(tmp_path: Path, sglang_venv: Path, monkeypatch) -> None:
    """GPUs of cc 8.0 and 12.0 (given): apply --to-cc auto adds key 12 and not 8 (it refused: two keys)."""
    from patchkit.gpus.smi import given
    from patchkit.judge import auto
    from patchkit.rewrite.evaluate import tables

    monkeypatch.setattr(auto, "read_machine", lambda *_: given(CC(8, 0), CC(12, 0)))
    venv = copy_venv(sglang_venv, tmp_path / "V")
    done = invoke("apply", "--python", str(venv / "bin" / "python"), "--to-cc", "auto", env=no_nvidia_smi(tmp_path))
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    utils = next((venv / "lib").glob("python3*/site-packages")) / "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
    (table,) = tables(utils.read_bytes(), ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",), str(utils)).values()
    assert sorted(table) == [9, 10, 12] and table[12] == table[10]


def test_path_targets_hint_that_python_finds_every_project(tmp_path: Path, sglang_venv: Path) -> None:
    """Targets named by PATH (here SGLang's folder): FlashInfer is not among them, whether or not installed
    beside it, and the advice keeps the hint that --python finds every project installed."""
    site = next((sglang_venv / "lib").glob("python3*/site-packages"))
    done = invoke("doctor", str(site / "sglang"), "--to-cc", "12", env=no_nvidia_smi(tmp_path))
    assert (done.returncode, done.stderr) == (1, b""), done.stdout.decode()
    at = lines(done).index(ADVICE_HEAD)
    assert lines(done)[at + 1] == (f"{NEEDS}install flashinfer-python (not among the targets; `--python EXE` finds every "
                                   "project installed for EXE)")
from patchkit.cc import CC
