"""Hostile patches, manifests, trees and state; broken sources, checkouts and permissions.

At the command line, on checkouts built in the test.  What tests/commands/test_apply_cycle.py and
tests/patch/test_patchread.py already cover is not repeated (a manifest naming ``..``, an
absolute path or a file outside the target files; a patch name with ``/``; a patch
edited after generation; a truncated patch and a corrupt manifest, all for ``apply``;
a symlinked target and folder for apply/verify/revert).

Every case: exactly the expected exit code, never a traceback, a failure said in one
line that names the file, nothing written in the checkout, and nothing outside it
changed (a sibling folder and the patches folder are compared byte for byte, with
modes and mtimes).  Each case also runs verify, status and revert on the same input.

The commands run in this process (support.crash.pk: the same command line, exit code and
bytes), except where the process itself is what is checked: a source that could crash or
hang the interpreter (deep nesting, values too large to fold) runs in a process of its own
(forked from one that imported patchkit once: support.forked), and the permission cases run as
another user.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.crash import (
    COMM,
    FILES,
    HANG_GUARD,
    PATCH_NAME,
    PYTHONPATH,
    TAG,
    UTILS,
    World,
    clean,
    lines,
    pk,
    snapshot,
    state_dir,
)
from support.forked import Forks
from support.repos import DC, UTILS_NEW, comm, git, make_repo

# What each hostile tree and tampered state dir runs: every command that reads a target.
EVERY_COMMAND = ("apply", "revert", "verify", "status")
# The default fixes by name: SGLang 0.5.16 only warns without torch-symm-mem, and 0.5.99 is newer than patchkit has
# read, so a plain apply and verify leave it out (docs/RELEASES.md); these tests are about the files, not that verdict.
DEFAULTS = ("--fix", "deepgemm-sm12x", "--fix", "fusion-self-enable", "--fix", "torch-symm-mem")


def _outside(base: Path) -> Path:
    """A sibling of the checkout that patchkit must never touch."""
    out = base / "outside"
    (out / "sub").mkdir(parents=True)
    (out / "outside.py").write_bytes(comm())
    (out / "sub" / "keep.txt").write_bytes(b"keep\n")
    return out


def _run(args: list[str]) -> subprocess.CompletedProcess:
    done = pk(*args)
    clean(done, args[0])
    return done


def _one_line(done: subprocess.CompletedProcess, *needles: str) -> str:
    """A failure: empty stdout, one stderr line ``patchkit: ...`` holding every needle."""
    err = done.stderr.decode()
    assert done.stdout == b"", done.stdout.decode()
    assert err.startswith("patchkit: ") and err.endswith("\n") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# -- 1. hostile and broken patches and manifests, through --patches -----------------------------


def _patch_file(folder: Path) -> Path:
    return folder / PATCH_NAME


def _edit_patch(change: Callable[[bytes], bytes], fix_sha: bool = True) -> Callable[[Path], None]:
    """Edit the patch; with ``fix_sha`` its series entry's patch_sha256 follows, so the edit reaches the reader."""

    def edit(folder: Path) -> None:
        data = change(_patch_file(folder).read_bytes())
        _patch_file(folder).write_bytes(data)
        if fix_sha:
            _edit_entry(lambda e: e.update(patch_sha256=hashlib.sha256(data).hexdigest()))(folder)

    return edit


