"""The matcher: which package a missing kernel image names, repeats counted, what is not claimed."""

from __future__ import annotations

from logs import real_text as r

from patchkit.logs.match import EFFECT, FIX, Matcher, apply_commands
from patchkit.logs.tracebacks import Frame, Traceback, TracebackPart

IMAGE = "no kernel image is available for execution on the device"


def judged(frames: list[str], exception: str):
    tb = Traceback(1, "", (TracebackPart(tuple(Frame(p, 1, "f") for p in frames), exception),), False)
    return Matcher().judge(tb)


def test_the_compiled_package_a_frame_names_first() -> None:
    sgl = "/opt/venv/lib/python3.11/site-packages/sgl_kernel/elementwise.py"
    torch_ops = "/opt/venv/lib/python3.11/site-packages/torch/_ops.py"
    assert judged([sgl, torch_ops], f"RuntimeError: RMSNorm failed with error code {IMAGE}").cause.startswith("sgl_kernel was built")
    assert judged(["/x/flashinfer/norm.py"], f"RuntimeError: {IMAGE}").cause.startswith("flashinfer was built")
    # torch's own check raises from C++: no torch frame, its "CUDA error: " names it (gsplat issue 1053)
    assert judged(["/x/gsplat/strategy/default.py"], f"RuntimeError: CUDA error: {IMAGE}").cause.startswith("torch was built")
    assert judged(["/x/a.py"], f"RuntimeError: {IMAGE}").cause.startswith("a compiled package (no frame names it) was built")


def test_key_error_12_only() -> None:
    frames = ["/root/sglang/python/sglang/srt/distributed/device_communicators/torch_symm_mem.py"]
    assert judged(frames, "KeyError: 120") is None
    assert judged(frames, "KeyError: '12.0'") is None
    assert judged(["/root/sglang/python/sglang/srt/models/llama.py"], "KeyError: 12") is None  # not raised by the table
    assert judged(frames, "KeyError: 12").kind == FIX


def test_repeats_are_one_finding() -> None:
    matcher = Matcher()
    lines = r.START + r.KEYERROR + [line.replace("TP3", "TP1") for line in r.KEYERROR] + r.MULTICAST
    for number, text in enumerate(lines, 1):
        matcher.feed(number, text)
    matcher.finish()
    fix, effect = matcher.findings
    at = 3 + r.KEYERROR.index("KeyError: 12")  # the exception's line, not the traceback's first
    assert (fix.kind, fix.count, fix.lines, fix.start) == (FIX, 2, (at, at + len(r.KEYERROR)), 3)
    assert (effect.kind, effect.count) == (EFFECT, 2)
    assert matcher.tracebacks == 2


def test_the_capability_warning_of_later_releases() -> None:
    matcher = Matcher()
    matcher.feed(1, r.CAPABILITY_OFF[0])
    [found] = matcher.findings
    assert (found.kind, found.name, found.releases, found.commands) == (FIX, "torch-symm-mem", "0.5.14 - 0.5.23", ())
    assert found.what == "TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not available."


def test_a_gb10s_capability_warning_is_known_as_12_0s_is() -> None:
    """vLLM's symm_mem.py logs capability.as_version_str(): "12.1" on a GB10 (research on the 0.27.1
    wheel, symm_mem.py lines 58-72; vLLM issue 45604's worker prefix)."""
    line = ("(Worker_TP0_EP0 pid=1158) WARNING [symm_mem.py:67] SymmMemCommunicator: Device capability 12.1 not "
            "supported, communicator is not available.")
    matcher = Matcher()
    matcher.feed(1, line)
    [found] = matcher.findings
    assert (found.kind, found.name, found.project, found.releases) == (FIX, "torch-symm-mem", "vllm", "0.10.2 - 0.33.0")
    assert found.cause == "vLLM's SymmMemCommunicator found no entry for compute capability 12.1 and turned itself off"
    assert found.what == line


def test_apply_commands_point_at_what_ran() -> None:
    checkout = Frame("/root/sglang/python/sglang/srt/x.py", 1, "f")
    installed = Frame("/opt/venv/lib/python3.11/site-packages/flashinfer/jit/comm.py", 1, "f")
    assert apply_commands("torch-symm-mem", (checkout,)) == ("patchkit apply /root/sglang",)
    assert apply_commands("allreduce-fusion", (checkout, installed)) == (
        "patchkit apply /root/sglang --fix allreduce-fusion", "patchkit apply --python /opt/venv/bin/python --fix allreduce-fusion")


def test_the_same_warning_of_every_rank_is_one_finding() -> None:
    """vLLM's workers prefix each line with their process (vLLM issue 45604's format; the warning is
    vLLM 0.33.0's symm_mem.py line 67)."""
    warning = "SymmMemCommunicator: Device capability 12.0 not supported, communicator is not available."
    matcher = Matcher()
    matcher.feed(1, f"(Worker_TP0_EP0 pid=1158) WARNING [symm_mem.py:67] {warning}")
    matcher.feed(2, f"(Worker_TP1_EP1 pid=1159) WARNING [symm_mem.py:67] {warning}")
    [found] = matcher.findings
    assert (found.kind, found.project, found.count, found.lines) == (FIX, "vllm", 2, (1, 2))
