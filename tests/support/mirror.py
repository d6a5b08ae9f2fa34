"""A local git repository holding the history of real releases, built from PyPI.

A wheel's ``sglang/**/*.py`` files are exactly the release tag's ``python/sglang/**/*.py``
files, and a ``flashinfer-python`` wheel's ``flashinfer/**/*.py`` files are the tag's
``flashinfer/**/*.py`` (the package sits at the root of FlashInfer's repository): one commit
per wheel (tagged ``v<version>``) gives the tools and tests real SGLang and FlashInfer
sources without GitHub.  vLLM's wheels are too large to fetch for their .py files, so its
releases come from PyPI's source archives.  The build is deterministic: same wheels, same
commit ids.  Each release is a root commit of its own, so a tag's commit id depends on its
wheel alone: a mirror of a few releases and the full mirror agree on every commit (and so
do the patches generated from them).

    PYTHONPATH=tests python -m support.mirror [--project sglang|flashinfer|vllm] [--dest DIR] [--cache DIR] [--versions V ...]

Without ``--versions`` it mirrors every release of SGLANG_RELEASES, FLASHINFER_RELEASES or
VLLM_RELEASES.
"""

from __future__ import annotations

import argparse
import calendar
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from patchkit.errors import MirrorError
from patchkit.fixes.registry import PROJECTS
from patchkit.versions import is_release_tag, version_key
from support import index
from support.history import Release, tag_names, write_history

SGLANG_RELEASES = tuple(
    "0.4.10.post2 0.5.1 0.5.1.post1 0.5.1.post2 0.5.1.post3 0.5.2 0.5.3 0.5.3.post1"
    " 0.5.3.post2 0.5.3.post3 0.5.4 0.5.4.post1 0.5.4.post2 0.5.4.post3 0.5.5 0.5.5.post1"
    " 0.5.5.post2 0.5.5.post3 0.5.6 0.5.6.post1 0.5.6.post2 0.5.7 0.5.8 0.5.8.post1 0.5.9"
    " 0.5.10 0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15"
    " 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23".split()
)
# Every flashinfer-python release from 0.5.0 to 0.7.4 (post releases included).
FLASHINFER_RELEASES = tuple(
    "0.5.0 0.5.1 0.5.2 0.5.3 0.6.0 0.6.1 0.6.2 0.6.3 0.6.4 0.6.5 0.6.6 0.6.7 0.6.7.post1"
    " 0.6.7.post2 0.6.7.post3 0.6.8 0.6.8.post1 0.6.9 0.6.10 0.6.10.post1 0.6.11 0.6.11.post1"
    " 0.6.11.post2 0.6.11.post3 0.6.12 0.6.13 0.6.14 0.6.15 0.6.15.post1 0.6.16 0.6.16.post1"
    " 0.6.16.post2 0.6.16.post3 0.6.16.post4 0.6.17 0.6.18 0.6.18.post1 0.7.0 0.7.0.post1"
    " 0.7.1 0.7.2 0.7.2.post1 0.7.4".split()
)
# Every vllm release from 0.10.2 to 0.33.0 that PyPI has a source archive of (no post
# releases on PyPI in that range; no rc or dev).  0.10.2 is the first with the tables
# torch-symm-mem patches (all_reduce_utils.py's CUSTOM_ALL_REDUCE_MAX_SIZES and
# SYMM_MEM_ALL_REDUCE_MAX_SIZES, symm_mem.py's SymmMemCommunicator._WORLD_SIZES_MULTIMEM);
# 0.10.1.1 and before hold none of them.  0.15.0 and 0.15.1 are left out: PyPI has only
# their wheels (about 500 MB each), no source archive.
VLLM_RELEASES = tuple(
    "0.10.2 0.11.0 0.11.1 0.11.2 0.12.0 0.13.0 0.14.0 0.14.1 0.16.0 0.17.0"
    " 0.17.1 0.18.0 0.18.1 0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0 0.22.1 0.23.0"
    " 0.24.0 0.25.0 0.25.1 0.26.0 0.27.0 0.27.1 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0 0.33.0".split()
)
# The projects mirrored from their PyPI wheels, with the releases mirrored by default;
# any other project comes from its source archives.
WHEEL_RELEASES = {"sglang": SGLANG_RELEASES, "flashinfer": FLASHINFER_RELEASES}
# The commits' identity is "<label> release mirror" ("SGLang release mirror" for SGLang).
EMAIL = "mirror@patchkit.invalid"