def _edit_manifest(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        doc = json.loads((folder / "manifest.json").read_bytes())
        change(doc)
        (folder / "manifest.json").write_text(json.dumps(doc, indent=2))

    return edit


def _edit_entry(change: Callable[[dict], object]) -> Callable[[Path], None]:
    """Edit the series entry of the shipped patch (the first and only one: torch-symm-mem)."""

    def change_entry(doc: dict) -> None:
        assert [e["patch"] for e in doc["series"]] == [PATCH_NAME]
        change(doc["series"][0])

    return _edit_manifest(change_entry)


def _cut_before(marker: bytes, back: int = 0) -> Callable[[bytes], bytes]:
    """Truncate the patch ``back`` bytes before the last ``marker``."""
    return lambda p: p[: p.rindex(marker) - back]


def _add_section(section: bytes) -> Callable[[bytes], bytes]:
    """Add a file section after the last one (before the ``-- `` signature)."""
    return lambda p: p.replace(b"-- \npatchkit", section + b"-- \npatchkit")


NEW_FILE = (
    f"diff --git a/{DC}/evil.py b/{DC}/evil.py\nnew file mode 100644\nindex 0000000..1111111\n"
    f"--- /dev/null\n+++ b/{DC}/evil.py\n@@ -0,0 +1 @@\n+import os\n"
).encode()
NEW_FILE_NO_MODE = NEW_FILE.replace(b"new file mode 100644\n", b"")
DELETED_FILE = (
    b"diff --git a/python/sglang/version.py b/python/sglang/version.py\ndeleted file mode 100644\n"
    b'index 1111111..0000000\n--- a/python/sglang/version.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-__version__ = "0.5.5"\n'
)
RENAMED_FILE = (
    f"diff --git a/{DC}/torch_symm_mem.py b/{DC}/renamed.py\nsimilarity index 100%\n"
    f"rename from {DC}/torch_symm_mem.py\nrename to {DC}/renamed.py\n"
).encode()


def _retarget(path: str) -> Callable[[bytes], bytes]:
    """Point COMM's section at another path (headers and all)."""
    return lambda p: p.replace(f"a/{COMM}".encode(), f"a/{path}".encode()).replace(f"b/{COMM}".encode(), f"b/{path}".encode())


@dataclass
class Hostile:
    name: str
    edit: Callable[[Path], None]
    code: int  # apply's exit code
    needle: str  # in apply's one line ("{patch}" and "{manifest}" are filled in)
    status: int = 0  # status's and revert's exit codes on the original checkout
    revert: int = 0
    no_generate: bool = False


CORRUPT = "corrupt patch"
HOSTILE_PATCHES = [
    # Broken patch files (the series entry's patch_sha256 updated, so the reader sees them).
    Hostile("empty patch file", _edit_patch(lambda p: b""), 2, "corrupt patch: no file sections"),
    Hostile("binary junk", _edit_patch(lambda p: bytes(range(256)) * 8), 2, "corrupt patch: no file sections"),
    Hostile("NUL bytes in lines", _edit_patch(lambda p: p.replace(b"\n ", b"\n\x00 ")), 2, "{patch}"),
    Hostile("CRLF line endings", _edit_patch(lambda p: p.replace(b"\n", b"\r\n")), 2, CORRUPT),
    Hostile("truncated in a diff --git line", _edit_patch(_cut_before(b"diff --git", -20)), 2, CORRUPT),
    Hostile("truncated after a hunk header", _edit_patch(lambda p: p[: p.index(b"\n", p.rindex(b"\n@@ ") + 1) + 1]), 2, CORRUPT),
    Hostile("truncated mid-hunk", _edit_patch(_cut_before(b"     }\n \n")), 2, CORRUPT),
    Hostile("truncated before the last context line", _edit_patch(_cut_before(b"     def __init__")), 2, CORRUPT),
    Hostile("hunk header counts garbled", _edit_patch(lambda p: p.replace(b"@@ -8,6 +8,7 @@", b"@@ -8,6 +8,9 @@")), 2, CORRUPT),
    Hostile("hunk header unparsable", _edit_patch(lambda p: p.replace(b"@@ -8,6 +8,7 @@", b"@@ -8,six +8,7 @@")), 2, "{patch}"),
    Hostile("context line garbled", _edit_patch(lambda p: p.replace(b"         10: [6, 8],\n", b"         10: [6, 9],\n")), 2, "does not match"),
    Hostile("added value edited, sha updated", _edit_patch(lambda p: p.replace(b"+        12: [6, 8],", b"+        12: [6, 8, 99],")), 2, "does not give the manifest's post-image"),
    Hostile("edited after generation", _edit_patch(lambda p: p.replace(b"12: [6, 8]", b"12: [8, 8]"), fix_sha=False), 2, "edited after generation", status=2, revert=2),
    # Patches that do more than change file contents.
    Hostile("creates a file", _edit_patch(_add_section(NEW_FILE)), 2, "changes more than file contents"),
    Hostile("creates a file from /dev/null", _edit_patch(_add_section(NEW_FILE_NO_MODE)), 2, "creates, deletes or renames"),
    Hostile("deletes a file", _edit_patch(_add_section(DELETED_FILE)), 2, "changes more than file contents"),
    Hostile("renames a file", _edit_patch(_add_section(RENAMED_FILE)), 2, "{patch}"),
    Hostile("section names ../../outside/outside.py", _edit_patch(_retarget("../../outside/outside.py")), 2, "names other files than manifest.json"),
    Hostile("section names an absolute path", _edit_patch(_retarget("/tmp/outside.py")), 2, "names other files than manifest.json"),
    # Manifests whose hashes or fields do not fit the patch.
    Hostile("manifest post_sha256 wrong", _edit_entry(lambda e: e["files"][1].update(post_sha256="0" * 64)), 2, "does not give the manifest's post-image"),
    Hostile("manifest pre_sha256 wrong, --no-generate", _edit_entry(lambda e: e["files"][1].update(pre_sha256="0" * 64)), 3, "differs from the pre-image", no_generate=True),
    Hostile("manifest names one file only", _edit_entry(lambda e: e.update(files=e["files"][:1])), 2, "names other files than manifest.json"),
    Hostile("manifest without files", _edit_entry(lambda e: e.update(files=[])), 2, "corrupt manifest", status=2, revert=2),
    Hostile("manifest path not a string", _edit_entry(lambda e: e["files"][0].update(path=5)), 2, "{manifest}", status=2, revert=2),
    Hostile("manifest mode not a string", _edit_entry(lambda e: e["files"][0].update(mode=5)), 2, "{manifest}: corrupt manifest: a field has the wrong type", status=2, revert=2),
    Hostile("manifest path ..", _edit_entry(lambda e: e["files"][0].update(path="../outside/outside.py")), 3, "refused", status=3, revert=3),
    Hostile("manifest tables not a list of tables", _edit_entry(lambda e: e["files"][1].update(tables="zz")), 2, "corrupt manifest", status=2, revert=2),
    Hostile("manifest series not a list", _edit_manifest(lambda m: m.update(series=m["series"][0])), 2, "{manifest}: corrupt manifest: each patch of the series needs fix, patch", status=2, revert=2),
    Hostile("manifest series empty", _edit_manifest(lambda m: m.update(series=[])), 2, "{manifest}: corrupt manifest: each patch of the series needs fix, patch", status=2, revert=2),
    Hostile("manifest entry without its fix", _edit_entry(lambda e: e.pop("fix")), 2, "{manifest}: corrupt manifest: each patch of the series needs fix, patch", status=2, revert=2),
    Hostile("manifest JSON is a list", lambda f: (f / "manifest.json").write_text("[1, 2]"), 2, "corrupt manifest", status=2, revert=2),
    Hostile("manifest is binary junk", lambda f: (f / "manifest.json").write_bytes(bytes(range(256))), 2, "corrupt manifest", status=2, revert=2),
]


@pytest.mark.parametrize("case", HOSTILE_PATCHES, ids=[c.name for c in HOSTILE_PATCHES])
def test_hostile_or_broken_patch_is_refused_before_any_write(world: World, tmp_path: Path, case: Hostile) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    outside = _outside(tmp_path)
    hostile = tmp_path / "patches"
    shutil.copytree(w.patches, hostile)
    case.edit(hostile / "0.5.5")
    before = {"repo": snapshot(repo), "outside": snapshot(outside), "patches": snapshot(hostile)}
    folder = hostile / "0.5.5"

    done = _run(["apply", str(repo), *DEFAULTS, "--patches", str(hostile), *(["--no-generate"] if case.no_generate else [])])
    assert done.returncode == case.code, (done.returncode, done.stderr.decode())
    _one_line(done, case.needle.format(patch=_patch_file(folder), manifest=folder / "manifest.json"))
    after = {"repo": snapshot(repo), "outside": snapshot(outside), "patches": snapshot(hostile)}
    assert after == before, "apply wrote something"

    verify = _run(["verify", str(repo)])
    status = _run(["status", str(repo), "--patches", str(hostile)])
    revert = _run(["revert", str(repo), "--patches", str(hostile)])
    assert (verify.returncode, verify.stderr) == (1, b"")
    assert status.returncode == case.status, status.stderr.decode()
    assert revert.returncode == case.revert, revert.stderr.decode()
    for done in (status, revert):
        if done.returncode:
            _one_line(done)
    assert {"repo": snapshot(repo), "outside": snapshot(outside), "patches": snapshot(hostile)} == before


def test_manifest_pre_sha256_wrong_falls_back_to_the_checkouts_own_files(world: World, tmp_path: Path) -> None:
    """A manifest whose pre-image hash is wrong is not trusted: apply generates the change
    from the checkout instead, says so, and writes exactly what the shipped patch would."""
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    hostile = tmp_path / "patches"
    shutil.copytree(w.patches, hostile)
    _edit_entry(lambda e: e["files"][1].update(pre_sha256="0" * 64))(hostile / "0.5.5")
    done = _run(["apply", str(repo), *DEFAULTS, "--patches", str(hostile)])
    assert (done.returncode, done.stderr) == (0, b"")
    assert any(line.startswith("note: files differ from the pre-image of ") for line in lines(done))
    assert "applied generated from the checkout's files" in lines(done)
    assert {rel: (repo / rel).read_bytes() for rel in FILES} == w.images["patched"]


# -- 2. hostile trees: symlinks on the way, symlinked targets -------------------------------------


def _link_folder_out(repo: Path, outside: Path) -> str:
    shutil.move(str(repo / DC), str(outside / "dc"))
    (repo / DC).symlink_to(outside / "dc")
    return f"{repo}/{DC}: refused: path goes through a symlinked folder"


def _link_package_out(repo: Path, outside: Path) -> str:
    shutil.move(str(repo / "python/sglang"), str(outside / "sglang"))
    (repo / "python/sglang").symlink_to(outside / "sglang")
    return f"{repo}/python/sglang: refused: path goes through a symlinked folder"


def _link_target_inside(repo: Path, outside: Path) -> str:
    shutil.move(str(repo / COMM), str(repo / "python/copy.py"))
    (repo / COMM).symlink_to("../../../../copy.py")
    assert (repo / COMM).resolve() == repo / "python/copy.py"
    return f"{repo}/{COMM}: refused: target is a symlink"


def _link_target_out(repo: Path, outside: Path) -> str:
    shutil.move(str(repo / COMM), str(outside / "comm.py"))
    (repo / COMM).symlink_to(outside / "comm.py")
    return f"{repo}/{COMM}: refused: target is a symlink"


HOSTILE_TREES = {
    "target folder is a symlink out of the tree": _link_folder_out,
    "python/sglang is a symlink out of the tree": _link_package_out,
    "target is a symlink inside the tree": _link_target_inside,
    "target is a symlink out of the tree": _link_target_out,
}


@pytest.mark.parametrize("make", HOSTILE_TREES.values(), ids=list(HOSTILE_TREES))
def test_symlinks_are_refused_by_every_command(world: World, tmp_path: Path, make) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    outside = _outside(tmp_path)
    message = make(repo, outside)
    before = {"repo": snapshot(repo), "outside": snapshot(outside)}
    results = [_run([command, str(repo)] + (["--patches", str(w.patches)] if command != "verify" else []))
               for command in EVERY_COMMAND]
    for done in results:
        assert done.returncode == 3, done.stderr.decode()
        assert _one_line(done) == f"patchkit: {message}\n"
    assert {"repo": snapshot(repo), "outside": snapshot(outside)} == before


# -- 3. a tampered state dir: journal and state.json --------------------------------------------

SHA = "ab" * 32


def _journal(files) -> dict:
    return {"format": 1, "op": "apply", "files": files, "applied": None}


def _state(files) -> dict:
    return {"format": 1, "version": "0.5.5", "source": "x", "patch_id": "x", "from_cc": 10, "to_cc": 12,
            "patchkit": "0.1.0", "files": files}


@dataclass
class Tampered:
    name: str
    file: str  # journal.json or state.json
    doc: object
    codes: tuple[int, int, int, int]  # of EVERY_COMMAND: apply, revert, verify, status
    needle: str


TAMPERED_STATE = [
    Tampered("journal names ..", "journal.json", _journal([{"path": "../outside/outside.py", "before": SHA, "after": SHA}]),
             (3, 3, 1, 0), "refused"),
    Tampered("journal names an absolute path", "journal.json", _journal([{"path": "{outside}/outside.py", "before": SHA, "after": SHA}]),
             (3, 3, 1, 0), "refused: absolute path"),
    Tampered("journal names a symlinked target", "journal.json", _journal([{"path": f"{DC}/link.py", "before": SHA, "after": SHA}]),
             (3, 3, 1, 0), "refused: target is a symlink"),
    Tampered("journal files is not a list", "journal.json", _journal("x"), (2, 2, 1, 0), "journal.json"),
    Tampered("journal entry lacks its hashes", "journal.json", _journal([{"path": UTILS}]), (2, 2, 1, 0), "journal.json"),
    # A state file naming anything but a target file is corrupt state (exit 2), before any path is used.
    Tampered("state names ..", "state.json", _state([{"path": "../outside/outside.py", "pre_sha256": SHA, "post_sha256": SHA}]),
             (2, 2, 2, 2), "corrupt patchkit state"),
]


@pytest.mark.parametrize("case", TAMPERED_STATE, ids=[c.name for c in TAMPERED_STATE])
def test_tampered_state_dir(world: World, tmp_path: Path, case: Tampered) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    outside = _outside(tmp_path)
    (repo / DC / "link.py").symlink_to(outside / "sub" / "keep.txt")  # names no table: not a candidate
    store = state_dir(repo)
    store.mkdir()
    (store / case.file).write_text(json.dumps(case.doc).replace("{outside}", str(outside)))
    before = {"repo": snapshot(repo), "outside": snapshot(outside)}
    codes = []
    for command in EVERY_COMMAND:
        args = [command, str(repo)] + (["--patches", str(w.patches)] if command != "verify" else [])
        done = _run(args)
        codes.append(done.returncode)
        if done.returncode in (2, 3):
            _one_line(done, case.needle)
    assert tuple(codes) == case.codes
    after = {"repo": snapshot(repo), "outside": snapshot(outside)}
    after["repo"].pop(str((store / "lock").relative_to(repo)), None)  # a lock file is fine; the rest must be as it was
    assert after == before


# -- 4. broken sources -------------------------------------------------------------------------

VERSION_99 = {"python/sglang/version.py": b'__version__ = "0.5.99"\n'}  # no shipped patch: generated
LATIN1 = b"# -*- coding: latin-1 -*-\n# r\xe9glages du communicateur (caf\xe9)\n"
DUPLICATE = UTILS_NEW.replace(b"    10: {", b"    10: {\n        2: 1,\n    },\n    10: {")
SYNTAX = comm() + b"\n\ndef broken(:\n    pass\n"


@dataclass
class Source:
    name: str
    files: dict
    # verify before apply, apply, verify after, status, revert; verify reports a file it cannot
    # read as one of its problems (exit 1), apply refuses it (exit 3)
    codes: tuple[int, int, int, int, int]
    needle: str = ""  # in each failure's one line
    isolated: bool = False  # could crash or hang the interpreter: a process of its own, with a hang guard


BROKEN_SOURCES = [
    Source("latin-1 with a coding cookie", {UTILS: UTILS_NEW, COMM: LATIN1 + comm()}, (1, 0, 0, 0, 0)),
    Source("latin-1 without a coding cookie", {UTILS: UTILS_NEW, COMM: b"# caf\xe9\n" + comm()}, (1, 3, 1, 0, 0), f"{COMM}: cannot decode"),
    Source("coding cookie of an unknown codec", {UTILS: UTILS_NEW, COMM: b"# -*- coding: no-such-codec -*-\n" + comm()}, (1, 3, 1, 0, 0), f"{COMM}: cannot decode"),
    Source("binary junk naming a table", {UTILS: UTILS_NEW, COMM: b"\x00\xff\xfe_WORLD_SIZES_MULTIMEM = {10: [1]}\x00\x89PNG"}, (1, 3, 1, 0, 0), COMM),
    Source("CRLF line endings", {UTILS: UTILS_NEW.replace(b"\n", b"\r\n"), COMM: comm().replace(b"\n", b"\r\n")}, (1, 0, 0, 0, 0)),
    Source("a table with a duplicate key", {UTILS: DUPLICATE, COMM: comm()}, (1, 0, 0, 0, 0)),
    Source("a syntax error elsewhere in the file", {UTILS: UTILS_NEW, COMM: SYNTAX}, (1, 3, 1, 0, 0), f"{COMM}: cannot parse: line 20"),
    Source("brackets nested 500 deep", {UTILS: UTILS_NEW, COMM: comm(sm100="[" * 500 + "]" * 500)}, (1, 3, 1, 0, 0), COMM, isolated=True),
    Source("brackets nested 3000 deep", {UTILS: UTILS_NEW, COMM: comm(sm100="[" * 3000 + "]" * 3000)}, (1, 3, 1, 0, 0), COMM, isolated=True),
    Source("a value too large to fold", {UTILS: UTILS_NEW, COMM: comm(sm100='"x" * 10**18')}, (1, 0, 0, 0, 0), f"{COMM}: table _WORLD_SIZES_MULTIMEM", isolated=True),
    Source("a value that takes forever to fold", {UTILS: UTILS_NEW, COMM: comm(sm100="[2 ** 2 ** 40]")}, (1, 0, 0, 0, 0), f"{COMM}: table _WORLD_SIZES_MULTIMEM", isolated=True),
    Source("an empty candidate file", {UTILS: UTILS_NEW, COMM: b""}, (1, 0, 0, 0, 0)),
]


@pytest.fixture(scope="module")
def forks():
    """The runner of the commands that run apart: each a process of its own, forked from it."""
    from support.crash import env

    runner = Forks(env(), HANG_GUARD, ("verify", "apply", "status", "revert"))
    yield runner
    runner.close()


def _run_isolated(forks: Forks, args: list[str]) -> subprocess.CompletedProcess:
    """``python -m patchkit`` in a process of its own: a crash is a signal, a hang is killed at the hang guard."""
    done = forks.run(args)
    if done.returncode is None:
        raise AssertionError(f"patchkit {' '.join(args[:1])} still running after {HANG_GUARD:g}s")
    assert done.returncode >= 0, f"patchkit {args[0]} died of signal {-done.returncode}"
    clean(done, args[0])
    return done


@pytest.mark.parametrize("case", BROKEN_SOURCES, ids=[c.name for c in BROKEN_SOURCES])
def test_broken_sources(tmp_path: Path, case: Source, forks: Forks) -> None:
    repo = tmp_path / "co"  # a plain folder; SGLang 0.5.99 has no shipped patch
    for rel, data in {**VERSION_99, **case.files}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    outside = _outside(tmp_path)
    before = {"repo": snapshot(repo), "outside": snapshot(outside)}
    codes, runs = [], {}
    for step in ("verify", "apply", "verify after", "status", "revert"):
        command = step.split()[0]
        args = [command, str(repo), *(DEFAULTS if command in ("apply", "verify") else ())]
        done = _run_isolated(forks, args) if case.isolated else _run(args)
        runs[step] = done
        codes.append(done.returncode)
        if done.returncode > 1:
            _one_line(done, case.needle)
        if step == "apply" and done.returncode == 0:
            for rel, data in case.files.items():  # the rewriter only adds lines, and keeps every byte
                now = (repo / rel).read_bytes()
                assert _only_added(data, now), rel
    assert tuple(codes) == case.codes, [(s, d.returncode, d.stderr[-300:]) for s, d in runs.items()]
    assert snapshot(outside) == before["outside"]
    if codes[1] != 0:  # refused: not a byte, mode or mtime changed
        assert snapshot(repo) == before["repo"]
    for rel, data in case.files.items():  # after revert (or a refused apply): the exact bytes
        assert (repo / rel).read_bytes() == data
    if case.name == "a table with a duplicate key":
        assert _duplicate_semantics(repo)


def _only_added(old: bytes, new: bytes) -> bool:
    """``new`` is ``old`` with whole lines inserted (so every old byte, CR and latin-1 included, is kept)."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    it = iter(new_lines)
    return all(any(line == candidate for candidate in it) for line in old_lines) and len(new_lines) > len(old_lines) or old == new


def _duplicate_semantics(repo: Path) -> bool:
    """Apply again and check key 12 = the key 10 Python would see (the last one), evaluated by Python here."""
    done = _run(["apply", str(repo), *DEFAULTS])
    assert done.returncode == 0
    scope: dict = {}
    exec(compile((repo / UTILS).read_bytes(), "utils", "exec"), scope)  # our own fixture, not patchkit's input
    table = scope["TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"]
    ok = table[12] == table[10]
    assert _run(["revert", str(repo)]).returncode == 0
    return ok


def test_crlf_release_through_a_shipped_patch(tmp_path: Path) -> None:
    """A release whose files have CRLF endings: generate's patch carries the CRs, apply
    takes it with --no-generate, verify passes, revert gives back the exact bytes."""
    files = {
        "python/sglang/version.py": b'__version__ = "0.5.5"\r\n',
        UTILS: UTILS_NEW.replace(b"\n", b"\r\n"),
        COMM: comm().replace(b"\n", b"\r\n"),
    }
    origin = make_repo(tmp_path / "origin", {TAG: files})
    patches = tmp_path / "patches"
    assert _run(["generate", "--repo", str(origin), "--out", str(patches)]).returncode == 0
    assert b"\n+        12: [6, 8],\r\n" in (patches / "0.5.5" / PATCH_NAME).read_bytes()
    repo = tmp_path / "co"
    subprocess.run(["git", "clone", "-q", str(origin), str(repo)], check=True, capture_output=True)
    git(repo, "checkout", "-q", TAG)
    done = _run(["apply", str(repo), *DEFAULTS, "--patches", str(patches), "--no-generate"])
    assert (done.returncode, done.stderr) == (0, b"")
    assert lines(done)[1].startswith("applied shipped patch ")
    for rel in (UTILS, COMM):
        data = (repo / rel).read_bytes()
        assert data.count(b"\n") == data.count(b"\r\n") and _only_added(files[rel], data)
    assert _run(["verify", str(repo)]).returncode == 0
    assert _run(["revert", str(repo), "--patches", str(patches)]).returncode == 0
    assert {rel: (repo / rel).read_bytes() for rel in files} == files
    assert git(repo, "status", "--porcelain") == ""


# -- 5. broken checkouts -------------------------------------------------------------------------


def _plain(w: World, dest: Path) -> Path:
    return w.checkout(dest, "original", "plain")


def _no_tags(w: World, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--no-tags", str(w.origin), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", "-b", "work", git(w.origin, "rev-parse", f"{TAG}^{{commit}}").strip())
    assert git(dest, "tag") == ""
    git(dest, "config", "user.name", "Jane Dev")
    git(dest, "config", "user.email", "jane@example.invalid")
    return dest


def _unborn(w: World, dest: Path) -> Path:
    repo = _plain(w, dest)
    git(repo, "init", "-q")
    return repo


def _no_version(w: World, dest: Path) -> Path:
    repo = _plain(w, dest)
    (repo / "python/sglang/version.py").unlink()
    return repo


def _dangling_git_file(w: World, dest: Path) -> Path:
    repo = _plain(w, dest)
    (repo / ".git").write_text("gitdir: /nonexistent/gitdir\n")
    return repo


def _no_pycache(w: World, dest: Path) -> Path:
    repo = w.checkout(dest, "original")
    shutil.rmtree(repo / DC / "__pycache__")
    return repo


def _pycache_is_a_file(w: World, dest: Path) -> Path:
    repo = _no_pycache(w, dest)
    (repo / DC / "__pycache__").write_bytes(b"not a folder\n")
    return repo


# name -> (make, exit codes of apply, verify, status, revert, upstream; version line; upstream's needle)
BROKEN_CHECKOUTS = {
    "a plain folder, no git": (_plain, (0, 0, 0, 0, 2), "SGLang 0.5.5, declared in python/sglang/version.py", "not a git checkout"),
    "a git checkout with no tags": (_no_tags, (0, 0, 0, 0, 0), "SGLang 0.5.5, declared in python/sglang/version.py", ""),
    "a git checkout with no commit": (_unborn, (0, 0, 0, 0, 2), "SGLang 0.5.5, declared in python/sglang/version.py", "no commit at HEAD"),
    "no version anywhere": (_no_version, (0, 0, 0, 0, 2), "SGLang (version unknown)", "not a git checkout"),
    "a .git file pointing nowhere": (_dangling_git_file, (0, 0, 0, 0, 2), "SGLang 0.5.5, declared in python/sglang/version.py", "not a git checkout"),
    "no __pycache__ folder": (_no_pycache, (0, 0, 0, 0, 0), "SGLang 0.5.5, tag v0.5.5 at HEAD", ""),
    "__pycache__ is a file": (_pycache_is_a_file, (0, 0, 0, 0, 0), "SGLang 0.5.5, tag v0.5.5 at HEAD", ""),
}


@pytest.mark.parametrize("name", BROKEN_CHECKOUTS)
def test_broken_checkouts(world: World, tmp_path: Path, name: str) -> None:
    w = world
    make, codes, version, needle = BROKEN_CHECKOUTS[name]
    repo = make(w, tmp_path / "co").resolve()
    outside = _outside(tmp_path)
    before_outside = snapshot(outside)
    original = {rel: (repo / rel).read_bytes() for rel in FILES}
    got = []
    for command in ("apply", "verify", "status", "revert", "upstream"):
        args = [command, str(repo), *(DEFAULTS if command in ("apply", "verify") else ())]
        args += ["--patches", str(w.patches)] if command != "verify" else []
        args += ["--out", str(tmp_path / "up")] if command == "upstream" else []
        done = _run(args)
        got.append(done.returncode)
        if done.returncode:
            _one_line(done, needle)
        elif command in ("apply", "verify", "revert"):
            assert lines(done)[0].startswith(f"{repo}: {version}"), lines(done)[0]
        if command == "apply" and done.returncode == 0:
            assert lines(done)[-1].startswith("dropped ")
    assert tuple(got) == codes
    assert {rel: (repo / rel).read_bytes() for rel in FILES} == original  # revert gave back the exact bytes
    assert not state_dir(repo).exists() or not (state_dir(repo) / "state.json").exists()
    assert snapshot(outside) == before_outside


# -- 6. permissions: read-only files and folders, run as an unprivileged user -------------------

NOBODY = 65534
CAN_DROP = os.geteuid() == 0 and shutil.which("setpriv") is not None


_PATHS: dict[str, str] = {}  # user -> PYTHONPATH that user imports patchkit from


@pytest.fixture
def shared(world: World, nobody_path: str) -> Path:
    """A folder every user can read, holding a copy of the patches; removed afterwards."""
    _PATHS["nobody"] = nobody_path
    top = Path(tempfile.mkdtemp(prefix="patchkit-perm-"))
    os.chmod(top, 0o755)
    shutil.copytree(world.patches, top / "patches")
    yield top
    for folder, dirs, _ in os.walk(top):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o755)
    shutil.rmtree(top)


SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture(scope="module")
def nobody_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PYTHONPATH that nobody can import patchkit from.

    PYTHONPATH as it is when nobody reaches it; for a clone in a private folder (mode 700,
    as `mktemp -d` makes and /root is) a world-readable copy of the source tree and of the
    installed files of patchkit's dependencies, in a folder that nobody reaches."""
    import patchkit
    from support.crash import ROOT, env

    probe = [*SETPRIV, sys.executable, "-c", "import click, unidiff, patchkit.cli; print(patchkit.__file__)"]
    seen = subprocess.run(probe, env=env(PYTHONPATH=PYTHONPATH, PYTHONPYCACHEPREFIX=None), capture_output=True, text=True).stdout.strip() if CAN_DROP else ""
    if not CAN_DROP or seen == patchkit.__file__:  # nobody imports the very patchkit under test
        yield PYTHONPATH
        return
    import importlib.metadata as md
    import re as _re

    top = Path(tempfile.mkdtemp(prefix="patchkit-nobody-"))
    for name in ("patchkit", "patches", "templates"):
        shutil.copytree(ROOT / name, top / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
    todo, seen = ["patchkit"], set()
    while todo:
        try:
            dist = md.distribution(todo.pop())
        except md.PackageNotFoundError:  # required only under a marker that is false here
            continue
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        for f in dist.files or ():
            if ".." not in f.parts and f.suffix != ".pyc" and Path(f.locate()).is_file():
                (top / "site" / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f.locate(), top / "site" / f)
        todo += [_re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or () if "extra ==" not in r]
    for folder, _dirs, files in os.walk(top):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    yield os.pathsep.join([str(top / "src"), str(top / "site")])
    shutil.rmtree(top)


def _as(user: str, *args: str) -> subprocess.CompletedProcess:
    """patchkit as root or as nobody (setpriv), a separate process."""
    from support.crash import env

    prefix = SETPRIV if user == "nobody" else []
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "patchkit", *args],
        env=env(HOME="/nonexistent", PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=None, PYTHONPATH=_PATHS.get(user, PYTHONPATH)),
        capture_output=True,
    )
    clean(done, args[0])
    return done


