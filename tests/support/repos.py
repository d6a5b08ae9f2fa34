"""Git repositories in the shape of SGLang's releases, built inside the tests, and the texts
they are checked against: small fixture files (written for these tests, not copied), git
with a fixed identity and date, and the repository root."""

from __future__ import annotations

import ast
import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/support/repos.py
# What .gitignore keeps out of the repository (a clone has none of it), and ruff's cache: mypy and hypothesis write
# theirs while the tests run, so a copy that took them could meet a file that is gone by the time it is copied.
NOT_SOURCE = (".git", ".venv", "build", "dist", "__pycache__", "*.pyc", "*.egg-info", ".hypothesis", ".pytest_cache",
              ".mypy_cache", ".ruff_cache")


def copy_source(dest: Path) -> Path:
    """This repository's files as a clone of it has them, copied to ``dest``."""
    return Path(shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*NOT_SOURCE)))
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


def comm_list(source: bytes) -> list:
    """FlashInfer's ``supported_major_versions`` in ``def gen_trtllm_comm_module`` of
    ``flashinfer/jit/comm.py``, evaluated with ast (never imported)."""
    (function,) = [
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "gen_trtllm_comm_module"
    ]
    (value,) = [k.value for k in ast.walk(function) if isinstance(k, ast.keyword) and k.arg == "supported_major_versions"]
    return ast.literal_eval(value)
