"""Ctrl-C while patchkit starts a child (nvidia-smi, the interpreter probe): the child's pid is
known only once Popen returns, so the interrupt is held back until then and raised where the
child's whole session is killed; no child is left running."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from patchkit import bounded
from patchkit.errors import Interrupted
from patchkit.signals import on_sigint


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_ctrl_c_inside_popen_still_ends_the_child(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = subprocess.Popen
    started: list[int] = []

    def popen_then_ctrl_c(*args, **kwargs):
        proc = real(*args, **kwargs)
        started.append(proc.pid)
        os.kill(os.getpid(), signal.SIGINT)  # as if it came before Popen returned
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen_then_ctrl_c)
    before = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(Interrupted):
            bounded.run(["sleep", "1000"], limit=60.0, cap=1 << 16)
    finally:
        signal.signal(signal.SIGINT, before)
    assert len(started) == 1 and _gone(started[0])


def test_a_child_that_cannot_start_is_the_oserror_alone(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        bounded.run([str(tmp_path / "no-such-program")], limit=5.0, cap=1 << 16)