def _give(path: Path, user: str) -> None:
    if user == "nobody":
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(path)], check=True)


ALL_USERS = ["root", "nobody"]  # where root can drop to nobody (setpriv); else the user running the suite
USERS = ALL_USERS if CAN_DROP else ["self"]
needs_nobody = pytest.mark.skipif(not CAN_DROP and os.geteuid() == 0, reason="root ignores permissions; needs setpriv")


def _perm_checkout(w: World, shared: Path, user: str) -> Path:
    repo = shutil.copytree(w.templates[("plain", "original")], shared / "co", symlinks=True)
    _give(repo, user)
    return repo


@pytest.mark.parametrize("user", USERS)
def test_read_only_target_file_is_replaced_and_keeps_its_mode(world: World, shared: Path, user: str) -> None:
    """A 0444 file in a writable folder: patched through a new file and a rename, as git
    and patch do; the mode (read-only) is kept on apply and on revert."""
    w = world
    repo = _perm_checkout(w, shared, user)
    os.chmod(repo / COMM, 0o444)
    done = _as(user, "apply", str(repo), *DEFAULTS, "--patches", str(shared / "patches"))
    assert (done.returncode, done.stderr) == (0, b"")
    assert (repo / COMM).read_bytes() == w.images["patched"][COMM]
    assert stat.S_IMODE(os.stat(repo / COMM).st_mode) == 0o444
    assert _as(user, "verify", str(repo)).returncode == 0
    done = _as(user, "revert", str(repo), "--patches", str(shared / "patches"))
    assert (done.returncode, done.stderr) == (0, b"")
    assert {rel: (repo / rel).read_bytes() for rel in FILES} == w.images["original"]
    assert stat.S_IMODE(os.stat(repo / COMM).st_mode) == 0o444


