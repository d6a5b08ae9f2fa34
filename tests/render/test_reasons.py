"""Reasons are values below render/, said in one place (``render.reasons.said``: the planner's
from ``render/reasons.py``, the judge's from ``render/judged.py``), each with its code;
docs/REFERENCE.md lists the codes."""

from __future__ import annotations

import inspect
import re

import pytest

from patchkit.fixes.effects import Fails, Outcome
from patchkit.judge import reasons as judge
from patchkit.plan import reasons as plan
from patchkit.render import judged, reasons
from patchkit.render.reasons import code, said
from patchkit.types import CANNOT_APPLY, INCOMPLETE, Reason
from patchkit.values import Value
from support.repos import ROOT

CLASSES = [c for m in (judge, plan) for _, c in inspect.getmembers(m, inspect.isclass)
           if issubclass(c, Value) and c.__module__ == m.__name__]


def test_the_reference_lists_exactly_the_reason_codes() -> None:
    doc = (ROOT / "docs" / "REFERENCE.md").read_text()
    section = doc[doc.index("### Reasons in `--json`"):]
    section = section[: section.index("\n### ", 1)]
    listed = re.findall(r"^\| `([a-z-]+)` \|", section, re.M)
    assert sorted(listed) == sorted(Reason) and len(listed) == len(set(listed))


def test_every_reason_is_said_and_every_code_is_some_reason() -> None:
    """Each reason class (but the base of the ways a release changed) has its sentence, and the
    codes the classes carry are the enum's, each at least once."""
    said_for = set(reasons._SENTENCES) | set(judged.SENTENCES)
    assert not set(reasons._SENTENCES) & set(judged.SENTENCES)
    assert all(c.__module__ == plan.__name__ for c in reasons._SENTENCES)  # no judge's reason there
    assert all(c.__module__ == judge.__name__ for c in judged.SENTENCES)
    assert [c.__name__ for c in CLASSES if c not in said_for and c is not plan.ReleaseChanged] == []
    codes = {c.code for c in CLASSES if isinstance(inspect.getattr_static(c, "code", None), Reason)}
    codes |= {plan.Blocked("f", s, "SGLang", "0.5.9", "", False).code for s in (CANNOT_APPLY, INCOMPLETE)}
    codes |= {plan.StaleJitBuild(type("Build", (), {"droppable": d})()).code for d in (True, False)}
    assert sorted(codes) == sorted(Reason)


SYMM = Fails("sglang", "0.5.14", "0.5.23", Outcome.WARNING, "TorchSymmMemCommunicator: Device capability 12 not supported", "here")


@pytest.mark.parametrize("reason, sentence, reason_code", [
    (judge.Lacks((("MAX_SIZES", 12), ("_WORLD_SIZES", "12.0"))), "MAX_SIZES lacks 12; _WORLD_SIZES lacks '12.0'", "lacks-key"),
    (judge.NoTableIn("FlashInfer", "0.6.4"), "no table, list or gate of it in FlashInfer 0.6.4", "no-table"),
    (judge.NoMulticast(judge.Peers.ONE_GPU), "one GPU, no peer to share multicast memory with", "no-multicast"),
    (judge.NoNvcc("/usr/local/cuda/bin/nvcc", "/usr/local/cuda"), "no nvcc at /usr/local/cuda/bin/nvcc (/usr/local/cuda)", "no-nvcc"),
    (judge.Unneeded(judge.NoMulticast(judge.Peers.PCIE_ONLY), "SGLang", "0.5.23", (SYMM,), "it would add nothing"),
     'no multicast between PCIe GPUs, and without it SGLang 0.5.23 warns "TorchSymmMemCommunicator: Device capability 12 '
     'not supported"; it would add nothing', "not-needed-here"),
    (judge.CleanStartOnly("--enable-torch-symm-mem", judge.NoNvcc("/opt/cuda/bin/nvcc", "$CUDA_HOME"), ("KeyError: 12", "a hang")),
     "--enable-torch-symm-mem cannot speed anything up here (no nvcc at /opt/cuda/bin/nvcc ($CUDA_HOME)): the fix only turns KeyError: 12 and a hang "
     "into a clean start", "clean-start-only"),
    (plan.OtherVersion("SGLang", "0.5.9", "0.5.23", False), "SGLang 0.5.9 was patched; 0.5.23 is checked out now", "other-version"),
    (plan.OriginalsAgain("vLLM", None, None, True),
     "vLLM (version unknown) was patched; its files were reinstalled since (they are the originals again)", "originals-again"),
    (plan.Blocked("allreduce-fusion", INCOMPLETE, "SGLang", "0.5.23", "a gate", True),
     "allreduce-fusion left out: allreduce-fusion incomplete on SGLang 0.5.23: a gate", "gates-left"),
    (plan.KeyDiffers("a.py", "T", 12, [8], 10, [6, 8], False),
     "a.py: T has a key 12 that patchkit did not add, left as it is: T[12] = [8] differs from T[10] = [6, 8]", "key-differs"),
])
def test_a_reason_is_said_as_the_text_says_it_with_its_code(reason, sentence: str, reason_code: str) -> None:
    assert (said(reason), code(reason)) == (sentence, reason_code)


def test_no_reason_is_said_as_none() -> None:
    assert (said(None), code(None)) == (None, None)
