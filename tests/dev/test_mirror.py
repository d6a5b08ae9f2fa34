"""support.mirror on small fake wheels written by the tests (no network)."""

from __future__ import annotations

import calendar
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit.errors import MirrorError
from patchkit.versions import is_release_tag, version_key
from support import mirror
from support.mirror import build_mirror, fetch_wheel
from support.repos import ROOT

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
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)  # tests/: support.mirror is test tooling
    return subprocess.run(
        [sys.executable, "-m", "support.mirror", *args],
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


# FlashInfer: the flashinfer-python wheels are pure (py3-none-any) and the import package
# sits at the root of its repository, so flashinfer/x.py in the wheel is flashinfer/x.py in git.
FI_VERSIONS = ["0.6.17", "0.6.4", "0.6.4.post1"]
FI_ORDERED = ["0.6.4", "0.6.4.post1", "0.6.17"]


def flashinfer_entries(version: str) -> dict[str, tuple[bytes, tuple]]:
    """name -> (bytes, zip date_time) of a tiny wheel shaped like flashinfer-python's."""
    n = FI_ORDERED.index(version)
    day = (2025, 3, 1 + n)
    majors = "[9, 10, 12]" if n == 2 else "[9, 10]"
    return {
        "flashinfer/__init__.py": (f'__version__ = "{version}"\n'.encode(), day + (10, 0, 0)),
        "flashinfer/jit/__init__.py": (b"", day + (9, 0, 0)),
        "flashinfer/jit/comm.py": (
            f"def gen_trtllm_comm_module():\n    supported_major_versions = {majors}\n".encode(),
            day + (11, 30, 4),
        ),
        # FlashInfer's JIT sources: in the repository at include/ (projects.toml's installed folders).
        "flashinfer/data/include/kernel.cuh": (b"// header\n", day + (22, 0, 0)),
        # Later than every source, and must not end up in the repository.
        "flashinfer/data/libkernel.so": (b"\x7fELF\x00binary", day + (23, 0, 0)),
        "flashinfer_cubin/__init__.py": (b"# another package\n", day + (23, 0, 0)),
        f"flashinfer_python-{version}.dist-info/METADATA": (
            f"Name: flashinfer-python\nVersion: {version}\n".encode(),
            day + (23, 0, 0),
        ),
    }


def write_flashinfer_wheel(cache: Path, version: str) -> Path:
    folder = cache / "wheels" / "flashinfer-python" / version
    folder.mkdir(parents=True)
    path = folder / f"flashinfer_python-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, when) in flashinfer_entries(version).items():
            zf.writestr(zipfile.ZipInfo(name, when), data)
    return path


@pytest.fixture
def fi_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    for version in FI_VERSIONS:
        write_flashinfer_wheel(cache, version)
    return cache


def test_flashinfer_releases_at_the_repository_root(fi_cache: Path, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    lines: list[str] = []
    tags = build_mirror(FI_VERSIONS, dest, fi_cache, progress=lines.append, project="flashinfer")
    assert tags == ["v0.6.4", "v0.6.4.post1", "v0.6.17"]
    assert [line.split() for line in lines] == [[t, "4", "files"] for t in tags]
    assert sorted(git(dest, "tag", "--list").split()) == sorted(tags)
    for version in FI_ORDERED:
        tag = f"v{version}"
        assert git(dest, "rev-list", tag).split() == [git(dest, "rev-parse", tag).strip()]
        listing = git(dest, "ls-tree", "-r", "--name-only", tag).split()
        assert listing == ["flashinfer/__init__.py", "flashinfer/jit/__init__.py", "flashinfer/jit/comm.py", "include/kernel.cuh"]
        for path in listing:
            wheel_path = path.replace("include/", "flashinfer/data/include/", 1)
            assert git_bytes(dest, "cat-file", "blob", f"{tag}:{path}") == flashinfer_entries(version)[wheel_path][0]
        assert git(dest, "log", "-1", "--format=%B", tag) == (
            f"FlashInfer {version}\n\nFrom the PyPI wheel flashinfer_python-{version}-py3-none-any.whl.\n\n"
        )
        who = git(dest, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%at", tag).strip()
        latest = calendar.timegm(flashinfer_entries(version)["flashinfer/data/include/kernel.cuh"][1] + (0, 0, 0))
        assert who == "FlashInfer release mirror <mirror@patchkit.invalid>|" * 2 + str(latest)
    assert git(dest, "show", "v0.6.4:flashinfer/jit/comm.py").splitlines()[1].endswith("= [9, 10]")
    assert git(dest, "show", "v0.6.17:flashinfer/jit/comm.py").splitlines()[1].endswith("= [9, 10, 12]")
    # The work tree is a clean checkout of the newest release, with no python/ folder.
    assert git(dest, "status", "--porcelain") == ""
    assert sorted(p.name for p in dest.iterdir()) == [".git", "flashinfer", "include"]


def test_read_wheel_layouts(cache: Path, fi_cache: Path) -> None:
    # SGLang's layout is unchanged: sglang/x.py in the wheel is python/sglang/x.py in git,
    # with the defaults and with SGLang's registry entry alike.
    sglang_wheel = cache / "wheels/sglang/0.2.0/sglang-0.2.0-py3-none-any.whl"
    files, _ = mirror._read_wheel(sglang_wheel)
    assert [path for path, _ in files] == [
        "python/sglang/__init__.py",
        "python/sglang/srt/__init__.py",
        "python/sglang/srt/layers/quant.py",
    ]
    assert mirror._read_wheel(sglang_wheel, "sglang", "python") == (files, _)
    fi_wheel = fi_cache / "wheels/flashinfer-python/0.6.4/flashinfer_python-0.6.4-py3-none-any.whl"
    fi_files, _ = mirror._read_wheel(fi_wheel, "flashinfer", "")
    assert [path for path, _ in fi_files] == [
        "flashinfer/__init__.py",
        "flashinfer/jit/__init__.py",
        "flashinfer/jit/comm.py",
    ]
    # Each package's files only: an sglang wheel holds no flashinfer/*.py.
    with pytest.raises(MirrorError, match=r"holds no flashinfer/\*\.py files"):
        mirror._read_wheel(sglang_wheel, "flashinfer", "")


def test_sglang_mirror_unchanged_next_to_flashinfer_wheels(cache: Path, tmp_path: Path) -> None:
    before = tmp_path / "before"
    build_mirror(VERSIONS, before, cache)
    # Both projects' wheels in one cache: each project reads its own folder.
    for version in FI_VERSIONS:
        write_flashinfer_wheel(cache, version)
    sglang, flashinfer = tmp_path / "sglang", tmp_path / "flashinfer"
    assert build_mirror(VERSIONS, sglang, cache) == [f"v{v}" for v in ORDERED]
    assert build_mirror(FI_VERSIONS, flashinfer, cache, project="flashinfer") == [f"v{v}" for v in FI_ORDERED]
    assert git(sglang, "show-ref") == git(before, "show-ref")  # the same commit ids
    assert git(sglang, "ls-tree", "-r", "--name-only", "v0.2.0").split() == [
        "python/sglang/__init__.py",
        "python/sglang/srt/__init__.py",
        "python/sglang/srt/layers/quant.py",
    ]
    who = git(sglang, "log", "-1", "--format=%an <%ae>", "v0.2.0").strip()
    assert who == "SGLang release mirror <mirror@patchkit.invalid>"
    # An sglang wheel in flashinfer-python's folder gives no flashinfer files: refused.
    folder = cache / "wheels/flashinfer-python/0.2.0"
    folder.mkdir()
    (folder / "flashinfer_python-0.2.0-py3-none-any.whl").write_bytes(
        (cache / "wheels/sglang/0.2.0/sglang-0.2.0-py3-none-any.whl").read_bytes()
    )
    with pytest.raises(MirrorError, match=r"flashinfer_python-0\.2\.0-py3-none-any\.whl: holds no flashinfer/\*\.py files"):
        build_mirror(["0.2.0"], tmp_path / "none", cache, project="flashinfer")
    assert not (tmp_path / "none").exists()


def test_fetch_wheel_keeps_a_wheel_per_machine(tmp_path: Path, monkeypatch) -> None:
    """One version's folder holds the x86_64 and the aarch64 wheel (vLLM's for a GB10): each platform asked
    gets its own, and a pure wheel serves both; a platform with none cached downloads it."""
    folder = tmp_path / "wheels/vllm/0.34.0"
    folder.mkdir(parents=True)
    x86 = folder / "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    arm = folder / "vllm-0.34.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    x86.write_bytes(b"x86"), arm.write_bytes(b"arm")
    assert fetch_wheel("0.34.0", tmp_path, "vllm", "manylinux_2_28_x86_64") == x86
    assert fetch_wheel("0.34.0", tmp_path, "vllm", "manylinux_2_28_aarch64") == arm
    assert fetch_wheel("0.34.0", tmp_path, "vllm", "manylinux2014_x86_64") == x86
    pure = write_wheel(tmp_path, "0.1.0")
    assert fetch_wheel("0.1.0", tmp_path, platform="manylinux_2_28_aarch64") == pure
    calls: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        (Path(cmd[cmd.index("-d") + 1]) / "vllm-0.34.0-cp38-abi3-manylinux2014_ppc64le.whl").write_bytes(b"ppc")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mirror.subprocess, "run", fake_run)
    assert fetch_wheel("0.34.0", tmp_path, "vllm", "manylinux2014_ppc64le") == folder / "vllm-0.34.0-cp38-abi3-manylinux2014_ppc64le.whl"
    assert "--platform=manylinux2014_ppc64le" in calls[0]


def test_fetch_wheel_flashinfer_cache_folder(tmp_path: Path, monkeypatch) -> None:
    cached = write_flashinfer_wheel(tmp_path, "0.6.4")
    assert cached == tmp_path / "wheels/flashinfer-python/0.6.4/flashinfer_python-0.6.4-py3-none-any.whl"
    calls: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        if cmd[cmd.index("--quiet") + 1] == "flashinfer-python==9.9":
            return subprocess.CompletedProcess(
                cmd, 1, "", "ERROR: No matching distribution found for flashinfer-python==9.9\n"
            )
        folder = Path(cmd[cmd.index("-d") + 1])
        (folder / "flashinfer_python-0.6.17-py3-none-any.whl").write_bytes(b"wheel")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mirror.subprocess, "run", fake_run)
    assert fetch_wheel("0.6.4", tmp_path, "flashinfer-python") == cached and calls == []
    got = fetch_wheel("0.6.17", tmp_path, "flashinfer-python")
    assert got == tmp_path / "wheels/flashinfer-python/0.6.17/flashinfer_python-0.6.17-py3-none-any.whl"
    # The same pip command as for sglang (a pure wheel matches the platform flags too).
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
        "flashinfer-python==0.6.17",
    ]
    with pytest.raises(MirrorError) as err:
        fetch_wheel("9.9", tmp_path, "flashinfer-python")
    assert str(err.value) == (
        "cannot download flashinfer-python 9.9: ERROR: No matching distribution found for flashinfer-python==9.9"
    )
    assert sorted(p.name for p in (tmp_path / "wheels").iterdir()) == ["flashinfer-python"]
    assert sorted(p.name for p in (tmp_path / "wheels/flashinfer-python").iterdir()) == ["0.6.17", "0.6.4"]


