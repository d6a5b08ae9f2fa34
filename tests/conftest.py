"""Shared test helpers: git repositories built inside the test, and running the CLI."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DC = "python/sglang/srt/distributed/device_communicators"

# Fixtures in the shape of SGLang's files (written for these tests, not copied).
UTILS_OLD = b"""MiB = 1024 * 1024

SYMM_MEM_ALL_REDUCE_MAX_SIZES = {
    9: {
        2: 64 * MiB,  # 64 MB
        8: 64 * MiB,  # 64 MB
    },
    10: {
        2: 64 * MiB,  # 64 MB
        8: 128 * MiB,  # 128 MB
    },
}
"""
UTILS_NEW = UTILS_OLD.replace(b"SYMM_MEM_ALL", b"TORCH_SYMM_MEM_ALL")
COMM = b'''import torch


class %(cls)s:
    """A communicator."""

    # Mapping: compute capability major -> world sizes
    _WORLD_SIZES_MULTIMEM = {
        9: [4, 6, 8],
        10: %(sm100)s,
    }

    def __init__(self, group):
        self.group = group

    def sizes(self, cc):
        return self._WORLD_SIZES_MULTIMEM[cc]
'''


def comm(cls: str = "TorchSymmMemCommunicator", sm100: str = "[6, 8]") -> bytes:
    return COMM % {b"cls": cls.encode(), b"sm100": sm100.encode()}


# tag -> {path: bytes}: no tables, the 0.5.3 layout, the later layout, new values.
RELEASES = {
    "v0.5.2": {"python/sglang/version.py": b'__version__ = "0.5.2"\n'},
    "v0.5.3": {
        "python/sglang/version.py": b'__version__ = "0.5.3"\n',
        f"{DC}/all_reduce_utils.py": UTILS_OLD,
        f"{DC}/symm_mem.py": comm("SymmMemCommunicator"),
    },
    "v0.5.5": {
        "python/sglang/version.py": b'__version__ = "0.5.5"\n',
        f"{DC}/all_reduce_utils.py": UTILS_NEW,
        f"{DC}/torch_symm_mem.py": comm(),
    },
    "v0.5.16": {
        "python/sglang/version.py": b'__version__ = "0.5.16"\n',
        f"{DC}/all_reduce_utils.py": UTILS_NEW,
        f"{DC}/torch_symm_mem.py": comm(sm100="[4, 6, 8]"),
    },
}

def symm_effect(label: str, version: str, says: str = "KeyError: 12") -> str:
    """The line apply prints after patching the torch-symm-mem tables of a release."""
    return (f'effect: torch-symm-mem prevents "{says}" on {label} {version}; it takes effect with multicast over NVLink '
            '(NVSwitch) between the GPUs, else the communicator will then turn itself off ("torch symmetric memory '
            'multicast operations are not supported"): the all-reduce stays on NCCL (`patchkit doctor` says what this machine has)')


GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str, date: str = "2026-01-02T03:04:05+00:00") -> str:
    env = dict(os.environ, **GIT_ENV, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)
    return done.stdout.decode()


_TEMPLATES: dict[tuple, Path] = {}  # releases -> a repository built once, copied for each test


def _build_repo(path: Path, releases: dict[str, dict[str, bytes]]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for day, (tag, files) in enumerate(releases.items(), start=1):
        git(path, "rm", "-rq", "--ignore-unmatch", ".")
        for rel, data in files.items():
            target = path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        git(path, "add", "-A")
        date = f"2026-01-{day:02d}T12:00:00+00:00"
        git(path, "commit", "-qm", f"release {tag}", date=date)
        git(path, "tag", tag)
    return path


def make_repo(path: Path, releases: dict[str, dict[str, bytes]] = RELEASES) -> Path:
    """A git repository with one commit and one tag per release, each tree exactly ``files``.

    Every commit's date is fixed, so the same releases always give the same commits: the
    repository is built once per test session and copied (``.git`` included) for each caller.
    """
    key = tuple((tag, tuple(sorted(files.items()))) for tag, files in releases.items())
    if path.exists() and any(path.iterdir()):
        return _build_repo(path, releases)  # into a folder that holds something already
    if key not in _TEMPLATES:
        _TEMPLATES[key] = _build_repo(Path(_template_root()) / str(len(_TEMPLATES)), releases)
    shutil.copytree(_TEMPLATES[key], path, symlinks=True, dirs_exist_ok=True)
    return path


_ROOT_DIR: list[str] = []


def _template_root() -> str:
    if not _ROOT_DIR:
        _ROOT_DIR.append(tempfile.mkdtemp(prefix="patchkit-test-repos-"))
        atexit.register(shutil.rmtree, _ROOT_DIR[0], True)
    return _ROOT_DIR[0]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "sglang")


# Where the Python processes the tests start keep their own bytecode: patchkit's source tree is
# imported by every ``python -m patchkit``, and with PYTHONDONTWRITEBYTECODE (as CI sets it) each
# of them would compile it again.  Only Python's cache moves; what patchkit reads and writes does not.
PYCACHE = tempfile.mkdtemp(prefix="patchkit-test-pycache-")
atexit.register(shutil.rmtree, PYCACHE, True)
PROCESS_ENV = {"PYTHONPYCACHEPREFIX": PYCACHE, "PYTHONDONTWRITEBYTECODE": None}


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m patchkit`` as a user would: a separate process, bytes out."""
    full_env = dict(os.environ, **GIT_ENV)
    full_env.pop("PATCHKIT_SGLANG_REPO", None)
    for key, value in {**PROCESS_ENV, **(env or {})}.items():  # None removes a variable
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], cwd=cwd, env=full_env, capture_output=True
    )