# (what, how, the line's needle, the exit code): a place that cannot be written is a refusal
# (3); a file that cannot be read is input patchkit cannot use (2, README), the file named.
UNWRITABLE = [
    ("read-only target folder", lambda repo: os.chmod(repo / DC, 0o555), f"{DC}: refused: folder is not writable", 3),
    ("read-only checkout root (no room for .patchkit)", lambda repo: os.chmod(repo, 0o555), ".patchkit", 3),
    ("unreadable target file", lambda repo: os.chmod(repo / COMM, 0o000), f"{COMM}: cannot read it (Permission denied)", 2),
]


@needs_nobody
@pytest.mark.parametrize("what,make,needle,code", UNWRITABLE, ids=[u[0] for u in UNWRITABLE])
def test_unwritable_places_are_refused_with_nothing_written(world: World, shared: Path, what, make, needle, code) -> None:
    w = world
    user = "nobody" if CAN_DROP else "self"
    repo = _perm_checkout(w, shared, user)
    make(repo)
    before = snapshot(repo) if what != "unreadable target file" else None
    done = _as(user, "apply", str(repo), *DEFAULTS, "--patches", str(shared / "patches"))
    assert done.returncode == code, done.stderr.decode()
    _one_line(done, needle)
    after = snapshot(repo) if before is not None else None  # as root: every mode is readable
    os.chmod(repo, 0o755)
    os.chmod(repo / DC, 0o755)
    if before is not None:
        assert after == before
    else:
        os.chmod(repo / COMM, 0o644)
        assert {rel: (repo / rel).read_bytes() for rel in FILES} == w.images["original"]
    assert not (repo / ".patchkit").exists()


