"""``patchkit doctor --format markdown``: the report to paste into an upstream issue, with the home
folder and the launch line's secrets redacted."""

from __future__ import annotations

from pathlib import Path

from gpus.standin import standin

from patchkit.render.markdown import launch_line, redact
from support.cli import invoke
from support.mirror import default_cache, fetch_wheel


def test_secrets_and_home_folders_are_redacted(monkeypatch) -> None:
    monkeypatch.setenv("HOME", "/home/ana")
    assert launch_line(("vllm", "serve", "/home/ana/models/q", "--api-key", "s3cret", "--hf-token=hf_AbCdEfGhIjKl",
                        "--tensor-parallel-size", "2")) == \
        "vllm serve ~/models/q --api-key '<redacted>' '--hf-token=<redacted>' --tensor-parallel-size 2"
    assert redact("/root/x and /home/bob/y, token hf_0123456789abcdef, \x1b[31mred") == \
        "~/x and ~/y, token <redacted>, ^[[31mred"


def test_doctor_pastes_cleanly(tmp_path: Path, prebuilt) -> None:
    venv = prebuilt.venv(fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))
    env = dict(standin(tmp_path / "pcie", "rtxpro6000-8pcie"), HOME=str(tmp_path))
    done = invoke("doctor", "--python", str(venv / "bin/python"), "--format", "markdown", "--", "python3", "-m",
                  "sglang.launch_server", "--model-path", f"{tmp_path}/m", "--api-key", "k", "--tp", "8",
                  "--enable-flashinfer-allreduce-fusion", env=env)
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[:4] == ["### Environment (patchkit doctor --format markdown)", "", "| GPU | name | cc | bus |", "|---|---|---|---|"]
    assert lines[4] == "| 0 | NVIDIA RTX PRO 6000 Blackwell Workstation Edition | 12.0 | 00000000:01:00.0 |"
    assert "| flashinfer-python | 0.6.4 |" in lines
    at = lines.index("```sh")
    assert lines[at + 1] == ("python3 -m sglang.launch_server --model-path ~/m --api-key '<redacted>' --tp 8 "
                             "--enable-flashinfer-allreduce-fusion")
    assert "- **flashinfer-jit-arch-list** (exposed; crash): A FlashInfer JIT module's architecture list leaves out SM12x; " \
           "flashinfer-python 0.6.4" in lines
    assert not any("\x1b" in line or "k'" in line for line in lines)
    refused = invoke("doctor", "--python", str(venv / "bin/python"), "--format", "markdown", "--json", env=env)
    assert refused.returncode == 2 and b"give --json or --format markdown, not both" in refused.stderr
