"""Every file patchkit reads from an environment or a target is a regular file read within a
cap, every JSON document within a depth, and the interpreter probe within a time and a byte
limit: a FIFO, a link to /dev/zero, a 3 GB sparse file, a million brackets or a program that is
no interpreter is one line naming it and exit 2, never a hang, a MemoryError or a traceback.

Each environment is a copy of conftest's ``sglang_venv`` (the real 0.5.9 wheel installed by
pip).  The commands run in a subprocess with a hang guard: before this was bounded, a FIFO
blocked ``open()`` for good.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import PROCESS_ENV
from support.repos import GIT_ENV
from support.venvs import copy_venv

HANG_GUARD = 60
DC = "sglang/srt/distributed/device_communicators"
ENV = {**os.environ, **GIT_ENV, **{k: v for k, v in PROCESS_ENV.items() if v}}


def pk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, env=ENV, timeout=HANG_GUARD)


def site_of(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


@pytest.fixture
def venv(sglang_venv: Path, tmp_path: Path) -> Path:
    return copy_venv(sglang_venv, tmp_path / "V")


def one_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    err = done.stderr.decode()
    assert done.returncode == code, (done.returncode, done.stdout.decode(), err)
    assert err.count("\n") == 1 and "Traceback" not in err and done.stdout == b"", err
    return err.rstrip("\n")


def _wheel_gone(site: Path, tmp: Path) -> Path:
    """The package moved to a checkout an .egg-link names, the dist-info removed (setup.py develop's layout)."""
    checkout = tmp / "sglang"
    shutil.move(site / "sglang", checkout / "python/sglang")
    shutil.rmtree(site / "sglang-0.5.9.dist-info")
    return site / "sglang.egg-link"


# (what is replaced, how patchkit names it)
PLACES = {
    "direct_url.json": (lambda site, tmp: site / "sglang-0.5.9.dist-info/direct_url.json", "direct_url.json"),
    "a .pth": (lambda site, tmp: site / "aaa.pth", ".pth file"),
    "an .egg-link": (_wheel_gone, "file"),
}


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero"])
@pytest.mark.parametrize("place", sorted(PLACES))
def test_a_fifo_or_a_device_in_the_environment(venv: Path, tmp_path: Path, place: str, kind: str) -> None:
    where, what = PLACES[place]
    path = where(site_of(venv), tmp_path)
    path.unlink(missing_ok=True)
    if kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    started = time.monotonic()
    line = one_line(pk("verify", "--python", str(venv)))
    noun = "a FIFO" if kind == "FIFO" else "a device"
    assert line == f"patchkit: {path}: {noun}, not a regular file: patchkit reads a {what} from regular files only"
    assert time.monotonic() - started < HANG_GUARD / 2


def test_a_3_gb_sparse_candidate_file(venv: Path) -> None:
    huge = site_of(venv) / DC / "huge.py"
    with open(huge, "wb") as f:
        f.truncate(3 << 30)
    for command in ("verify", "apply", "status"):
        assert one_line(pk(command, "--python", str(venv))) == (
            f"patchkit: {huge}: 3072 MiB, more than the 64 MiB patchkit reads of a source file")


def test_a_candidate_fifo_or_device_is_no_candidate(venv: Path) -> None:
    """Leaves alone: a FIFO or a link to /dev/zero among the candidates holds no table, a FIFO
    where a module's bytecode would be is not bytecode; apply patches the rest."""
    folder = site_of(venv) / DC
    os.mkfifo(folder / "pipe.py")
    (folder / "zero.py").symlink_to("/dev/zero")
    (folder / "__pycache__").mkdir()
    os.mkfifo(folder / "__pycache__/torch_symm_mem.cpython-311.pyc")
    done = pk("status", "--python", str(venv))
    assert done.returncode == 0, done.stderr.decode()
    assert f"  {DC}/torch_symm_mem.py: original release file; 0 cached bytecode files" in done.stdout.decode().splitlines()
    done = pk("apply", "--python", str(venv))
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines()[1].startswith("applied shipped patch patches/0.5.9/")


def test_a_deeply_nested_direct_url_json(venv: Path) -> None:
    direct = site_of(venv) / "sglang-0.5.9.dist-info/direct_url.json"
    direct.write_text("[" * 100_000 + "]" * 100_000)
    assert one_line(pk("verify", "--python", str(venv))) == (
        f"patchkit: {direct}: unreadable direct_url.json (nested more than 64 levels deep)")


def test_brackets_inside_strings_are_no_nesting(venv: Path) -> None:
    """Leaves alone: a direct_url.json of a wheel whose url holds a hundred brackets is read as JSON."""
    direct = site_of(venv) / "sglang-0.5.9.dist-info/direct_url.json"
    direct.write_text(json.dumps({"url": "file:///tmp/" + "[{" * 100 + "/sglang-0.5.9-py3-none-any.whl", "archive_info": {}}))
    done = pk("verify", "--python", str(venv))
    assert done.returncode == 1, done.stderr.decode()


def test_a_deeply_nested_state_json(venv: Path) -> None:
    state = site_of(venv) / ".patchkit-sglang/state.json"
    state.parent.mkdir()
    state.write_text('{"format": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for command in ("verify", "apply", "status", "revert"):
        assert one_line(pk(command, "--python", str(venv))) == (
            f"patchkit: {state}: corrupt patchkit state (nested more than 64 levels deep); remove it to start over")


def test_a_program_that_is_no_interpreter() -> None:
    """``ls`` given the probe's options: its complaint, in one line, and nothing of patchkit's probe code."""
    line = one_line(pk("verify", "--python", "/bin/ls"))
    assert line == "patchkit: /bin/ls: did not answer as a Python interpreter (exit 2: /bin/ls: cannot access '-': No such file or directory)"


def test_a_program_that_prints_without_end(tmp_path: Path) -> None:
    """A "python" that prints for ever (``yes``): stopped at the probe's byte cap, at once."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec yes 'not an interpreter'\n")
    python.chmod(0o755)
    started = time.monotonic()
    line = one_line(pk("verify", "--python", str(python)))
    assert line == f"patchkit: {python}: did not answer as a Python interpreter (more than 1048576 bytes of output; stopped it)"
    assert time.monotonic() - started < 10
