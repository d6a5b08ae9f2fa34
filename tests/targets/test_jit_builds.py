"""patchkit.targets.jit_builds on FlashInfer cache layouts built in tmp_path.

The layouts are where FlashInfer's own code puts its builds (test_jit_builds_releases.py derives those
paths from the releases' jit/env.py and jit/core.py); the files in them hold placeholder bytes, since
only their places, types and times matter here.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from patchkit.errors import BadInput, Refused, UnsafePath
from patchkit.targets import jit_builds
from patchkit.targets.jit_builds import AOT, CACHED, PREBUILT, WORKSPACE, Build, drop, find, newest_mtime, older_than

V = "0.6.4"
BUILT = 1_760_000_000  # the build's mtime
PATCHED = BUILT + 3600  # the patched sources', an hour later
NINJA = b"ninja_required_version = 1.3\nname = trtllm_comm\n"
KEEPS_NINJA = ("FlashInfer 0.6.4 keeps an existing build.ninja (jit/core.py: JitSpec.build writes it only when"
               " missing), so ninja rebuilds it with the flags of before the patch")


def make_build(jit_dir: Path, module: str = "trtllm_comm", mtime: int = BUILT) -> Path:
    """A finished build folder as FlashInfer's ninja leaves it: build.ninja, objects, the .so, ninja's log."""
    folder = jit_dir / module
    folder.mkdir(parents=True)
    files = {"build.ninja": NINJA, f"{module}.so": b"\x7fELF so", "trtllm_allreduce.cuda.o": b"\x7fELF o",
             "trtllm_allreduce.cuda.o.d": b"deps\n", ".ninja_log": b"# ninja log v5\n"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
        os.utime(folder / name, (mtime, mtime))
    return folder


def snapshot(top: Path) -> dict[str, bytes | str]:
    """Every file, link and folder below ``top``: its bytes, link target or "dir"."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(top):  # never into a symlinked folder
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(top))
            out[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes()
    return dict(sorted(out.items()))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def cache(home: Path, version: str = V, arch: str = "120a") -> Path:
    return home / ".cache" / "flashinfer" / version / arch / "cached_ops"


def test_no_cache_finds_nothing(home: Path, tmp_path: Path) -> None:
    assert find(V, [tmp_path / "site"], {}, home, ["trtllm_comm"]) == []
    make_build(cache(home, "0.6.3"))  # another release's build: 0.6.4 never loads it
    make_build(cache(home), "norm")  # another module
    assert find(V, [tmp_path / "site"], {}, home, ["trtllm_comm"]) == []
    assert find(V, [], {}, home, []) == []


def test_a_cached_build_is_found_and_dropped_and_the_rest_left_alone(home: Path) -> None:
    first = make_build(cache(home, arch="120a"))
    second = make_build(cache(home, arch="90a_120a"), mtime=BUILT + 5)
    make_build(cache(home), "norm")
    make_build(cache(home, "0.6.3"))
    (cache(home) / "tmp").mkdir()
    (cache(home) / "tmp" / "norm.lock").write_bytes(b"")
    root = home / ".cache" / "flashinfer"
    builds = find(V, [], {}, home, ["trtllm_comm"])
    assert builds == [
        Build("trtllm_comm", CACHED, first, first / "trtllm_comm.so", BUILT, "120a", True, KEEPS_NINJA, "", root),
        Build("trtllm_comm", CACHED, second, second / "trtllm_comm.so", BUILT + 5, "90a_120a", True, KEEPS_NINJA, "", root),
    ]
    before = snapshot(root)
    assert [drop(b) for b in builds] == [first, second]
    after = snapshot(root)
    gone = {k for k in before if k.startswith((f"{V}/120a/cached_ops/trtllm_comm", f"{V}/90a_120a/cached_ops/trtllm_comm"))}
    lock = f"{V}/120a/cached_ops/tmp/trtllm_comm.lock"  # FlashInfer's lock on the module, which drop held
    assert len(gone) == 12 and after == dict(sorted({**{k: v for k, v in before.items() if k not in gone}, lock: b""}.items()))
    assert find(V, [], {}, home, ["trtllm_comm"]) == []
    assert drop(builds[0]) is None  # gone already


def test_a_build_without_its_so_is_dated_by_its_build_ninja(home: Path) -> None:
    folder = make_build(cache(home))
    (folder / "trtllm_comm.so").unlink()
    os.utime(folder / "build.ninja", (BUILT - 60, BUILT - 60))
    (build,) = find(V, [], {}, home, ["trtllm_comm"])
    assert (build.path, build.mtime) == (folder, BUILT - 60)


@pytest.mark.parametrize(
    "version, reason",
    [
        ("0.6.11", KEEPS_NINJA.replace("0.6.4", "0.6.11")),
        ("0.6.11.post1", "ninja rebuilds it only if a source is dated after it (jit/cpp_ext.py: depfiles, mtimes)"),
        ("0.6.16.post4", "ninja rebuilds it only if a source is dated after it (jit/cpp_ext.py: depfiles, mtimes)"),
        # A local build's cache folder is named by its whole version (__version__ is METADATA's);
        # which release it behaves as is its public one.
        ("0.6.11+cu128", KEEPS_NINJA.replace("0.6.4", "0.6.11+cu128")),
        ("0.6.11.post1+cu128.torch28", "ninja rebuilds it only if a source is dated after it (jit/cpp_ext.py: depfiles, mtimes)"),
    ],
)
def test_the_reason_follows_the_release(home: Path, version: str, reason: str) -> None:
    make_build(cache(home, version))
    (build,) = find(version, [], {}, home, ["trtllm_comm"])
    assert build.reason == reason


def test_flashinfer_workspace_base_is_honoured(home: Path, tmp_path: Path) -> None:
    base = tmp_path / "scratch"
    theirs = make_build(cache(base, arch="120f"))
    ours = make_build(cache(home))
    (build,) = find(V, [], {"FLASHINFER_WORKSPACE_BASE": str(base)}, home, ["trtllm_comm"])
    assert (build.kind, build.path, build.root, build.arch) == (WORKSPACE, theirs, base / ".cache" / "flashinfer", "120f")
    assert drop(build) == theirs and not theirs.exists() and (ours / "trtllm_comm.so").exists()
    (build,) = find(V, [], {}, home, ["trtllm_comm"])
    assert (build.kind, build.path) == (CACHED, ours)


@pytest.mark.parametrize("env, root", [({}, "HOMEARG"), ({"HOME": "/srv/u/"}, "/srv/u"), ({"HOME": ""}, "/")])
def test_home_is_the_servers_home(home: Path, env: dict, root: str) -> None:
    want = Path(str(home) if root == "HOMEARG" else root) / ".cache" / "flashinfer"
    assert jit_builds.cache_root(env, home) == (want, CACHED)


@pytest.mark.parametrize(
    "env, line",
    [
        ({"FLASHINFER_WORKSPACE_BASE": ""}, "FLASHINFER_WORKSPACE_BASE=''"),
        ({"FLASHINFER_WORKSPACE_BASE": "fi/cache"}, "FLASHINFER_WORKSPACE_BASE='fi/cache'"),
        ({"HOME": "users/x"}, "HOME='users/x'"),
    ],
)
def test_a_relative_cache_root_is_one_line(home: Path, env: dict, line: str) -> None:
    with pytest.raises(BadInput) as caught:
        find(V, [], env, home, ["trtllm_comm"])
    assert str(caught.value) == (f"{line}: a relative folder: FlashInfer's cache is then below the server's"
                                 " working folder, which patchkit cannot know")


@pytest.mark.parametrize("where", ["build", "arch", "cached_ops"])
def test_a_symlinked_folder_is_refused_with_one_line(home: Path, tmp_path: Path, where: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    make_build(elsewhere / "cached_ops")
    link = {"build": cache(home) / "trtllm_comm", "arch": cache(home).parent, "cached_ops": cache(home)}[where]
    target = {"build": elsewhere / "cached_ops" / "trtllm_comm", "arch": elsewhere, "cached_ops": elsewhere / "cached_ops"}[where]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    before = snapshot(tmp_path)
    (build,) = find(V, [], {}, home, ["trtllm_comm"])
    assert (build.path, build.mtime, build.droppable) == (cache(home) / "trtllm_comm", BUILT, True)
    with pytest.raises(UnsafePath) as caught:
        drop(build)
    root = home / ".cache" / "flashinfer"
    assert str(caught.value) == f"{link}: refused: a symlink (to {target}), not a folder; patchkit removes only real folders inside {root}"
    assert caught.value.exit_code == 3 and snapshot(tmp_path) == before


def test_a_symlink_inside_a_build_goes_and_what_it_points_to_stays(home: Path, tmp_path: Path) -> None:
    folder = make_build(cache(home))
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.so").write_bytes(b"keep")
    (folder / "linked.so").symlink_to(tmp_path / "outside" / "keep.so")
    (folder / "linked_dir").symlink_to(tmp_path / "outside")
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "sub" / "deeper" / "x.o").write_bytes(b"o")
    (build,) = find(V, [], {}, home, ["trtllm_comm"])
    assert drop(build) == folder and not os.path.lexists(folder)
    assert snapshot(tmp_path / "outside") == {"keep.so": b"keep"}


def test_a_build_held_by_a_running_flashinfer_is_refused(home: Path) -> None:
    folder = make_build(cache(home))
    (cache(home) / "tmp").mkdir()
    lock = cache(home) / "tmp" / "trtllm_comm.lock"
    (build,) = find(V, [], {}, home, ["trtllm_comm"])
    with open(lock, "wb") as held:  # filelock's own way: flock on the lock file
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(Refused) as caught:
            drop(build)
        assert str(caught.value) == (f"{lock}: refused: a running FlashInfer holds this lock while it builds or loads"
                                     " trtllm_comm; try again when it is done")
        assert (folder / "trtllm_comm.so").read_bytes() == b"\x7fELF so"
    assert drop(build) == folder and not folder.exists() and lock.read_bytes() == b""


@pytest.mark.parametrize(
    "path",
    ["{tmp}/elsewhere/cached_ops/trtllm_comm", "{root}/0.6.4/120a/trtllm_comm", "{root}/0.6.4/120a/cached_ops/../../x/cached_ops/y"],
)
def test_drop_stays_below_the_cache_root(home: Path, tmp_path: Path, path: str) -> None:
    make_build(cache(home))
    root = home / ".cache" / "flashinfer"
    (build,) = find(V, [], {}, home, ["trtllm_comm"])
    forged = build._replace(path=Path(path.format(tmp=tmp_path, root=root)))
    with pytest.raises(UnsafePath) as caught:
        drop(forged)
    assert str(caught.value) == f"{forged.path}: refused: not a module's build folder below the FlashInfer cache {root}"
    assert (build.path / "trtllm_comm.so").exists()


def jit_cache(site: Path, version: str, modules=("trtllm_comm", "norm")) -> None:
    """flashinfer-jit-cache as pip installs it: the package, its prebuilt modules, its dist-info."""
    (site / "flashinfer_jit_cache").mkdir(parents=True)
    (site / "flashinfer_jit_cache" / "__init__.py").write_bytes(b"")
    for module in modules:
        (site / "flashinfer_jit_cache" / "jit_cache" / module).mkdir(parents=True)
        (site / "flashinfer_jit_cache" / "jit_cache" / module / f"{module}.so").write_bytes(b"\x7fELF prebuilt")
        os.utime(site / "flashinfer_jit_cache" / "jit_cache" / module / f"{module}.so", (BUILT - 86400,) * 2)
    info = site / f"flashinfer_jit_cache-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(f"Metadata-Version: 2.1\nName: flashinfer-jit-cache\nVersion: {version}\n".encode())


PREBUILT_REASON = "FlashInfer loads it before building anything (jit/core.py: build_and_load checks aot_path first)"
UNINSTALL = ("no setting turns it off (jit/env.py: _get_aot_dir): `pip uninstall flashinfer-jit-cache`, and FlashInfer"
             " builds its modules on first use")
MISMATCH = ("; flashinfer-jit-cache 0.6.3+cu129 is not FlashInfer 0.6.4's, so FlashInfer does not import at all"
            " unless FLASHINFER_DISABLE_VERSION_CHECK is set")


@pytest.mark.parametrize(
    "theirs, env, reason",
    [
        ("0.6.4+cu129", {}, PREBUILT_REASON),
        ("0.6.3+cu129", {}, PREBUILT_REASON + MISMATCH),
        ("0.6.3+cu129", {"FLASHINFER_DISABLE_VERSION_CHECK": "1"}, PREBUILT_REASON),
    ],
)
def test_a_prebuilt_module_is_named_never_dropped(home: Path, tmp_path: Path, theirs: str, env: dict, reason: str) -> None:
    site = tmp_path / "site"
    jit_cache(site, theirs)
    cached = make_build(cache(home))
    so = site / "flashinfer_jit_cache" / "jit_cache" / "trtllm_comm" / "trtllm_comm.so"
    builds = find(V, [tmp_path / "other-site", site], env, home, ["trtllm_comm"])
    assert builds[0] == Build("trtllm_comm", PREBUILT, so, so, BUILT - 86400, None, False, reason, UNINSTALL, None)
    assert [b.path for b in builds[1:]] == [cached]
    with pytest.raises(Refused) as caught:
        drop(builds[0])
    assert str(caught.value) == f"{so}: refused: prebuilt by flashinfer-jit-cache, not patchkit's to remove; {UNINSTALL}"
    assert so.read_bytes() == b"\x7fELF prebuilt"


def test_a_prebuilt_module_is_never_built_from_the_patched_sources(home: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    jit_cache(site, "0.6.4+cu129")  # installed after the patch: pip dates the .so by the install
    so = site / "flashinfer_jit_cache" / "jit_cache" / "trtllm_comm" / "trtllm_comm.so"
    os.utime(so, (PATCHED + 60, PATCHED + 60))
    make_build(cache(home), mtime=PATCHED + 60)  # a JIT build made after the patch: from the patched sources
    builds = find(V, [site], {}, home, ["trtllm_comm"])
    assert [b.path for b in older_than(builds, PATCHED)] == [so]


def test_the_jit_cache_without_the_module_prebuilds_nothing_of_it(home: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    jit_cache(site, "0.6.4+cu129", modules=("norm",))
    (site / "flashinfer" / "data" / "aot" / "trtllm_comm").mkdir(parents=True)  # ignored while jit-cache is installed
    (site / "flashinfer" / "data" / "aot" / "trtllm_comm" / "trtllm_comm.so").write_bytes(b"aot")
    assert find(V, [site], {}, home, ["trtllm_comm"]) == []


def test_an_aot_build_inside_flashinfer_counts_without_the_jit_cache(home: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    so = site / "flashinfer" / "data" / "aot" / "trtllm_comm" / "trtllm_comm.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"aot")
    (build,) = find(V, [site], {}, home, ["trtllm_comm", "norm"])
    assert (build.kind, build.path, build.droppable) == (AOT, so, False)
    assert build.advice == ("an ahead-of-time build (python -m flashinfer.aot), not a cache: remove its folder,"
                            " or rebuild it from the patched sources")
    checkout = tmp_path / "checkout" / "flashinfer"  # an editable install: its own flashinfer/ folder
    assert find(V, [site], {}, home, ["trtllm_comm"], package=checkout) == []


@pytest.mark.parametrize("built, stale", [(PATCHED - 1, True), (PATCHED - 0.25, True), (PATCHED, False), (PATCHED + 1, False)])
def test_older_than_says_built_before_the_patch(home: Path, built: float, stale: bool) -> None:
    make_build(cache(home), mtime=built)
    builds = find(V, [], {}, home, ["trtllm_comm"])
    assert older_than(builds, PATCHED) == (builds if stale else [])


def test_newest_mtime_of_the_patched_sources(tmp_path: Path) -> None:
    files = [tmp_path / "a.cuh", tmp_path / "b.cu", tmp_path / "gone.cu"]
    for path, t in zip(files[:2], (PATCHED - 10, PATCHED), strict=True):
        path.write_bytes(b"x")
        os.utime(path, (t, t))
    assert newest_mtime(files) == PATCHED
    assert newest_mtime(files[2:]) is None
    build = Build("trtllm_comm", CACHED, tmp_path, tmp_path, None, "120a", True, "", "", tmp_path)
    assert older_than([build], PATCHED) == []  # a time it cannot read says nothing


@pytest.mark.parametrize(
    "paths, modules",
    [
        (["flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"], ("trtllm_comm",)),
        (["flashinfer/data/include/flashinfer/utils.cuh", "flashinfer/data/csrc/trtllm_allreduce.cu"], ("trtllm_comm",)),
        (["flashinfer/jit/comm.py"], ("trtllm_comm",)),
        (["include/flashinfer/comm/trtllm_moe_allreduce_fusion.cuh"], ("trtllm_comm",)),  # a checkout's spelling
        (["flashinfer/aot.py", "flashinfer/comm/trtllm_ar.py"], ()),  # AOT's list, and Python that loads the module
        (["flashinfer/data/include/flashinfer/comm/trtllm_mnnvl_allreduce.cuh", "csrc/trtllm_allreduce.cu.orig"], ()),
    ],
)
def test_modules_for_patched_paths(paths: list, modules: tuple) -> None:
    assert jit_builds.modules_for(paths) == modules


@pytest.mark.parametrize(
    "version, module, line",
    [("../0.6.4", "trtllm_comm", "../0.6.4: not a FlashInfer release version"),
     ("0.6.4+cu128/../..", "trtllm_comm", "0.6.4+cu128/../..: not a FlashInfer release version"),
     ("0.6.4+CU128", "trtllm_comm", "0.6.4+CU128: not a FlashInfer release version"),
     ("0.6.4+", "trtllm_comm", "0.6.4+: not a FlashInfer release version"),
     (V, "../trtllm_comm", "../trtllm_comm: not a FlashInfer JIT module name")],
)
def test_bad_names_are_one_line(home: Path, version: str, module: str, line: str) -> None:
    with pytest.raises(BadInput) as caught:
        find(version, [], {}, home, [module])
    assert str(caught.value) == line and caught.value.exit_code == 2


def test_the_module_imports_the_standard_library_only() -> None:
    import ast
    import sys

    tree = ast.parse(Path(jit_builds.__file__).read_bytes())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert sorted(names - set(sys.stdlib_module_names)) == ["patchkit"]
