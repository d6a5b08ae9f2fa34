"""patchkit.targets.bytecode: find, check and drop cached bytecode of rewritten sources.

Fixture modules are small invented code written into tmp_path and compiled with
py_compile / compileall of the running interpreter.
"""

from __future__ import annotations

import _imp
import compileall
import importlib.util
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.targets import bytecode
from patchkit.targets.bytecode import Pyc, cached_files, check, drop
from support.repos import ROOT

MODE = py_compile.PycInvalidationMode
TAG = sys.implementation.cache_tag  # e.g. "cpython-311"
MTIME = 1_700_000_000

MOD = b'"""An invented module."""\n\nLIMITS = {9: 64, 10: 128}\n\n\ndef limit(sm):\n    assert sm > 0\n    return LIMITS.get(sm, 0)\n'
MOD_EDITED = MOD.replace(b"10: 128}", b"10: 128, 12: 256}")  # longer
MOD_SAME_SIZE = MOD.replace(b"10: 128", b"10: 256")  # same length, other content
assert len(MOD_SAME_SIZE) == len(MOD) and MOD_SAME_SIZE != MOD


@pytest.fixture(autouse=True)
def no_pycache_prefix(monkeypatch):
    """PYTHONPYCACHEPREFIX would send py_compile's output out of __pycache__."""
    monkeypatch.setattr(sys, "pycache_prefix", None)


def pyc(src: Path, opt: int | str = "") -> Path:
    return Path(importlib.util.cache_from_source(src, optimization=opt))


def write(path: Path, data: bytes, mtime: int = MTIME) -> Path:
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Path]:
    """pkg/mod.py with every kind of pyc, next to modules and files that are not its own."""
    d = tmp_path / "pkg"
    d.mkdir()
    src = write(d / "mod.py", MOD)
    py_compile.compile(str(src), doraise=True)  # timestamp
    py_compile.compile(str(src), doraise=True, optimize=1, invalidation_mode=MODE.CHECKED_HASH)
    py_compile.compile(str(src), doraise=True, optimize=2, invalidation_mode=MODE.UNCHECKED_HASH)
    py_compile.compile(str(src), cfile=str(d / "mod.pyc"), doraise=True)  # legacy, beside the source
    cache = d / "__pycache__"
    shutil.copy(pyc(src), cache / "mod.cpython-39.pyc")  # fake other interpreters (3.11 magic inside)
    shutil.copy(pyc(src, 1), cache / "mod.pypy39-pp73.pyc")
    # Not mod's: modules sharing a prefix or suffix, backups, temp files, unrelated files.
    for name in ("mod_extra", "my_mod", "mod2"):
        compileall.compile_file(str(write(d / f"{name}.py", b"X = 1\n")), quiet=2)
    for name in (f"mod.{TAG}.pyc.bak", f"mod.{TAG}.pyc.140234", "mod.txt", f"mod.{TAG}.opt-.pyc"):
        (cache / name).write_bytes(b"x")
    for name in ("mod.pyc.bak", "mod_extra.pyc", "README"):
        (d / name).write_bytes(b"x")
    return {
        "dir": d,
        "src": src,
        "timestamp": pyc(src),
        "checked": pyc(src, 1),
        "unchecked": pyc(src, 2),
        "legacy": d / "mod.pyc",
        "cp39": cache / "mod.cpython-39.pyc",
        "pypy": cache / "mod.pypy39-pp73.pyc",
    }


# Sorted order: ".opt-1.pyc" < ".pyc", "cpython" < "pypy", "__pycache__/" < "mod.pyc".
ORDER = ("checked", "unchecked", "timestamp", "cp39", "pypy", "legacy")


def mine(p: dict[str, Path]) -> list[Path]:
    return [p[k] for k in ORDER]


def tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


# --- cached_files -----------------------------------------------------------------


