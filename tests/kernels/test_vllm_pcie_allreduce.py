"""doctor's all-reduce advice for vLLM on 8 RTX PRO 6000 linked by PCIe (stand-in nvidia-smi), on a
virtualenv with a real flashinfer-python wheel installed by pip and vllm 0.34.0 as its sparse copy
(``fixtures.install_release``).

vLLM 0.30.0 and later turn FlashInfer's PCIe-IPC all-reduce on with VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1
(known-speedups.toml); doctor once said nothing of it, and told a vLLM environment (which holds FlashInfer
too) to "install sglang" for SGLang's SGLANG_ENABLE_PCIE_IPC_ALLREDUCE.  vLLM's files quote no measurement,
and doctor quotes none."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from fixtures import install_release

from support.cli import invoke
from support.venvs import link_installed, make_venv, site_packages

HEAD = ("all-reduce on these GPUs (8 x SM120, linked through PCIe only: no NVLink, no multicast): FlashInfer's PCIe-IPC "
        "all-reduce (PcieIpcAllReduceWorkspace), which vLLM can use for the tensor-parallel all-reduce")
SERVES = ("  it serves tensor-parallel groups of 2, 4 or 8 GPUs on one node, bf16 or fp16 reductions of the hidden size up to "
          "the largest CUDA graph capture size (opt-in \"while its integration is being qualified\", vllm/envs.py; off under "
          "VLLM_BATCH_INVARIANT); the rest stays on vLLM's other all-reduce backends")
NO_MEASUREMENT = "  no measurement: vllm/distributed/device_communicators/flashinfer_pcie_ipc_all_reduce.py quotes none"


def gpus(tmp_path: Path, machine: str) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpus"))
    from standin import standin

    return standin(tmp_path / "smi", machine)


@pytest.fixture(scope="module")
def vllm_with(prebuilt, tmp_path_factory):
    """flashinfer-python version -> a virtualenv with that real wheel and the sparse vllm 0.34.0, made
    once a module: the tests only run doctor, which reads.  The session's template of the wheel is
    linked in (``link_installed``): vllm's files are new ones beside it, and nothing here writes."""
    from support.mirror import default_cache, fetch_wheel

    @functools.cache
    def build(flashinfer: str) -> Path:
        template = prebuilt.venv(fetch_wheel(flashinfer, default_cache(), "flashinfer-python"))
        venv = link_installed(template, make_venv(tmp_path_factory.mktemp(f"vllm-fi-{flashinfer}") / "V"))
        install_release("vllm-0.34.0", site_packages(venv))
        return venv

    return build


def section(lines: list[str]) -> list[str]:
    """The all-reduce section of doctor's report, to the blank line after it."""
    start = lines.index(HEAD)
    return lines[start:lines.index("", start)]


def test_vllm_0340_with_flashinfer_070_is_told_of_its_own_variable(vllm_with, tmp_path: Path) -> None:
    python = str(vllm_with("0.7.0") / "bin" / "python")
    env = gpus(tmp_path, "rtxpro6000-8pcie")
    done = invoke("doctor", "--python", python, env=env)
    # The sparse copy holds none of the bundled DeepGEMM's kernel templates: VLLM_USE_DEEP_GEMM=0 is needed,
    # and a setting missing alone is exit 5, as verify's, named on the last line; the advice is no setting.
    assert done.returncode == 5, done.stdout.decode()
    lines = done.stdout.decode().splitlines()
    assert lines[-1] == ("no patch this machine needs is missing, but a setting is: vllm-deepgemm-off (above; `--format env` "
                         "prints the export lines); vllm 0.34.0 (_deepselect_C.abi3.so) cannot run on them, which matters only "
                         "if the server loads them (above)")
    assert section(lines) == [
        HEAD, "  vLLM 0.34.0 and FlashInfer 0.7.0 have it: start the server with VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1",
        SERVES, NO_MEASUREMENT]
    text = done.stdout.decode()
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" not in text and "sglang" not in text.lower()  # FlashInfer alone is no SGLang
    assert "measured by" not in text
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=env).stdout)
    (advice,) = doc["recommendations"]
    assert doc["recommendation"] == advice
    assert (advice["name"], advice["server"], advice["available"], advice["upgrade"], advice["installed"]) == (
        "vllm-pcie-ipc-allreduce", "vllm", True, [], {"vllm": "0.34.0", "flashinfer": "0.7.0"})
    assert (advice["turn_on"], advice["measured"], advice["measured_by"]) == ("VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1", [], "")


def test_vllm_0340_with_the_flashinfer_vllm_0300_pins_is_told_to_upgrade_flashinfer(vllm_with, tmp_path: Path) -> None:
    """flashinfer-python 0.6.18.post1 (vLLM 0.30.0's pin) has no PcieIpcAllReduceWorkspace: the variable only
    logs vLLM's warning and falls back."""
    python = str(vllm_with("0.6.18.post1") / "bin" / "python")
    lines = invoke("doctor", "--python", python, env=gpus(tmp_path, "rtxpro6000-8pcie")).stdout.decode().splitlines()
    assert section(lines) == [
        HEAD,
        "  it needs vLLM 0.30.0 or later and FlashInfer 0.7.0 or later (VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1): "
        "upgrade flashinfer-python (0.6.18.post1 here)",
        "  with FlashInfer 0.6.18.post1, VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1 only logs \"FlashInfer PCIe IPC all-reduce "
        "was requested but this FlashInfer build does not provide PcieIpcAllReduceWorkspace; falling back to another "
        "all-reduce backend.\"",
        SERVES, NO_MEASUREMENT]


def test_one_gb10_gets_no_all_reduce_advice_with_vllm(vllm_with, tmp_path: Path) -> None:
    python = str(vllm_with("0.7.0") / "bin" / "python")
    done = invoke("doctor", "--python", python, "--json", env=gpus(tmp_path, "gb10"))
    doc = json.loads(done.stdout)
    assert (doc["recommendation"], doc["recommendations"]) == (None, [])
    text = invoke("doctor", "--python", python, env=gpus(tmp_path, "gb10")).stdout.decode()
    assert "all-reduce on" not in text and "PCIE_IPC" not in text