def default_releases(project: str) -> tuple[str, ...] | None:
    """The releases mirrored without ``--versions`` (None: the project has no default list)."""
    return {**WHEEL_RELEASES, "vllm": VLLM_RELEASES}.get(project)


def default_cache() -> Path:
    env = os.environ.get("PATCHKIT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "patchkit"


def fetch_wheel(version: str, cache: Path, distribution: str = "sglang", platform: str = "manylinux_2_34_x86_64") -> Path:
    """The cached wheel of ``distribution`` ``version`` (in ``<cache>/wheels/<distribution>/<version>/``),
    downloaded with pip if it is not cached yet.  ``platform``: the wheel's platform tag (pip matches it
    exactly: NVIDIA's and sglang-kernel's wheels are ``manylinux2014_x86_64``)."""
    folder = Path(cache) / "wheels" / distribution / version
    arch = "x86_64" if platform.endswith("x86_64") else platform.rsplit("_", 1)[-1]  # a cache holds a wheel per machine
    cached = sorted(w for w in folder.glob("*.whl") if w.name.endswith((f"_{arch}.whl", "-any.whl")))
    if cached:
        return cached[0]
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Download next to the final folder, then move the finished file in: an interrupted
    # download never leaves a half wheel that looks cached.
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=folder.parent))
    try:
        pip = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            # Later SGLang releases ship CPython 3.11 manylinux wheels only; their .py files
            # are the same on every platform, so ask for those wherever this runs.  A pure
            # wheel (py3-none-any, as flashinfer-python's) matches these flags too.
            "--python-version=3.11",
            "--implementation=cp",
            f"--platform={platform}",
        ]
        cmd = [*pip, "--quiet", f"{distribution}=={version}", "-d", str(tmp)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            last = lines[-1].strip() if lines else f"pip exited with {proc.returncode}"
            raise MirrorError(f"cannot download {distribution} {version}: {last}")
        folder.mkdir(exist_ok=True)
        os.replace(wheels[0], folder / wheels[0].name)
        return folder / wheels[0].name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@functools.cache
def wheel_zip(version: str, distribution: str = "sglang", platform: str = "manylinux_2_34_x86_64") -> zipfile.ZipFile:
    """The cached wheel of ``distribution`` ``version`` (``fetch_wheel``), opened once a test process: its
    central directory (14,705 entries in flashinfer-python 0.7.4's) is read once however many tests read
    its members.  Left open; read with ``read``, never closed."""
    return zipfile.ZipFile(fetch_wheel(version, default_cache(), distribution, platform))


def _read_wheel(
    wheel: Path, package: str = "sglang", source_root: str = "python", installed: tuple = ()
) -> tuple[list[tuple[str, bytes]], int]:
    """The wheel's ``<package>/**/*.py`` files as (repo path, bytes), sorted, and their latest
    time.  The repo path is ``<source_root>/<package>/...``, or ``<package>/...`` when
    ``source_root`` is empty (the package at the repository's root).  ``installed``: the
    project's (repository folder, installed folder) pairs (projects.toml): every file of such an
    installed folder is taken too, at its repository path (FlashInfer's CUDA sources, which
    its wheels keep below ``flashinfer/data/include/`` and ``flashinfer/data/csrc/``)."""
    prefix = f"{source_root}/" if source_root else ""

    def repo(name: str) -> str | None:
        for folder, inside in installed:
            if name.startswith(inside):
                return folder + name[len(inside):]
        return prefix + name if name.startswith(f"{package}/") and name.endswith(".py") else None

    try:
        with zipfile.ZipFile(wheel) as zf:
            infos = sorted((i for i in zf.infolist() if not i.is_dir() and repo(i.filename)), key=lambda i: repo(i.filename))
            files = [(repo(i.filename), zf.read(i)) for i in infos]
    except (OSError, zipfile.BadZipFile) as exc:
        raise MirrorError(f"{wheel}: not a readable wheel ({exc})") from None
    if not files:
        raise MirrorError(f"{wheel}: holds no {package}/*.py files")
    return files, max(calendar.timegm(i.date_time + (0, 0, 0)) for i in infos)


def fetch_sdist(project: str, version: str, cache: Path) -> Path:
    """The cached source archive of ``project`` ``version``, from the index pip is configured
    with (for projects whose wheels are too large to fetch for their .py files, such as vLLM's)."""
    folder = cache / "sdists" / project / version
    cached = sorted(folder.glob("*.tar.gz")) if folder.is_dir() else []
    return cached[0] if cached else index.fetch_sdist(project, version, folder)


def _read_sdist(archive: Path, project: str) -> tuple[list[tuple[str, bytes]], int]:
    """The archive's ``<top>/<project>/**/*.py`` files as (repo path, bytes), and their latest time."""
    import tarfile

    files, latest = [], 0
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                parts = member.name.split("/", 1)
                if len(parts) == 2 and parts[1].startswith(f"{project}/") and parts[1].endswith(".py") and member.isfile():
                    files.append((parts[1], tar.extractfile(member).read()))
                    latest = max(latest, int(member.mtime))
    except (OSError, tarfile.TarError) as exc:
        raise MirrorError(f"{archive}: not a readable source archive ({exc})") from None
    if not files:
        raise MirrorError(f"{archive}: holds no {project}/*.py files")
    return sorted(files), latest


def _release_files(project: str, version: str, cache: Path) -> tuple[list[tuple[str, bytes]], int, str]:
    """(files, time, source file name) of one release: SGLang and FlashInfer from their wheels,
    others from sdists."""
    if project in WHEEL_RELEASES:
        info = PROJECTS[project]
        wheel = fetch_wheel(version, cache, info.distribution)
        return (*_read_wheel(wheel, info.name, info.source_root, info.installed), f"the PyPI wheel {wheel.name}")
    archive = fetch_sdist(project, version, cache)
    return (*_read_sdist(archive, project), f"the PyPI source archive {archive.name}")


def build_mirror(versions, dest: Path, cache: Path, progress=None, project: str = "sglang") -> list[str]:
    """Create a git repository at ``dest``: one tagged commit per release, newest checked out."""
    versions = sorted(set(versions), key=version_key)
    if not versions:
        raise MirrorError("no versions to mirror")
    for v in versions:
        if not is_release_tag(f"v{v}"):
            raise MirrorError(f"not a release version: {v!r}")
    label = PROJECTS[project].label

    def releases():
        for version in versions:
            files, when, origin = _release_files(project, version, cache)
            if progress:
                progress(f"v{version:<14} {len(files)} files")
            yield Release(f"v{version}", f"{label} {version}\n\nFrom {origin}.\n", files, when)

    return write_history(dest, releases(), f"{label} release mirror", EMAIL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="PYTHONPATH=tests python -m support.mirror",
        description="Build a git history of SGLang (or FlashInfer, or vLLM) releases from PyPI:"
        " one root commit and one v<version> tag per release.",
    )
    parser.add_argument(
        "--project", choices=sorted(PROJECTS), default="sglang",
        help="sglang and flashinfer come from their PyPI wheels (flashinfer-python),"
        " vllm from its source archives (default: sglang)",
    )
    parser.add_argument("--dest", type=Path, default=None, help="default: build/<project>-mirror")
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="default: $PATCHKIT_CACHE or ~/.cache/patchkit",
    )
    parser.add_argument(
        "--versions", nargs="+", metavar="V", default=None,
        help="default: every SGLang release from 0.4.10.post2 to 0.5.23, with --project flashinfer"
        " every FlashInfer release from 0.5.0 to 0.7.4, with --project vllm every vLLM release"
        " from 0.10.2 to 0.33.0 (0.15.0 and 0.15.1 have no source archive)",
    )
    args = parser.parse_args(argv)
    if args.dest is None:
        args.dest = Path(f"build/{args.project}-mirror")
    if args.versions is None:
        releases = default_releases(args.project)
        if releases is None:
            parser.error(f"--versions is required with --project {args.project}")
        args.versions = list(releases)
    try:
        if tag_names(args.dest) == {f"v{v}" for v in args.versions}:
            print(f"{args.dest}: up to date ({len(set(args.versions))} releases)")
            return 0
        start = time.monotonic()
        tags = build_mirror(
            args.versions, args.dest, args.cache or default_cache(), progress=print, project=args.project
        )
    except (MirrorError, OSError) as exc:
        print(f"support.mirror: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("support.mirror: interrupted", file=sys.stderr)
        return 130
    print(
        f"{args.dest}: {len(tags)} releases, main at {tags[-1]} ({time.monotonic() - start:.1f}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