_IN_PROCESS = threading.Lock()  # click swaps sys.stdout and os.environ for the length of a call


def invoke(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run patchkit's command line in this process: the entry point of ``python -m patchkit``
    (the click group ``patchkit.cli.cli``) with the same arguments and environment as
    ``run_cli``; its exit code and its stdout and stderr bytes.

    It saves a Python start-up and patchkit's imports (about 0.3 s) per command.  Anything
    but the command's own exit (an exception patchkit let through: a traceback for a user)
    fails the test.  ``cwd``: the current folder for the call.  Kills (PATCHKIT_FAULT) and
    concurrent runs need ``run_cli``/Popen.
    """
    from click.testing import CliRunner

    from patchkit.cli import cli as group

    extra = {**GIT_ENV, "PATCHKIT_SGLANG_REPO": None, **(env or {})}
    assert not extra.get("PATCHKIT_FAULT"), "a fault kills the process: run it with run_cli"
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()
    with _IN_PROCESS:
        here = os.getcwd()
        try:
            if cwd is not None:
                os.chdir(cwd)
            result = runner.invoke(group, list(args), env=extra, prog_name="patchkit", catch_exceptions=True)
        finally:
            os.chdir(here)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        raise AssertionError("patchkit raised:\n" + "".join(traceback.format_exception(*result.exc_info)))
    return subprocess.CompletedProcess(
        ["patchkit", *args], result.exit_code, result.stdout_bytes, result.stderr_bytes or b""
    )


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory):
    """The world of the crash and race tests (crash_helpers.build_world): an origin repository,
    its patches and template checkouts in every state.  Built once; tests only copy from it."""
    from crash_helpers import build_world

    return build_world(tmp_path_factory.mktemp("world"))


# -- virtualenvs with a real SGLang wheel ----------------------------------------------------


def make_venv(path: Path, *options: str) -> Path:
    """A virtualenv of the interpreter that runs the tests, without pip (pip runs from outside)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *options, str(path)], check=True, capture_output=True)
    return path


def pip_install(python: Path | str, *args: str) -> None:
    """``pip install ARGS`` into the environment of ``python``, by this interpreter's pip (``pip --python``)."""
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", "--no-compile", *args]
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def sglang_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the real SGLang 0.5.9 wheel (from PyPI, cached: see support.mirror)
    installed by pip, as ``pip install`` leaves it.  A template no test changes: take a copy
    (``copy_venv``).  pip installs it once per session instead of once per test."""
    from support.mirror import default_cache, fetch_wheel

    venv = make_venv(tmp_path_factory.mktemp("sglang-venv") / "V")
    pip_install(venv / "bin" / "python", str(fetch_wheel("0.5.9", default_cache())))
    return venv


def copy_venv(template: Path, dest: Path) -> Path:
    """A copy of a virtualenv, byte for byte (so every RECORD hash holds); its bin/python
    links to the same base interpreter, and it finds its own site-packages from there.
    (Console scripts keep the template's path on their #! line: no test runs them.)"""
    shutil.copytree(template, dest, symlinks=True)
    return dest


# -- running processes (tests of patchkit.targets.processes, and of what apply reports) ----

TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
TICK_NS = 10**9 // TICKS_PER_S


@contextmanager
def running(argv, standin: Path, env: dict | None = None, **popen):
    """Start argv with the stand-ins importable; yield it once it printed "ready"; kill it."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(standin)}
    with subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        **popen,
    ) as proc:
        try:
            line = proc.stdout.readline()
            if line != b"ready\n":
                proc.kill()
                pytest.fail(f"{argv} did not start: {(line + proc.stdout.read()).decode(errors='replace')}")
            yield proc
        finally:
            proc.kill()


def after_start(pid: int) -> int:
    """A wall-clock time (ns) read once the boot clock is two ticks past pid's start tick.

    One tick makes the process's start strictly earlier; the second is margin for
    the module's estimate of the boot time, which may run late by the (sub-microsecond)
    gap between two clock readings.  Waiting for a condition, not for a duration.
    """
    from patchkit.targets.processes import parse_start_ticks

    start = parse_start_ticks(Path(f"/proc/{pid}/stat").read_text())
    while time.clock_gettime_ns(time.CLOCK_BOOTTIME) * TICKS_PER_S // 10**9 < start + 2:
        time.sleep(0.001)
    return time.time_ns()


def comm_list(source: bytes) -> list:
    """FlashInfer's ``supported_major_versions`` in ``def gen_trtllm_comm_module`` of
    ``flashinfer/jit/comm.py``, evaluated with ast (never imported)."""
    import ast

    (function,) = [
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "gen_trtllm_comm_module"
    ]
    (value,) = [k.value for k in ast.walk(function) if isinstance(k, ast.keyword) and k.arg == "supported_major_versions"]
    return ast.literal_eval(value)


def real_mirror(factory: pytest.TempPathFactory, env: str, project: str, versions) -> Path:
    """The full mirror of a project's releases named by ``env`` (``make check-patches``), or
    a small one of ``versions`` built from PyPI (archives cached, see support.mirror)."""
    from support.mirror import build_mirror, default_cache

    given = os.environ.get(env)
    if given:
        return Path(given)
    dest = factory.mktemp("real") / project
    build_mirror(versions, dest, default_cache(), project=project)
    return dest