def test_cached_files_finds_exactly_the_modules_pycs(project):
    assert cached_files(project["src"]) == mine(project) == sorted(mine(project))
    assert project["checked"].name == f"mod.{TAG}.opt-1.pyc"
    assert project["unchecked"].name == f"mod.{TAG}.opt-2.pyc"
    d = project["dir"]
    assert cached_files(d / "mod_extra.py") == [d / "__pycache__" / f"mod_extra.{TAG}.pyc", d / "mod_extra.pyc"]
    assert cached_files(d / "my_mod.py") == [d / "__pycache__" / f"my_mod.{TAG}.pyc"]


@pytest.mark.parametrize(
    "name, matches",
    [
        ("utils.cpython-311.pyc", True),
        ("utils.cpython-312.opt-1.pyc", True),
        ("utils.cpython-310.opt-2.pyc", True),
        ("utils.pypy39-pp73.pyc", True),
        ("utils.pypy39.pyc", True),
        ("utils.graalpy231-310.pyc", True),
        ("utils_extra.cpython-311.pyc", False),
        ("my_utils.cpython-311.pyc", False),
        ("utils.cpython-311.pyc.bak", False),
        ("utils.cpython-311.pyc.140234", False),
        ("utils.pyc.bak", False),
        ("utils.pyc", False),  # not a name Python writes into __pycache__
        ("utils.cpython-311.opt-1.opt-2.pyc", False),
        ("utils.extra.cpython-311.pyc", False),  # module "utils.extra.py"
        ("Utils.cpython-311.pyc", False),
        ("utils.cpython-311.py", False),
    ],
)
def test_cached_files_name_matching(tmp_path, name, matches):
    src = write(tmp_path / "utils.py", b"")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / name).write_bytes(b"")
    assert cached_files(src) == ([tmp_path / "__pycache__" / name] if matches else [])


# Module names may contain dots ("a.b.py" has stem "a.b") and regex characters.
STEMS = st.text("abmod_+.-[]()1", min_size=1, max_size=8).filter(
    lambda s: not s.startswith(".") and not s.endswith(".")
)
TAGS = st.sampled_from(["cpython-39", "cpython-311", "cpython-313", "pypy39-pp73", "pypy310", "graalpy240-311"])


@settings(max_examples=200, deadline=None)
@given(stem=STEMS, other=STEMS, tag=TAGS, opt=st.sampled_from(["", ".opt-1", ".opt-2"]))
def test_cached_files_never_takes_another_modules_pyc(stem, other, tag, opt):
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{stem}.py"
        (Path(tmp) / "__pycache__").mkdir()
        own = Path(tmp) / "__pycache__" / f"{stem}.{tag}{opt}.pyc"
        foreign = Path(tmp) / "__pycache__" / f"{other}.{tag}{opt}.pyc"
        own.write_bytes(b"")
        foreign.write_bytes(b"")
        assert cached_files(src) == [own]  # never `foreign`, unless it is the same file


# What follows "<stem>." in a cached file's name, as the regular expression patchkit once compiled.
CACHED_NAME = r"[A-Za-z0-9_-]*[0-9][A-Za-z0-9_-]*(?:\.opt-[0-9]+)?\.pyc"


@settings(max_examples=500, deadline=None)
@given(rest=st.lists(st.sampled_from(["cpython", "-", "3", "11", "_", ".opt-", ".pyc", ".", "pyc", "x", "٣", "A", "opt", "1"]),
                     max_size=6).map("".join))
def test_a_cached_name_is_what_the_tag_pattern_matches_whole(rest):
    import re

    assert bytecode._cached_name(rest) == (re.fullmatch(CACHED_NAME, rest) is not None)


def test_cached_files_escapes_regex_characters_in_the_stem(tmp_path):
    src = write(tmp_path / "a+b.py", b"")
    py_compile.compile(str(src), doraise=True)
    (tmp_path / "__pycache__" / f"aab.{TAG}.pyc").write_bytes(b"")  # would match an unescaped "a+b"
    assert cached_files(src) == [pyc(src)]


