"""What apply, verify and revert leave out at start-up (docs/ARCHITECTURE.md, "Start-up"): a
module a command does not use costs every run its import.  Each run here is the real command in a
new process on a real checkout; the modules it imported are read back when it exits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from patchkit import __version__
from patchkit.cli.options import PathType
from support.cli import PROCESS_ENV, invoke
from support.repos import GIT_ENV

# Run patchkit's entry point, then write the names of the modules it imported to argv[1].
# (patchkit ends with os._exit, past atexit: the names are written on the way.)
_PROBE = """
import os, sys
out, end = sys.argv.pop(1), os._exit
def _exit(code):
    open(out, "w").write("\\n".join(sorted(sys.modules)))
    end(code)
os._exit = _exit
from patchkit.__main__ import main
main()
"""

# Each with the reason it stays out: what brings it in, and what the command does instead.
NOT_AT_START = {
    "locale": "gettext's first translation (click's help and version options, click.Path's name)",
    "patchkit.targets.jit_builds": "FlashInfer's JIT builds: looked for in a FlashInfer target only",
    "unidiff": "the shipped patch is read as the build parsed it (patchkit/patch/_parsed/)",
    "patchkit.judge.reasons": "the judge's reasons: said by render/judged.py, where one is judged",
    "patchkit.rewrite.rules": "the rewriter: a shipped patch's manifest names what it found with rewrite/found.py "
                              "(verify evaluates a file no patch wrote with it)",
    "difflib": "a change that only adds or only removes lines is counted without a diff",
    "urllib.parse": "pathlib's, for Path.as_uri alone: __main__ imports pathlib with a stand-in for it",
    "ipaddress": "urllib.parse's",
}


def _imported(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    out = tmp_path / "modules.txt"
    env = {**os.environ, **GIT_ENV, **{k: v for k, v in PROCESS_ENV.items() if v is not None}}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # From the test's folder: ``-c`` puts the current folder first on the path, and the installed
    # package (built, with what the build parsed) is the one to run, not the tree's.
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


def test_path_type_is_clicks_path(tmp_path: Path) -> None:
    """PathType holds what click.Path(path_type=Path) holds, field for field, and says what it says."""
    assert vars(PathType()) == vars(click.Path(path_type=Path))
    assert vars(PathType(dir_only=True)) == vars(click.Path(path_type=Path, file_okay=False))
    afile = tmp_path / "a-file"
    afile.write_text("")
    with pytest.raises(click.BadParameter) as caught:
        PathType(dir_only=True).convert(str(afile), None, None)
    assert caught.value.message == f"Directory {click.format_filename(afile)!r} is a file."


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


def test_pathlib_is_imported_without_urllib_parse_and_still_quotes(tmp_path: Path) -> None:
    """``__main__._import_pathlib``: pathlib comes in without urllib.parse; ``as_uri`` imports it
    when called, and an import of urllib.parse after that gets the real module."""
    probe = (
        "import sys\n"
        "from patchkit.__main__ import _import_pathlib\n"
        "assert 'pathlib' not in sys.modules\n"
        "_import_pathlib()\n"
        "print(sorted(m for m in ('pathlib', 'urllib.parse', 'ipaddress') if m in sys.modules))\n"
        "import pathlib\n"
        "print(pathlib.PurePosixPath('/a b/\\u00fc').as_uri())\n"
        "import urllib.parse\n"
        "print(urllib.parse.urlsplit('http://h/p?q').query, urllib.parse.__file__.endswith('parse.py'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert proc.stdout == b"['pathlib']\nfile:///a%20b/%C3%BC\nq True\n"


# What a command with --python leaves out too, each with the reason it stays out.
NOT_WITH_PYTHON = {
    "email": "importlib.metadata's METADATA parser: the Version header is read as text (targets/dist_info.py)",
    "importlib.metadata": "RECORD's rows are made as it makes them, without it (targets/dist_info.py)",
    "shutil": "which() of a bare interpreter name only; it imports the compression modules",
}


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
    # verify --python judges the environment's settings too: nvidia-smi looked up with shutil.which
    expected = {"shutil": NOT_WITH_PYTHON["shutil"]} if command == "verify" else {}
    assert {name: why for name, why in NOT_WITH_PYTHON.items() if name in modules} == expected
