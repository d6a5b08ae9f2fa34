"""Maintainers' tool: SGLang as its official image (and a build from source) installs it: a shallow clone at a
release tag, installed with ``pip install -e python``, FlashInfer's wheel beside it.

The clone's origin is a git repository built from the release's real files: ``python/sglang/``
from its wheel (exactly the tag's files), and ``python/pyproject.toml``, ``README.md`` and
``LICENSE`` from its source archive: SGLang's real build configuration (setuptools-scm with
``root = ".."`` and ``version_file = "sglang/_version.py"``), so pip's editable install, its
``direct_url.json``, ``__editable__`` files and the version from the tag are pip's and
setuptools' own.  ``sglang/_version.py`` is left out of the repository: setuptools-scm
writes it at install, as in a real clone.  The tests and ``make bench`` build their image
layouts with it; git, pip and uv get a time limit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from patchkit.errors import MirrorError
from support.mirror import default_cache, fetch_sdist, fetch_wheel
from support.venvs import pip_command

GIT_ENV = {
    "GIT_AUTHOR_NAME": "SGLang release", "GIT_AUTHOR_EMAIL": "release@patchkit.invalid",
    "GIT_COMMITTER_NAME": "SGLang release", "GIT_COMMITTER_EMAIL": "release@patchkit.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}
BUILD_FILES = ("pyproject.toml", "README.md", "LICENSE")


def git(*args: str, cwd: Path | None = None) -> str:
    return _run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV})


def release_repo(dest: Path, version: str) -> Path:
    """A git repository whose one commit, tagged ``v<version>``, holds the release's real files."""
    cache = default_cache()
    python = dest / "python"
    with zipfile.ZipFile(fetch_wheel(version, cache)) as wheel:
        for name in wheel.namelist():
            if name.startswith("sglang/") and not name.endswith("/") and name != "sglang/_version.py":
                (python / name).parent.mkdir(parents=True, exist_ok=True)
                (python / name).write_bytes(wheel.read(name))
    with tarfile.open(fetch_sdist("sglang", version, cache)) as sdist:
        for member in sdist.getmembers():
            top, _, rel = member.name.partition("/")
            if rel in BUILD_FILES and member.isfile():
                (python / rel).write_bytes(sdist.extractfile(member).read())
    if not all((python / f).is_file() for f in BUILD_FILES):
        raise MirrorError(f"the source archive of sglang {version} lacks one of {', '.join(BUILD_FILES)}")
    git("init", "-q", "-b", "main", str(dest))
    git("add", "-A", cwd=dest)
    git("commit", "-q", "-m", f"SGLang {version}", cwd=dest)
    git("tag", f"v{version}", cwd=dest)
    return dest


def shallow_clone(origin: Path, tag: str, dest: Path) -> Path:
    """``git clone --depth=1 --branch TAG``, as the image's Dockerfile clones SGLang."""
    git("-c", "advice.detachedHead=false", "clone", "-q", "--depth=1", "--branch", tag, f"file://{origin}", str(dest))
    return dest


def pip_editable(python: Path, checkout: Path, compat: bool = False, backend: Path | None = None) -> None:
    """``pip install -e python --no-deps`` into the environment of ``python`` (pip from
    outside, ``pip --python``: ``pip_command``); ``compat``: setuptools' ``editable_mode=compat`` (a .pth
    holding the folder instead of a finder).  ``backend``: a folder holding SGLang's build
    requirements (setuptools, setuptools-scm, wheel), on PYTHONPATH for a build with
    ``--no-build-isolation`` (what an isolated build would fetch each time, fetched once)."""
    mode = ["--config-settings", "editable_mode=compat"] if compat else []
    isolation = ["--no-build-isolation"] if backend else []
    cmd = pip_command(python, "install", "-q", "--no-deps", *isolation, *mode, "-e", str(checkout / "python"))
    _run(cmd, env=_with_backend(backend))


def uv_editable(venv: Path, checkout: Path, backend: Path | None = None) -> None:
    """``uv venv`` and ``uv pip install -e python --no-deps``: uv's environment has no pip.
    ``backend``: as for ``pip_editable``."""
    uv = Path(sys.executable).with_name("uv")
    isolation = ["--no-build-isolation"] if backend else []
    _run([str(uv), "venv", "-q", "--python", sys.executable, str(venv)])
    _run([str(uv), "pip", "install", "-q", "--python", str(venv / "bin/python"), "--no-deps", *isolation, "-e", str(checkout / "python")],
         env=_with_backend(backend))


def _with_backend(backend: Path | None) -> dict | None:
    if backend is None:
        return None
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(backend), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _run(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MirrorError(f"{cmd[0]}: {exc}") from None
    if done.returncode != 0:
        raise MirrorError(f"{' '.join(cmd[:4])}... failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout
