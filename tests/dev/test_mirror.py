"""patchkit.dev.mirror on small fake wheels written by the tests (no network)."""

from __future__ import annotations

import calendar
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit.dev import mirror
from patchkit.dev.mirror import build_mirror, fetch_wheel
from patchkit.errors import MirrorError

from conftest import ROOT

# Out of order on purpose: 0.10.0 sorts after 0.2.0, the .post1 after its release.
VERSIONS = ["0.10.0", "0.1.0.post1", "0.2.0", "0.1.0"]
ORDERED = ["0.1.0", "0.1.0.post1", "0.2.0", "0.10.0"]


def wheel_entries(version: str) -> dict[str, tuple[bytes, tuple]]:
    """name -> (bytes, zip date_time) of a tiny wheel shaped like sglang's."""
    n = ORDERED.index(version)
    day = (2024, 1, 1 + n)
    entries = {
        "sglang/__init__.py": (
            f'__version__ = "{version}"\n'.encode(),
            day + (10, 0, 0),
        ),
        "sglang/srt/layers/quant.py": (
            f"SUPPORTED = {list(range(n + 1))}\n".encode(),
            day + (11, 30, 4),
        ),
        "sglang/srt/__init__.py": (b"", day + (9, 0, 0)),
        # Later than every .py file, and must not end up in the repository.
        "sglang/README.md": (b"# not python\n", day + (23, 0, 0)),
        "sglang/srt/kernel.so": (b"\x7fELF\x00binary", day + (23, 0, 0)),
        "sglang_router/__init__.py": (b"# another package\n", day + (23, 0, 0)),
        f"sglang-{version}.dist-info/METADATA": (
            f"Name: sglang\nVersion: {version}\n".encode(),
            day + (23, 0, 0),
        ),
    }
    if n < 2:  # removed in 0.2.0: the tree must drop it
        entries["sglang/old.py"] = (b"OLD = True\n", day + (8, 0, 0))
    return entries


def write_wheel(cache: Path, version: str) -> Path:
    folder = cache / "wheels" / "sglang" / version
    folder.mkdir(parents=True)
    path = folder / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("sglang/srt/", (2024, 1, 1, 0, 0, 0)), b"")
        for name, (data, when) in wheel_entries(version).items():
            zf.writestr(zipfile.ZipInfo(name, when), data)
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    for version in VERSIONS:
        write_wheel(cache, version)
    return cache


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def git_bytes(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True
    ).stdout


