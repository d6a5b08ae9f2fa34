"""Which checkout or environment a frame ran from: the target of patchkit apply, as the words of its command line."""

from __future__ import annotations

import pytest

from patchkit.logs.origin import target, targets


@pytest.mark.parametrize(
    ("path", "package", "root", "expected"),
    [
        ("/root/sglang/python/sglang/srt/managers/scheduler.py", "sglang", "python", ("/root/sglang",)),
        ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", "sglang", "python", ("/sgl-workspace/sglang",)),  # SGLang issue 2384
        ("/opt/venv/lib/python3.11/site-packages/sglang/srt/x.py", "sglang", "python", ("--python", "/opt/venv/bin/python")),
        ("/opt/conda/lib/python3.11/site-packages/sglang/srt/x.py", "sglang", "python", ("--python", "/opt/conda/bin/python")),  # RLinf issue 92
        ("/usr/local/lib/python3.12/dist-packages/sglang/srt/x.py", "sglang", "python", ("--python", "/usr/bin/python3.12")),  # SGLang issue 11830
        ("/usr/local/lib/python3.12/dist-packages/flashinfer/jit/comm.py", "flashinfer", "", ("--python", "/usr/bin/python3.12")),
        ("/usr/local/lib/python3.12/dist-packages/flashinfer/jit/comm.py", "sglang", "python", None),
        ("/home/me/vllm/vllm/distributed/x.py", "vllm", "", ("/home/me/vllm",)),
        ("/tmp/u/torch_symm_mem.py", "sglang", "python", None),
    ],
)
def test_target(path: str, package: str, root: str, expected: tuple[str, ...] | None) -> None:
    assert target(path, package, root) == expected


def test_targets_in_order_and_distinct() -> None:
    paths = ["/usr/local/lib/python3.12/dist-packages/sglang/a.py", "/usr/local/lib/python3.12/dist-packages/flashinfer/b.py"]
    assert targets(paths, [("sglang", "python"), ("flashinfer", "")]) == [("--python", "/usr/bin/python3.12")]
    paths = ["/root/sglang/python/sglang/a.py", "/usr/local/lib/python3.12/dist-packages/flashinfer/b.py"]
    assert targets(paths, [("sglang", "python"), ("flashinfer", "")]) == [("/root/sglang",), ("--python", "/usr/bin/python3.12")]