def test_flashinfer_releases_list() -> None:
    releases = mirror.FLASHINFER_RELEASES
    assert (releases[0], releases[-1], len(releases)) == ("0.5.0", "0.7.4", 43)
    assert list(releases) == sorted(set(releases), key=version_key)
    assert all(is_release_tag(f"v{v}") for v in releases)
    assert {"0.6.7.post3", "0.6.16.post4", "0.6.18.post1", "0.7.2.post1"} <= set(releases)
    assert mirror.WHEEL_RELEASES == {"sglang": mirror.SGLANG_RELEASES, "flashinfer": releases}


def test_cli_flashinfer_defaults(fi_cache: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    # Without --versions: every release of the list (cut to the cached ones here), into
    # build/flashinfer-mirror by default.
    monkeypatch.setitem(mirror.WHEEL_RELEASES, "flashinfer", tuple(FI_ORDERED))
    monkeypatch.chdir(tmp_path)
    assert mirror.main(["--project", "flashinfer", "--cache", str(fi_cache)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-1]] == [f"v{v}" for v in FI_ORDERED]
    assert out[-1].startswith("build/flashinfer-mirror: 3 releases, main at v0.6.17 ")
    assert sorted(git(tmp_path / "build/flashinfer-mirror", "tag", "--list").split()) == sorted(
        f"v{v}" for v in FI_ORDERED
    )
    assert not (tmp_path / "build/sglang-mirror").exists()
    assert mirror.main(["--project", "flashinfer", "--cache", str(fi_cache)]) == 0
    assert capsys.readouterr().out == "build/flashinfer-mirror: up to date (3 releases)\n"


# vLLM: its releases come from source archives (vllm-<v>/vllm/**/*.py is vllm/**/*.py in git).
VLLM_ORDERED = ["0.10.2", "0.11.0", "0.33.0"]


def write_vllm_sdist(cache: Path, version: str) -> Path:
    import io
    import tarfile

    folder = cache / "sdists" / "vllm" / version
    folder.mkdir(parents=True)
    path = folder / f"vllm-{version}.tar.gz"
    members = {
        "vllm/__init__.py": f'__version__ = "{version}"\n'.encode(),
        "vllm/distributed/device_communicators/all_reduce_utils.py": b'SIZES = {"10.0": {2: 1}}\n',
        "setup.py": b"# not part of the package\n",
        "csrc/kernel.cu": b"// not python\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size, info.mtime = len(data), 1_700_000_000 + VLLM_ORDERED.index(version)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_vllm_releases_list() -> None:
    releases = mirror.VLLM_RELEASES
    assert (releases[0], releases[-1], len(releases)) == ("0.10.2", "0.33.0", 34)
    assert list(releases) == sorted(set(releases), key=version_key)
    assert all(is_release_tag(f"v{v}") for v in releases)
    assert not any("rc" in v or "dev" in v for v in releases)
    # No source archive on PyPI for these two: left out.
    assert not {"0.15.0", "0.15.1"} & set(releases)
    assert {"0.11.2", "0.14.1", "0.20.2", "0.27.1"} <= set(releases)
    assert [mirror.default_releases(p) for p in ("sglang", "flashinfer", "vllm")] == [
        mirror.SGLANG_RELEASES, mirror.FLASHINFER_RELEASES, releases
    ]
    assert mirror.default_releases("nothing") is None


def test_cli_vllm_defaults(tmp_path: Path, monkeypatch, capsys) -> None:
    # Without --versions: every release of VLLM_RELEASES (cut to the cached archives here),
    # into build/vllm-mirror by default.
    cache = tmp_path / "cache"
    for version in VLLM_ORDERED:
        write_vllm_sdist(cache, version)
    monkeypatch.setattr(mirror, "VLLM_RELEASES", tuple(VLLM_ORDERED))
    monkeypatch.chdir(tmp_path)
    assert mirror.main(["--project", "vllm", "--cache", str(cache)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split() for line in out[:-1]] == [[f"v{v}", "2", "files"] for v in VLLM_ORDERED]
    assert out[-1].startswith("build/vllm-mirror: 3 releases, main at v0.33.0 ")
    dest = tmp_path / "build/vllm-mirror"
    assert git(dest, "ls-tree", "-r", "--name-only", "v0.11.0").split() == [
        "vllm/__init__.py",
        "vllm/distributed/device_communicators/all_reduce_utils.py",
    ]
    assert git(dest, "log", "-1", "--format=%s|%b", "v0.11.0").strip() == (
        "vLLM 0.11.0|From the PyPI source archive vllm-0.11.0.tar.gz."
    )
    assert mirror.main(["--project", "vllm", "--cache", str(cache)]) == 0
    assert capsys.readouterr().out == "build/vllm-mirror: up to date (3 releases)\n"
    # A project with no list of releases still needs --versions.
    monkeypatch.setattr(mirror, "default_releases", lambda project: None)
    with pytest.raises(SystemExit) as exit_:
        mirror.main(["--project", "vllm", "--cache", str(cache)])
    assert exit_.value.code == 2
    assert "--versions is required with --project vllm" in capsys.readouterr().err
