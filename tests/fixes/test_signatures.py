"""Signatures, known failures and effects are data: read from the fixes' TOML and
known-failures.toml, and a wrong file is one BadInput line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.fixes.load import HERE, read_fixes
from patchkit.fixes.signatures import KNOWN, read_known


def test_the_shipped_data() -> None:
    known = read_known()
    assert [(s.fix, s.project, s.exception or s.log, s.releases) for s in known.signatures] == [
        ("allreduce-fusion", "flashinfer", "No supported CUDA architectures found for major versions [9, 10]", "0.5.0 - 0.6.16.post4"),
        ("deepgemm-sm12x", "sglang", "): Unsupported architecture", "0.5.4 - 0.5.20"),
        ("torch-symm-mem", "sglang", "KeyError: 12", "0.5.4.post3 - 0.5.13.post1"),
        ("torch-symm-mem", "sglang", "KeyError: 12", "0.5.3 - 0.5.4.post2"),
        ("torch-symm-mem", "sglang", "TorchSymmMemCommunicator: Device capability 12 not supported", "0.5.14 - 0.5.23"),
        ("torch-symm-mem", "vllm", "SymmMemCommunicator: Device capability 12.0 not supported", "0.10.2 - 0.33.0"),
        # vLLM prints capability.as_version_str(): a GB10's 12.1 is a signature too, from the same data.
        ("torch-symm-mem", "vllm", "SymmMemCommunicator: Device capability 12.1 not supported", "0.10.2 - 0.33.0"),
    ]
    assert known.signatures[-1].cause == "vLLM's SymmMemCommunicator found no entry for compute capability 12.1 and turned itself off"
    assert [s.raised_in for s in known.signatures[2:4]] == [("*/torch_symm_mem.py",), ("*/device_communicators/symm_mem.py",)]
    # DeepGEMM's text names no project: SGLang's fix only where SGLang's frames show (issue 42).
    assert [s.fix for s in known.signatures if s.framed] == ["deepgemm-sm12x"]
    failure = known.failures[0]
    assert [p.name for p in failure.packages] == ["sgl_kernel", "flashinfer", "torch"]
    # The failures a setting cures (known-settings.toml), by a traceback's exception or a line of their own.
    assert [(f.name, f.setting, f.exception is None, [p.name for p in f.packages]) for f in known.failures[1:]] == [
        ("triton-ptxas-sm121a", "triton-ptxas", True, []), ("triton-ptxas-error", "triton-ptxas", False, ["triton"]),
        ("deepgemm-unsupported-architecture", None, False, ["vllm", "sglang", "deep_gemm"]),
        ("flashinfer-trtllm-attention", None, False, ["sglang", "vllm", "flashinfer"]),
        ("nccl-illegal-address", "nccl-upgrade", True, [])]
    assert [e.name for e in known.effects] == ["no-multicast", "one-gpu"]
    assert "known-failures" not in read_fixes() and "known-settings" not in read_fixes()  # not fixes


@pytest.mark.parametrize(
    ("signature", "reason"),
    [
        ('project = "sglang"\nreleases = "1"\ncause = "c"', "torch-symm-mem, signature 1: a signature names 'exception' or 'log', one of them"),
        ('project = "sglang"\nexception = "E"\nlog = "L"\nreleases = "1"\ncause = "c"', "torch-symm-mem, signature 1: a signature names 'exception' or 'log', one of them"),
        ('project = "sglang"\nlog = "L"\nraised_in = ["*/x.py"]\nreleases = "1"\ncause = "c"', "torch-symm-mem, signature 1: 'raised_in' needs 'exception'"),
        ('project = "sglang"\nexception = "E"\nreleases = "1"', "torch-symm-mem, signature 1: 'cause' is missing or not str"),
        ('project = "sglang"\nlog = "L"\nframed = true\nreleases = "1"\ncause = "c"', "torch-symm-mem, signature 1: 'framed' needs 'exception'"),
        ('project = "sglang"\nexception = "E"\nframed = "yes"\nreleases = "1"\ncause = "c"', "torch-symm-mem, signature 1: 'framed' is missing or not bool"),
    ],
)
def test_a_wrong_signature_is_one_line(tmp_path: Path, signature: str, reason: str) -> None:
    for name in ("projects.toml", KNOWN):
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / "torch-symm-mem.toml").write_text(f"[[signatures]]\n{signature}\n")
    with pytest.raises(BadInput) as exc:
        read_known(tmp_path)
    assert str(exc.value) == f"{tmp_path / 'torch-symm-mem.toml'}: {reason}"