@needs_nobody
def test_nothing_to_do_on_a_read_only_target_is_exit_0(world: World, shared: Path) -> None:
    """A read-only image: revert with nothing applied, and apply on an applied target, have
    nothing to write, so they take no lock and answer 0; nothing is created."""
    w = world
    user = "nobody" if CAN_DROP else "self"
    repo = _perm_checkout(w, shared, user)
    for folder in (repo, repo / DC):
        os.chmod(folder, 0o555)
    done = _as(user, "revert", str(repo), "--patches", str(shared / "patches"))
    assert done.returncode == 0 and not done.stderr, done.stderr.decode()
    assert done.stdout.decode().splitlines()[-1] == "nothing to revert: nothing written"
    assert not (repo / ".patchkit").exists()
    for folder in (repo, repo / DC):
        os.chmod(folder, 0o755)
    assert _as(user, "apply", str(repo), *DEFAULTS, "--patches", str(shared / "patches")).returncode == 0
    state = snapshot(repo)
    for folder in (repo, repo / DC, repo / ".patchkit", repo / ".patchkit" / "objects"):
        os.chmod(folder, 0o555)
    done = _as(user, "apply", str(repo), *DEFAULTS, "--patches", str(shared / "patches"))
    assert done.returncode == 0 and not done.stderr, done.stderr.decode()
    assert done.stdout.decode().splitlines()[-1].startswith("already applied (")
    assert _as(user, "verify", str(repo)).returncode == 0
    for folder in (repo, repo / DC, repo / ".patchkit", repo / ".patchkit" / "objects"):
        os.chmod(folder, 0o755)
    assert snapshot(repo) == state