def test_one_tagged_commit_per_version_in_order(cache: Path, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    lines: list[str] = []
    tags = build_mirror(VERSIONS, dest, cache, progress=lines.append)
    assert tags == [f"v{v}" for v in ORDERED]
    assert (
        len(lines) == len(ORDERED)
        and lines[0].startswith("v0.1.0 ")
        and "4 files" in lines[0]
    )
    assert sorted(git(dest, "tag", "--list").split()) == sorted(tags)
    assert git(dest, "branch", "--show-current").strip() == "main"
    # Every release is a root commit of its own; main is the newest.
    for tag in tags:
        assert git(dest, "rev-list", tag).split() == [git(dest, "rev-parse", f"{tag}^{{commit}}").strip()]
    assert git(dest, "rev-parse", "main") == git(dest, "rev-parse", f"{tags[-1]}^{{commit}}")
    assert git(dest, "cat-file", "-t", "v0.2.0").strip() == "commit"  # lightweight tag
    subjects = [git(dest, "log", "-1", "--format=%s", t).strip() for t in tags]
    assert subjects == [f"SGLang {v}" for v in ORDERED]
    body = git(dest, "log", "-1", "--format=%B", "v0.2.0")
    assert (
        body == "SGLang 0.2.0\n\nFrom the PyPI wheel sglang-0.2.0-py3-none-any.whl.\n\n"
    )
    who = git(dest, "log", "-1", "--format=%an <%ae>|%cn <%ce>", "main").strip()
    assert who == "|".join(["SGLang release mirror <mirror@patchkit.invalid>"] * 2)


def test_tree_is_exactly_the_wheel_py_files(cache: Path, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    build_mirror(VERSIONS, dest, cache)
    for version in ORDERED:
        expected = {
            "python/" + name: data
            for name, (data, _) in wheel_entries(version).items()
            if name.startswith("sglang/") and name.endswith(".py")
        }
        listing = git(dest, "ls-tree", "-r", f"v{version}").splitlines()
        assert sorted(line.split("\t")[1] for line in listing) == sorted(expected)
        assert all(line.startswith("100644 blob ") for line in listing)
        for path, data in expected.items():
            assert git_bytes(dest, "cat-file", "blob", f"v{version}:{path}") == data
    # The work tree is a clean checkout of the newest release.
    assert git(dest, "status", "--porcelain") == ""
    assert (
        dest / "python/sglang/__init__.py"
    ).read_bytes() == b'__version__ = "0.10.0"\n'
    assert not (dest / "python/sglang/old.py").exists()


def test_commit_dates_are_latest_py_entry(cache: Path, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    build_mirror(VERSIONS, dest, cache)
    for version in ORDERED:
        latest = max(
            when
            for name, (_, when) in wheel_entries(version).items()
            if name.startswith("sglang/") and name.endswith(".py")
        )
        dates = git(dest, "log", "-1", "--format=%at %ct", f"v{version}").split()
        assert dates == [str(calendar.timegm(latest + (0, 0, 0)))] * 2


def test_deterministic(cache: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    build_mirror(VERSIONS, first, cache)
    second.mkdir()  # an empty folder is fine too
    build_mirror(list(reversed(VERSIONS)), second, cache)
    assert git(first, "show-ref") == git(second, "show-ref")


def test_refuses_non_empty_dest(cache: Path, tmp_path: Path) -> None:
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine\n")
    with pytest.raises(MirrorError, match="not empty"):
        build_mirror(VERSIONS, dest, cache)
    assert sorted(p.name for p in dest.iterdir()) == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_bad_wheel_leaves_nothing(cache: Path, tmp_path: Path) -> None:
    (cache / "wheels/sglang/0.2.0/sglang-0.2.0-py3-none-any.whl").write_bytes(
        b"not a zip"
    )
    with pytest.raises(MirrorError, match="sglang-0.2.0"):
        build_mirror(VERSIONS, tmp_path / "mirror", cache)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_fetch_wheel_uses_cache_and_downloads_atomically(
    tmp_path: Path, monkeypatch
) -> None:
    cached = write_wheel(tmp_path, "0.1.0")
    calls: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        folder = Path(cmd[cmd.index("-d") + 1])
        if cmd[cmd.index("--quiet") + 1] == "sglang==9.9":
            return subprocess.CompletedProcess(
                cmd,
                1,
                "",
                "blah\nERROR: No matching distribution found for sglang==9.9\n",
            )
        (folder / "sglang-0.3.0-cp311-cp311-manylinux_2_34_x86_64.whl").write_bytes(
            b"wheel"
        )
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mirror.subprocess, "run", fake_run)
    assert fetch_wheel("0.1.0", tmp_path) == cached and calls == []
    got = fetch_wheel("0.3.0", tmp_path)
    assert (
        got
        == tmp_path
        / "wheels/sglang/0.3.0/sglang-0.3.0-cp311-cp311-manylinux_2_34_x86_64.whl"
    )
    assert calls[0][:11] == [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version=3.11",
        "--implementation=cp",
        "--platform=manylinux_2_34_x86_64",
        "--quiet",
        "sglang==0.3.0",
    ]
    with pytest.raises(MirrorError) as err:
        fetch_wheel("9.9", tmp_path)
    assert (
        str(err.value)
        == "cannot download sglang 9.9: ERROR: No matching distribution found for sglang==9.9"
    )
    # No temp folders and no folder that looks cached for the failed version.
    assert sorted(p.name for p in (tmp_path / "wheels/sglang").iterdir()) == [
        "0.1.0",
        "0.3.0",
    ]


def test_default_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path))
    assert mirror.default_cache() == tmp_path
    monkeypatch.delenv("PATCHKIT_CACHE")
    assert mirror.default_cache() == Path.home() / ".cache" / "patchkit"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    pythonpath = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    # No git identity anywhere: an empty HOME and no global config.
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "HOME": str(cwd / "home"),
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    for name in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "patchkit.dev.mirror", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


def test_cli(cache: Path, tmp_path: Path) -> None:
    args = ["--cache", str(cache), "--versions", *VERSIONS]
    built = run_cli(*args, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    lines = built.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == [f"v{v}" for v in ORDERED]
    assert "4 releases" in lines[-1]
    assert (
        tmp_path / "build/sglang-mirror/.git"
    ).is_dir()  # the default --dest, relative to cwd

    again = run_cli(*args, cwd=tmp_path)
    assert (
        again.returncode == 0
        and "up to date" in again.stdout
        and len(again.stdout.splitlines()) == 1
    )

    fewer = run_cli("--cache", str(cache), "--versions", "0.1.0", cwd=tmp_path)
    assert fewer.returncode == 2 and fewer.stdout == ""
    assert len(fewer.stderr.splitlines()) == 1 and "remove it" in fewer.stderr

    (tmp_path / "other").mkdir()
    (tmp_path / "other/file").write_text("x")
    other = run_cli(*args, "--dest", str(tmp_path / "other"), cwd=tmp_path)
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert len(other.stderr.splitlines()) == 1 and "remove it" in other.stderr

    bad = run_cli(
        "--cache",
        str(cache),
        "--versions",
        "../x",
        "--dest",
        str(tmp_path / "new"),
        cwd=tmp_path,
    )
    assert (
        bad.returncode == 2
        and len(bad.stderr.splitlines()) == 1
        and "not a release version" in bad.stderr
    )
    assert not (tmp_path / "new").exists()
