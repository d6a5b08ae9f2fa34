"""What apply, verify and revert leave out at start-up (docs/ARCHITECTURE.md, "Start-up"): a
module a command does not use costs every run its import.  Each run here is the real command in a
new process on a real checkout; the modules it imported are read back when it exits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import __version__
from support.cli import PROCESS_ENV, invoke
from support.repos import GIT_ENV

# Run patchkit's entry point, then write the names of the modules it imported to argv[1].
_PROBE = """
import sys
out = sys.argv.pop(1)
from patchkit.__main__ import main
try:
    main()
finally:
    open(out, "w").write("\\n".join(sorted(sys.modules)))
"""

# What a user waits for when it is imported (each a second or a good part of one, or many
# milliseconds), with the reason a command leaves it out: what brings it in, and what it does instead.
NOT_AT_START = {
    "libcst": "the rewriter's parser: a shipped patch is applied as a diff, and verify reads what a patch wrote as text",
    "jinja2": "upstream's templates: only upstream renders a commit message",
    "git": "GitPython: a checkout's tags are read from .git (git/refs.py), no git process",
    "patchkit.targets.jit_builds": "FlashInfer's JIT builds: looked for in a FlashInfer target only",
    "patchkit.judge.reasons": "the judge's reasons: said by render/judged.py, where one is judged",
    "patchkit.rewrite.rules": "the rewriter: a shipped patch's manifest names what it found with rewrite/found.py "
                              "(verify evaluates a file no patch wrote with it)",
}


def _imported(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    out = tmp_path / "modules.txt"
    env = {**os.environ, **GIT_ENV, **{k: v for k, v in PROCESS_ENV.items() if v is not None}}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # From the test's folder: ``-c`` puts the current folder first on the path, and the installed
    # package is the one to run, not the tree's.
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(out), *args], env=env, capture_output=True, cwd=tmp_path)
    return proc, set(out.read_text().split("\n"))


@pytest.mark.parametrize("command", ["apply", "verify", "revert"])
def test_a_command_leaves_out_what_it_does_not_use(prebuilt, tmp_path: Path, command: str) -> None:
    """SGLang 0.5.9 from PyPI, its shipped patch applied (``make bench``'s case; verify and
    revert after apply, as a user runs them)."""
    repo = tmp_path / "sglang"
    shutil.copytree(prebuilt.release("sglang", "0.5.9"), repo, symlinks=True)
    args = (command, str(repo), *(["--no-generate"] if command == "apply" else []))
    if command != "apply":
        assert invoke("apply", str(repo), "--no-generate").returncode == 0
    proc, modules = _imported(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "patchkit.commands." + command in modules  # the probe saw the command run
    imported = {name: why for name, why in NOT_AT_START.items() if name in modules}
    assert imported == ({"patchkit.rewrite.rules": NOT_AT_START["patchkit.rewrite.rules"]} if command == "verify" else {})


def test_version_and_help_say_what_clicks_options_say() -> None:
    version = invoke("--version")
    from patchkit.fixes.modes import read_to

    read = ", ".join(f"{p} {v}" for p, v in read_to().items())
    assert "triton 3.9.0" in read and "flashinfer-python 0.7.4" in read
    assert (version.returncode, version.stdout) == (0, f"patchkit, version {__version__}\nfailure modes read to: {read}\n".encode())
    for flag in ("-h", "--help"):
        shown = invoke("apply", flag)
        assert shown.returncode == 0
        assert shown.stdout.startswith(b"Usage: patchkit apply [OPTIONS] [PATH]\n")
        assert b"  -h, --help " in shown.stdout and shown.stdout.rstrip().endswith(b"Show this message and exit.")


@pytest.mark.parametrize("command", ["apply", "verify", "revert"])
def test_a_command_with_python_leaves_out_what_it_does_not_use(sglang_venv, tmp_path: Path, command: str) -> None:
    """The SGLang 0.5.9 wheel in a venv: apply, then the command (verify and revert read RECORD to
    tell a reinstall)."""
    from support.venvs import copy_venv

    python = str(copy_venv(sglang_venv, tmp_path / "V") / "bin" / "python")
    if command != "apply":
        assert invoke("apply", "--python", python).returncode == 0
    proc, modules = _imported(tmp_path, command, "--python", python, *(["--no-generate"] if command == "apply" else []))
    assert proc.returncode == 0, proc.stderr.decode()
    assert "patchkit.targets.environment" in modules  # the probe saw --python read
    assert {m for m in ("libcst", "jinja2", "git") if m in modules} == set()