def test_missing_pycache_gives_nothing(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    assert cached_files(src) == []
    assert check(src) == []
    assert drop([src]) == []
    assert tree(tmp_path) == {src}


def test_pycache_that_is_a_file_gives_nothing(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    (tmp_path / "__pycache__").write_bytes(b"")
    assert cached_files(src) == []


def test_missing_source_still_lists_its_pycs(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    py_compile.compile(str(src), doraise=True)
    src.unlink()
    assert cached_files(src) == [pyc(src)]


# --- drop -------------------------------------------------------------------------


def test_drop_deletes_exactly_the_modules_pycs(project):
    before = tree(project["dir"])
    assert drop([project["src"]]) == mine(project)
    assert tree(project["dir"]) == before - set(mine(project))
    assert (project["dir"] / "__pycache__").is_dir()
    assert cached_files(project["src"]) == []
    assert project["src"].read_bytes() == MOD
    assert drop([project["src"]]) == []


def test_drop_several_sources_in_order(project):
    d = project["dir"]
    extra = d / "mod_extra.py"
    before = tree(d)
    deleted = drop([extra, project["src"], d / "absent.py", project["src"]])
    assert deleted == [d / "__pycache__" / f"mod_extra.{TAG}.pyc", d / "mod_extra.pyc", *mine(project)]
    assert tree(d) == before - set(deleted)
    assert (d / "__pycache__" / f"my_mod.{TAG}.pyc").exists()


def test_drop_tolerates_a_file_that_vanished_meanwhile(project, monkeypatch):
    listed = cached_files(project["src"])
    project["checked"].unlink()  # gone between listing and deleting
    monkeypatch.setattr(bytecode, "cached_files", lambda source: listed)
    assert drop([project["src"]]) == [p for p in mine(project) if p != project["checked"]]
    assert [p for p in listed if p.exists()] == []


# --- check ------------------------------------------------------------------------


def test_check_fresh_right_after_compiling(project):
    ts, hs = "source mtime and size match", "source hash matches"
    p = project
    assert check(p["src"]) == [
        Pyc(p["checked"], "fresh", hs),
        Pyc(p["unchecked"], "fresh", hs),
        Pyc(p["timestamp"], "fresh", ts),
        Pyc(p["cp39"], "fresh", ts),
        Pyc(p["pypy"], "fresh", hs),
        Pyc(p["legacy"], "fresh", ts),
    ]
    assert [c.path for c in check(p["src"])] == mine(p)


def test_check_after_edit_changing_size_and_mtime(project):
    p = project
    write(p["src"], MOD_EDITED, mtime=MTIME + 60)
    ts = f"source mtime {MTIME} != {MTIME + 60}; source size {len(MOD)} != {len(MOD_EDITED)}"
    assert check(p["src"]) == [
        Pyc(p["checked"], "stale", "source hash differs"),
        Pyc(p["unchecked"], "stale", "source hash differs"),
        Pyc(p["timestamp"], "stale", ts),
        Pyc(p["cp39"], "stale", ts),
        Pyc(p["pypy"], "stale", "source hash differs"),
        Pyc(p["legacy"], "stale", ts),
    ]


def test_check_after_edit_changing_only_size(project):
    p = project
    write(p["src"], MOD_EDITED)  # same mtime as when compiled
    ts = f"source size {len(MOD)} != {len(MOD_EDITED)}"
    assert [(c.status, c.reason) for c in check(p["src"])] == [
        ("stale", "source hash differs"),
        ("stale", "source hash differs"),
        ("stale", ts),
        ("stale", ts),
        ("stale", "source hash differs"),
        ("stale", ts),
    ]


def test_check_same_size_same_mtime_edit_only_seen_by_hash_pycs(project):
    p = project
    st = p["src"].stat()
    p["src"].write_bytes(MOD_SAME_SIZE)
    os.utime(p["src"], ns=(st.st_atime_ns, st.st_mtime_ns))
    ts = "source mtime and size match"
    assert check(p["src"]) == [
        Pyc(p["checked"], "stale", "source hash differs"),
        Pyc(p["unchecked"], "stale", "source hash differs"),
        Pyc(p["timestamp"], "fresh", ts),
        Pyc(p["cp39"], "fresh", ts),
        Pyc(p["pypy"], "stale", "source hash differs"),
        Pyc(p["legacy"], "fresh", ts),
    ]


def test_check_touch_only_seen_by_timestamp_pycs(project):
    p = project
    os.utime(p["src"], (MTIME - 1, MTIME - 1))
    ts = f"source mtime {MTIME} != {MTIME - 1}"
    hs = "source hash matches"
    assert [(c.status, c.reason) for c in check(p["src"])] == [
        ("fresh", hs),
        ("fresh", hs),
        ("stale", ts),
        ("stale", ts),
        ("fresh", hs),
        ("stale", ts),
    ]


def test_check_fractional_mtime_is_truncated_like_python(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    os.utime(src, ns=(0, MTIME * 10**9 + 999_999_999))
    py_compile.compile(str(src), doraise=True)
    assert check(src) == [Pyc(pyc(src), "fresh", "source mtime and size match")]


def test_check_mtime_beyond_32_bits_is_masked(tmp_path):
    src = write(tmp_path / "mod.py", MOD, mtime=2**32 + 5)
    if int(src.stat().st_mtime) != 2**32 + 5:
        pytest.skip("file system cannot store an mtime after 2106")
    py_compile.compile(str(src), doraise=True)
    assert int.from_bytes(pyc(src).read_bytes()[8:12], "little") == 5
    assert check(src) == [Pyc(pyc(src), "fresh", "source mtime and size match")]


def test_check_uses_given_source_bytes_for_hashes(project):
    p = project
    assert {c.status for c in check(p["src"], MOD)} == {"fresh"}
    assert [c.status for c in check(p["src"], MOD_SAME_SIZE)] == ["stale", "stale", "fresh", "fresh", "stale", "fresh"]


def test_check_hashes_with_the_pycs_own_magic(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    magic38 = (3413).to_bytes(2, "little") + b"\r\n"  # CPython 3.8's magic number, never the running one
    own = _imp.source_hash(int.from_bytes(magic38, "little"), MOD)
    assert own != importlib.util.source_hash(MOD)  # the key matters
    good = cache / "mod.cpython-38.pyc"
    good.write_bytes(magic38 + (0b11).to_bytes(4, "little") + own + b"\xe3code")
    bad = cache / "mod.cpython-38.opt-1.pyc"
    bad.write_bytes(magic38 + (0b01).to_bytes(4, "little") + importlib.util.source_hash(MOD) + b"\xe3code")
    assert check(src) == [Pyc(bad, "stale", "source hash differs"), Pyc(good, "fresh", "source hash matches")]


def test_check_reads_only_the_header(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    py_compile.compile(str(src), doraise=True)
    with open(pyc(src), "r+b") as f:  # keep the header, ruin the code object
        f.truncate(16)
    assert check(src) == [Pyc(pyc(src), "fresh", "source mtime and size match")]


def test_check_invalid_pycs(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    py_compile.compile(str(src), doraise=True)
    header = pyc(src).read_bytes()[:16]
    cache = tmp_path / "__pycache__"
    files = {
        "mod.cpython-35.pyc": header[:10],  # truncated
        "mod.cpython-36.pyc": b"",
        "mod.cpython-37.pyc": b"this is not bytecode at all",
        "mod.cpython-38.pyc": header[:4] + (4).to_bytes(4, "little") + header[8:],  # unknown flag bit
    }
    for name, data in files.items():
        (cache / name).write_bytes(data)
    expected = [
        Pyc(cache / f"mod.{TAG}.pyc", "fresh", "source mtime and size match"),
        Pyc(cache / "mod.cpython-35.pyc", "invalid", "header is 10 bytes, expected 16"),
        Pyc(cache / "mod.cpython-36.pyc", "invalid", "header is 0 bytes, expected 16"),
        Pyc(cache / "mod.cpython-37.pyc", "invalid", "bad magic number b'this'"),
        Pyc(cache / "mod.cpython-38.pyc", "invalid", "unknown flags 0x4"),
    ]
    assert check(src) == sorted(expected, key=lambda c: c.path)


def test_check_skips_a_pyc_that_vanished_meanwhile(project, monkeypatch):
    listed = cached_files(project["src"])
    project["timestamp"].unlink()
    monkeypatch.setattr(bytecode, "cached_files", lambda source: listed)
    assert [c.path for c in check(project["src"])] == [p for p in mine(project) if p != project["timestamp"]]


def test_check_without_source_raises(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    py_compile.compile(str(src), doraise=True)
    src.unlink()
    with pytest.raises(FileNotFoundError):
        check(src)


def test_check_legacy_pyc_only(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    legacy = tmp_path / "mod.pyc"
    py_compile.compile(str(src), cfile=str(legacy), doraise=True)
    assert check(src) == [Pyc(legacy, "fresh", "source mtime and size match")]
    write(src, MOD_EDITED)
    assert check(src) == [Pyc(legacy, "stale", f"source size {len(MOD)} != {len(MOD_EDITED)}")]


# --- symlinks ---------------------------------------------------------------------


def test_symlinked_pycache_outside_is_skipped(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    d = tmp_path / "pkg"
    d.mkdir()
    src = write(d / "mod.py", MOD)
    py_compile.compile(str(src), cfile=str(outside / f"mod.{TAG}.pyc"), doraise=True)
    (d / "__pycache__").symlink_to(outside, target_is_directory=True)
    before = tree(tmp_path)
    assert cached_files(src) == []
    assert check(src) == []
    assert drop([src]) == []
    assert tree(tmp_path) == before
    assert (outside / f"mod.{TAG}.pyc").is_file()


def test_symlinked_pycache_outside_still_reports_legacy_pyc(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / f"mod.{TAG}.pyc").write_bytes(b"x")
    d = tmp_path / "pkg"
    d.mkdir()
    src = write(d / "mod.py", MOD)
    (d / "__pycache__").symlink_to(outside)
    legacy = d / "mod.pyc"
    py_compile.compile(str(src), cfile=str(legacy), doraise=True)
    assert drop([src]) == [legacy]
    assert (outside / f"mod.{TAG}.pyc").is_file()


def test_symlinked_pycache_inside_the_directory_is_used(tmp_path):
    src = write(tmp_path / "mod.py", MOD)
    real = tmp_path / ".cache"
    real.mkdir()
    py_compile.compile(str(src), cfile=str(real / f"mod.{TAG}.pyc"), doraise=True)
    (tmp_path / "__pycache__").symlink_to(".cache")
    assert cached_files(src) == [pyc(src)]
    assert check(src) == [Pyc(pyc(src), "fresh", "source mtime and size match")]
    assert drop([src]) == [pyc(src)]
    assert not (real / f"mod.{TAG}.pyc").exists() and real.is_dir()
    assert (tmp_path / "__pycache__").is_symlink()


def test_symlinked_source_directory_is_not_outside(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    src = write(real / "mod.py", MOD)
    py_compile.compile(str(src), doraise=True)
    (tmp_path / "link").symlink_to(real)
    (real / "__pycache__").rename(real / "cache")
    (real / "__pycache__").symlink_to("cache")
    via_link = tmp_path / "link" / "mod.py"
    assert cached_files(via_link) == [tmp_path / "link" / "__pycache__" / f"mod.{TAG}.pyc"]


# --- import cost ------------------------------------------------------------------


def test_import_pulls_in_no_heavy_modules():
    code = "import sys; before = set(sys.modules); import patchkit.targets.bytecode; print(*sorted(set(sys.modules) - before))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    heavy = {"importlib.util", "py_compile", "compileall", "subprocess", "shutil", "tempfile", "hashlib", "logging"}
    assert heavy.isdisjoint(out.split())
