"""A local git repository holding the history of real SGLang releases, built from PyPI wheels.

A wheel's ``sglang/**/*.py`` files are exactly the release tag's ``python/sglang/**/*.py``
files, so one commit per wheel (tagged ``v<version>``) gives the tools and tests real SGLang
sources without GitHub. The build is deterministic: same wheels, same commit ids.
Each release is a root commit of its own, so a tag's commit id depends on its wheel
alone: a mirror of a few releases and the full mirror agree on every commit (and so
do the patches generated from them).

    python -m patchkit.dev.mirror [--dest DIR] [--cache DIR] [--versions V ...]
"""

from __future__ import annotations

import argparse
import calendar
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from patchkit.fixes.registry import PROJECTS
from patchkit.versions import is_release_tag, version_key
from patchkit.dev import index
from patchkit.errors import MirrorError
from patchkit.git.history import Release, tag_names, write_history

SGLANG_RELEASES = tuple(
    "0.4.10.post2 0.5.1 0.5.1.post1 0.5.1.post2 0.5.1.post3 0.5.2 0.5.3 0.5.3.post1"
    " 0.5.3.post2 0.5.3.post3 0.5.4 0.5.4.post1 0.5.4.post2 0.5.4.post3 0.5.5 0.5.5.post1"
    " 0.5.5.post2 0.5.5.post3 0.5.6 0.5.6.post1 0.5.6.post2 0.5.7 0.5.8 0.5.8.post1 0.5.9"
    " 0.5.10 0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15"
    " 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23".split()
)
NAME, EMAIL = "SGLang release mirror", "mirror@patchkit.invalid"


def default_cache() -> Path:
    env = os.environ.get("PATCHKIT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "patchkit"


def fetch_wheel(version: str, cache: Path) -> Path:
    """The cached wheel of sglang ``version``, downloaded with pip if it is not cached yet."""
    folder = Path(cache) / "wheels" / "sglang" / version
    cached = sorted(folder.glob("*.whl"))
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
            # Later releases ship CPython 3.11 manylinux wheels only; their .py files are
            # the same on every platform, so ask for those wherever this runs.
            "--python-version=3.11",
            "--implementation=cp",
            "--platform=manylinux_2_34_x86_64",
        ]
        cmd = [*pip, "--quiet", f"sglang=={version}", "-d", str(tmp)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            last = lines[-1].strip() if lines else f"pip exited with {proc.returncode}"
            raise MirrorError(f"cannot download sglang {version}: {last}")
        folder.mkdir(exist_ok=True)
        os.replace(wheels[0], folder / wheels[0].name)
        return folder / wheels[0].name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _is_sglang_py(name: str) -> bool:
    return name.startswith("sglang/") and name.endswith(".py")


def _read_wheel(wheel: Path) -> tuple[list[tuple[str, bytes]], int]:
    """The wheel's ``sglang/**/*.py`` files as (repo path, bytes), sorted, and their latest time."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            infos = sorted(
                (i for i in zf.infolist() if _is_sglang_py(i.filename)),
                key=lambda i: i.filename,
            )
            files = [("python/" + i.filename, zf.read(i)) for i in infos]
    except (OSError, zipfile.BadZipFile) as exc:
        raise MirrorError(f"{wheel}: not a readable wheel ({exc})") from None
    if not files:
        raise MirrorError(f"{wheel}: holds no sglang/*.py files")
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
    """(files, time, source file name) of one release: SGLang from its wheel, others from sdists."""
    if project == "sglang":
        wheel = fetch_wheel(version, cache)
        return (*_read_wheel(wheel), f"the PyPI wheel {wheel.name}")
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

    return write_history(dest, releases(), NAME, EMAIL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m patchkit.dev.mirror",
        description="Build a git history of SGLang (or vLLM) releases from PyPI.",
    )
    parser.add_argument("--project", choices=sorted(PROJECTS), default="sglang")
    parser.add_argument("--dest", type=Path, default=Path("build/sglang-mirror"))
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="default: $PATCHKIT_CACHE or ~/.cache/patchkit",
    )
    parser.add_argument(
        "--versions", nargs="+", metavar="V", default=None,
        help="default: every SGLang release from 0.4.10.post2 (required for vllm)",
    )
    args = parser.parse_args(argv)
    if args.versions is None:
        if args.project != "sglang":
            parser.error("--versions is required with --project vllm")
        args.versions = list(SGLANG_RELEASES)
    try:
        if tag_names(args.dest) == {f"v{v}" for v in args.versions}:
            print(f"{args.dest}: up to date ({len(set(args.versions))} releases)")
            return 0
        start = time.monotonic()
        tags = build_mirror(
            args.versions, args.dest, args.cache or default_cache(), progress=print, project=args.project
        )
    except (MirrorError, OSError) as exc:
        print(f"patchkit.dev.mirror: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("patchkit.dev.mirror: interrupted", file=sys.stderr)
        return 130
    print(
        f"{args.dest}: {len(tags)} releases, main at {tags[-1]} ({time.monotonic() - start:.1f}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
