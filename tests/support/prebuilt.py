"""What a test session builds once and every test shares: real release mirrors, checkouts of one
release, virtualenvs with real wheels installed, the build backends of editable installs.

Each is built the first time a test asks for it, in a folder of the session (under xdist, one
folder for all the workers of the run: the first worker builds, the others wait on a lock and
reuse it).  They are templates: a test that writes takes a copy (``copy_venv``, a clone).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from support.mirror import build_mirror, default_cache, fetch_wheel
from support.repos import GIT_ENV
from support.venvs import link_installed, make_venv, pip_install

# The releases the tests use, per project: one session mirror each holds them all.  (Each release
# is a root commit of its own, so these commits are the full mirror's commits.)
MIRRORED = {
    # Before the tables existed, the first release with them, a later layout (the demo's), the newest.
    "sglang": ("0.5.2", "0.5.3", "0.5.9", "0.5.23"),
    # Before the backport fits (utils.cuh lacks its context), an older release it fits by a three-way
    # merge and a refresh, the last release before it landed (the merge base), the release it landed in.
    "flashinfer": ("0.5.0", "0.6.4", "0.6.16.post4", "0.6.17"),
    # The first with the tables, one keyed by strings ("9.0", "10.0"), a later one, the newest.
    "vllm": ("0.10.2", "0.11.0", "0.19.0", "0.33.0"),
}
# A full mirror given instead (``make check-patches``): the tests that iterate tags take them all.
MIRROR_ENV = {"sglang": "PATCHKIT_REAL_MIRROR", "flashinfer": "PATCHKIT_REAL_FLASHINFER_MIRROR", "vllm": "PATCHKIT_REAL_VLLM_MIRROR"}
# What an editable install of SGLang builds with (its pyproject's build-system.requires).
BUILD_REQUIRES = ("setuptools>=61.0", "setuptools-scm>=8.0", "wheel")


class Prebuilt:
    """The session's folder of builds: ``get(name, build)`` is ``folder/name``, made by
    ``build(path)`` once for the whole run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def get(self, name: str, build: Callable[[Path], object]) -> Path:
        path = self.folder / name
        done = self.folder / f"{name}.done"
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not done.exists():
                if path.exists():  # a build that failed part-way in another worker
                    shutil.rmtree(path)
                build(path)
                done.touch()
        return path

    def mirror(self, project: str) -> Path:
        """A git history of the real releases of MIRRORED[project] (support.mirror), the newest
        checked out; or the full mirror named by MIRROR_ENV[project].  Read only."""
        given = os.environ.get(MIRROR_ENV[project])
        if given:
            return Path(given)
        return self.get(f"mirror-{project}", lambda dest: _quickly(build_mirror, MIRRORED[project], dest, default_cache(), project=project))

    def release(self, project: str, version: str) -> Path:
        """A repository of one release, as ``support.mirror --versions VERSION`` builds it (its
        commit and tag from the session mirror, branch main, checked out).  Read only."""
        assert version in MIRRORED[project], f"add {version} to MIRRORED[{project!r}]"
        return self.get(f"release-{project}-{version}", lambda dest: one_release(self.mirror(project), f"v{version}", dest))

    def venv(self, *wheels: Path) -> Path:
        """A virtualenv with ``wheels`` installed by pip (``pip_install``).  Read only: a test that
        writes takes a copy (``copy_venv``).

        With several wheels, it is the template of each (built first where no test asked for it)
        linked together (``link_installed``): the same files as one ``pip install`` of them all, and
        each wheel unpacked once a session, however many templates hold it."""
        name = "venv-" + "+".join(w.name.split("-")[0] + "-" + w.name.split("-")[1] for w in wheels)

        def build(dest: Path) -> None:
            make_venv(dest)
            if len(wheels) == 1:
                pip_install(dest / "bin" / "python", str(wheels[0]))
            else:
                for wheel in wheels:
                    link_installed(self.venv(wheel), dest)

        return self.get(name, build)

    def sglang_venv(self, version: str = "0.5.9") -> Path:
        return self.venv(fetch_wheel(version, default_cache()))

    def origin(self, version: str) -> Path:
        """SGLang ``version``'s repository of its real files and build configuration
        (``support.image.release_repo``), the origin of image-layout clones, packed once so
        that each clone reuses the packed objects instead of compressing them again (with
        FAST_IMPORT's light compression: the same objects).  Read only."""
        from support.image import git, release_repo

        def build(dest: Path) -> None:
            release_repo(dest, version)
            git("-c", "pack.window=0", "repack", "-adq", cwd=dest)

        return self.get(f"origin-sglang-{version}", lambda dest: _quickly(build, dest))

    def build_backend(self) -> Path:
        """A folder with BUILD_REQUIRES installed and compiled (``uv pip install --target``: half of
        pip's time for the same files), fetched once a session: on PYTHONPATH, the build backend of
        ``pip install --no-build-isolation``."""

        def build(dest: Path) -> None:
            uv = Path(sys.executable).with_name("uv")
            cmd = [str(uv), "pip", "install", "-q", "--python", sys.executable, "--target", str(dest), "--compile-bytecode",
                   *BUILD_REQUIRES]
            subprocess.run(cmd, check=True, capture_output=True)

        return self.get("build-backend", build)


# git fast-import as the session mirrors are built with it: no deltas between releases (each is a
# root commit: they save little) and light compression.  The same objects and commit ids, in a
# third of the time; only the pack on disk differs (a little larger).
FAST_IMPORT = {"pack.depth": "0", "pack.compression": "1", "core.compression": "1"}


def _quickly(build: Callable, *args, **kwargs):
    """``build(*args, **kwargs)`` with FAST_IMPORT given to the git it runs (GIT_CONFIG_COUNT)."""
    saved = {k: os.environ.get(k) for k in ["GIT_CONFIG_COUNT", *(f"GIT_CONFIG_{w}_{i}" for i in range(len(FAST_IMPORT)) for w in ("KEY", "VALUE"))]}
    assert saved["GIT_CONFIG_COUNT"] is None, "the tests' environment gives git a configuration already"
    os.environ["GIT_CONFIG_COUNT"] = str(len(FAST_IMPORT))
    for i, (key, value) in enumerate(FAST_IMPORT.items()):
        os.environ[f"GIT_CONFIG_KEY_{i}"], os.environ[f"GIT_CONFIG_VALUE_{i}"] = key, value
    try:
        return build(*args, **kwargs)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def one_release(mirror: Path, tag: str, dest: Path) -> Path:
    env = dict(os.environ, **GIT_ENV)
    dest.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["fetch", "-q", "--no-tags", str(mirror), f"refs/tags/{tag}:refs/tags/{tag}"],
                 ["reset", "-q", "--hard", tag]):
        subprocess.run(["git", "-C", str(dest), *args], check=True, capture_output=True, env=env)
    (dest / ".git" / "FETCH_HEAD").unlink(missing_ok=True)
    return dest
