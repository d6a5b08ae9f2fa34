"""An OSError is exit 2 with the file it concerns (README, exit codes): a log linked to
``/proc/self/mem`` (reading it fails with EIO), a log that becomes a folder while watched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from support.cli import invoke, run_cli


def _one_line(done, prefix: str) -> str:
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b""), err
    assert err.startswith(prefix) and err.count("\n") == 1 and err.endswith("\n"), err
    return err


def test_diagnose_a_log_linked_to_proc_self_mem(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.symlink_to("/proc/self/mem")
    assert _one_line(invoke("diagnose", str(log)), f"patchkit: {log}: ") == f"patchkit: {log}: Input/output error\n"


def test_watch_a_log_linked_to_proc_self_mem(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.symlink_to("/proc/self/mem")
    _one_line(run_cli("watch", str(log), "--timeout", "5"), f"patchkit: {log}: ")


def test_watch_a_log_that_becomes_a_folder(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"[2026-02-11 10:02:41] server_args=ServerArgs(model_path='Qwen/Qwen3-8B')\n")
    proc = subprocess.Popen([sys.executable, "-m", "patchkit", "watch", str(log), "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not any(os.path.exists(f"/proc/{proc.pid}/fd/{fd}") and os.readlink(f"/proc/{proc.pid}/fd/{fd}") == str(log)
                  for fd in os.listdir(f"/proc/{proc.pid}/fd")):
        assert time.monotonic() < deadline and proc.poll() is None, "watch never opened the log"
        time.sleep(0.01)
    log.unlink()
    log.mkdir()
    out, err = proc.communicate(timeout=30)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert _one_line(done, f"patchkit: {log}: ") == f"patchkit: {log}: Is a directory\n"