@needs_nobody
def test_read_only_pycache_never_leaves_a_transaction_stuck(world: World, shared: Path) -> None:
    """A ``__pycache__`` the user cannot write, holding the modules' bytecode: apply must
    either refuse before the first write (README: every file is checked before the first
    write, folders that cannot be written included) or finish the transaction and leave
    the stale bytecode to verify.  It must not write the files, exit 3 ("refused, nothing
    changed") and leave a journal that every later apply and revert trips over."""
    w = world
    user = "nobody" if CAN_DROP else "self"
    repo = _perm_checkout(w, shared, user)
    assert list((repo / DC / "__pycache__").glob("*.pyc"))
    os.chmod(repo / DC / "__pycache__", 0o555)
    done = _as(user, "apply", str(repo), *DEFAULTS, "--patches", str(shared / "patches"))
    now = {rel: (repo / rel).read_bytes() for rel in FILES}
    journal = (repo / ".patchkit" / "journal.json").exists()
    assert done.returncode in (0, 3), done.stderr.decode()
    if done.returncode == 3:
        _one_line(done)
        assert now == w.images["original"] and not journal, (
            f"apply exited 3 ({done.stderr.decode().strip()!r}) but wrote the files "
            f"({'patched' if now == w.images['patched'] else 'partly'}) and left journal.json pending: {journal}"
        )
    else:
        assert now == w.images["patched"] and not journal
        assert _as(user, "verify", str(repo)).returncode == 1  # the stale bytecode it could not drop
    again = _as(user, "revert", str(repo), "--patches", str(shared / "patches"))
    assert again.returncode in (0, 3) and not (repo / ".patchkit" / "journal.json").exists()


@needs_nobody
def test_revert_on_a_read_only_target_refuses_as_apply_does(world: World, shared: Path) -> None:
    """After an apply, the target and its state dir made read-only (an image mounted read-only):
    revert cannot take the lock, and says so as apply does when it cannot make the state dir:
    "refused … nothing changed", exit 3, one line; nothing changes."""
    w = world
    user = "nobody" if CAN_DROP else "self"
    repo = _perm_checkout(w, shared, user)
    assert _as(user, "apply", str(repo), "--patches", str(shared / "patches")).returncode == 0
    folders = (repo, repo / DC, repo / ".patchkit", repo / ".patchkit" / "objects")
    for folder in folders:
        os.chmod(folder, 0o555)
    state = snapshot(repo)
    done = _as(user, "revert", str(repo), "--patches", str(shared / "patches"))
    assert done.returncode == 3, done.stderr.decode()
    _one_line(done, f"{repo / '.patchkit' / 'lock'}: refused: cannot take patchkit's lock (Permission denied); nothing changed")
    assert snapshot(repo) == state
    for folder in folders:
        os.chmod(folder, 0o755)
