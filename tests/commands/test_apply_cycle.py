"""apply / verify / revert / status end to end, on git checkouts built in the test."""

from __future__ import annotations

import compileall
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.fixes.registry import SGLANG
from patchkit.rewrite.evaluate import tables
from support.cli import invoke, run_cli
from support.repos import DC, git, make_repo, symm_effect

UTILS = f"{DC}/all_reduce_utils.py"
COMM = f"{DC}/torch_symm_mem.py"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("origin") / "sglang")


@pytest.fixture(scope="module")
def patches(origin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("patches")
    done = invoke("generate", "--repo", str(origin), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def clone(origin: Path, dest: Path, tag: str = "v0.5.5") -> Path:
    subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", tag)
    return dest


def original(repo: Path, path: str, tag: str = "v0.5.5") -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{tag}:{path}"], check=True, capture_output=True).stdout


def pycs(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.pyc")}


def out(done: subprocess.CompletedProcess) -> list[str]:
    return done.stdout.decode().splitlines()


def keys_equal(repo: Path, to_cc: int = 12, from_cc: int = 10) -> bool:
    found = {}
    for rel in (UTILS, COMM):
        found.update(tables((repo / rel).read_bytes(), SGLANG.tables, rel))
    return len(found) == 2 and all(to_cc in t and t[to_cc] == t[from_cc] for t in found.values())


def test_full_cycle_with_a_shipped_patch(origin: Path, patches: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    assert compileall.compile_dir(repo / "python", quiet=1)
    before = pycs(repo)
    assert f"{DC}/__pycache__/torch_symm_mem.cpython-311.pyc".replace("311", "") or True
    patched_modules = {p for p in before if "/device_communicators/__pycache__/" in p and ("all_reduce_utils." in p or "torch_symm_mem." in p)}
    assert len(patched_modules) == 2

    done = run_cli("apply", str(repo), "--patches", str(patches), "--no-generate")
    assert done.returncode == 0, done.stderr
    name = f"{patches}/0.5.5/0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
    assert out(done) == [
        f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD",
        f"applied shipped patch {name}",
        f"  patched {UTILS} (+4 lines)",
        f"  patched {COMM} (+1 line)",
        "  SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): key 12 = key 10".replace("SYMM", "TORCH_SYMM"),
        "  _WORLD_SIZES_MULTIMEM (class TorchSymmMemCommunicator): key 12 = key 10",
        symm_effect("SGLang", "0.5.5"),
        "dropped 2 cached bytecode files",
    ]
    # Exactly what `git apply` of the same patch gives; only the patched modules' bytecode is gone.
    reference = clone(origin, tmp_path / "ref")
    git(reference, "apply", name)
    for rel in (UTILS, COMM):
        assert (repo / rel).read_bytes() == (reference / rel).read_bytes()
    assert pycs(repo) == before - patched_modules

    done = run_cli("verify", str(repo))
    assert done.returncode == 0
    assert out(done)[-1] == "verify: ok (key 12 = key 10 in every table)"

    stamp = {rel: os.stat(repo / rel).st_mtime_ns for rel in (UTILS, COMM)}
    done = run_cli("apply", str(repo), "--patches", str(patches))
    assert done.returncode == 0
    assert out(done)[-1] == f"already applied (shipped patch {name}): nothing written"
    assert {rel: os.stat(repo / rel).st_mtime_ns for rel in (UTILS, COMM)} == stamp

    done = run_cli("revert", str(repo), "--patches", str(patches))
    assert done.returncode == 0
    assert out(done)[1] == f"reverted shipped patch {name}"
    for rel in (UTILS, COMM):
        assert (repo / rel).read_bytes() == original(origin, rel)
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""

    done = run_cli("verify", str(repo))
    assert done.returncode == 1
    assert f"{UTILS}: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has no key 12 (the patch is not applied)" in out(done)
    done = run_cli("revert", str(repo))
    assert (done.returncode, out(done)[-1]) == (0, "nothing to revert: nothing written")
    assert not (repo / ".git/patchkit/lock").exists()


def test_local_edit_is_honoured_or_refused(origin: Path, patches: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    edited = (repo / COMM).read_bytes().replace(b"10: [6, 8]", b"10: [2, 4, 6, 8]")
    (repo / COMM).write_bytes(edited)
    utils = (repo / UTILS).read_bytes()

    done = invoke("apply", str(repo), "--patches", str(patches), "--no-generate")
    assert done.returncode == 3
    assert done.stderr.decode() == (
        f"patchkit: {COMM}: differs from the pre-image of {patches}/0.5.5/"
        "0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch (a local edit?); "
        "--no-generate refuses to generate a patch\n"
    )
    assert (repo / COMM).read_bytes() == edited and (repo / UTILS).read_bytes() == utils

    done = invoke("apply", str(repo), "--patches", str(patches))
    assert done.returncode == 0, done.stderr
    assert out(done)[1].startswith(f"note: files differ from the pre-image of {patches}/0.5.5/")
    assert out(done)[2] == "applied generated from the checkout's files"
    assert b"        10: [2, 4, 6, 8],\n        12: [2, 4, 6, 8],\n" in (repo / COMM).read_bytes()
    assert keys_equal(repo)
    assert invoke("verify", str(repo)).returncode == 0
    # revert gives back the edited file, as apply found it.
    assert invoke("revert", str(repo)).returncode == 0
    assert (repo / COMM).read_bytes() == edited


def test_broken_table_is_refused_with_nothing_written(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    broken = (repo / COMM).read_bytes().replace(b"10: [6, 8]", b"11: [6, 8]")
    (repo / COMM).write_bytes(broken)
    utils = (repo / UTILS).read_bytes()
    done = invoke("apply", str(repo))
    assert done.returncode == 3
    assert done.stderr.decode() == (
        f"patchkit: {COMM}: table _WORLD_SIZES_MULTIMEM (class TorchSymmMemCommunicator) "
        "has no key 10 to copy from (keys: 9, 11)\n"
    )
    assert (repo / COMM).read_bytes() == broken and (repo / UTILS).read_bytes() == utils
    assert not (repo / ".git/patchkit/journal.json").exists()


def test_commit_past_the_last_release_is_patched_on_the_fly(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co", "v0.5.16")
    (repo / COMM).write_bytes((repo / COMM).read_bytes() + b"\n\nEXTRA = 1\n")
    git(repo, "commit", "-qam", "past the release")
    # Named: SGLang 0.5.16 only warns without it, and no SM12x GPU has multicast (a plain apply leaves it out).
    done = invoke("apply", str(repo), "--fix", "torch-symm-mem")
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == f"{repo}: SGLang 0.5.16, declared in python/sglang/version.py"
    assert "applied generated from the checkout's files" in out(done)
    assert keys_equal(repo)
    assert invoke("verify", str(repo)).returncode == 0


def test_version_option_and_no_patch_for_version(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    # Named: 9.9.9 is newer than patchkit has read, so a plain apply leaves the fix out (docs/RELEASES.md).
    done = invoke("apply", str(repo), "--version", "9.9.9", "--no-generate", "--fix", "torch-symm-mem")
    assert done.returncode == 3
    assert done.stderr.decode() == "patchkit: no shipped patch for SGLang 9.9.9; --no-generate refuses to generate one\n"
    done = invoke("apply", str(repo), "--version", "9.9.9", "--dry-run", "--fix", "torch-symm-mem")
    assert done.returncode == 0
    assert out(done)[:3] == [
        f"{repo}: SGLang 9.9.9, given with --version",
        "note: no shipped patch for SGLang 9.9.9",
        "would apply generated from the checkout's files",
    ]
    assert "+        12: [6, 8]," in out(done)
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git/patchkit").exists()


def test_release_without_tables(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co", "v0.5.2")
    (repo / DC).mkdir(parents=True)
    for command in ("apply", "verify", "revert"):
        done = invoke(command, str(repo))
        assert done.returncode == 0, (command, done.stderr)
    assert out(invoke("apply", str(repo)))[-1] == "nothing to patch (generated from the checkout's files): nothing written"
    assert out(invoke("verify", str(repo)))[-1] == ("verify: ok, nothing to patch: deepgemm-sm12x, fusion-self-enable, torch-symm-mem "
                                                    "change nothing in SGLang 0.5.2; not checked: allreduce-fusion (--all-fixes)")
    assert out(invoke("verify", str(repo), "--fix", "torch-symm-mem"))[-1] == (
        "verify: ok, nothing to patch: torch-symm-mem changes nothing in SGLang 0.5.2; "
        "not checked: deepgemm-sm12x, fusion-self-enable, allreduce-fusion (--all-fixes)")


def test_stale_bytecode_is_reported_and_apply_drops_it(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    compileall.compile_dir(repo / "python", quiet=1)
    cache = repo / DC / "__pycache__"
    stale = {p.name: p.read_bytes() for p in cache.glob("torch_symm_mem.*.pyc")}
    assert invoke("apply", str(repo)).returncode == 0
    assert not list(cache.glob("torch_symm_mem.*.pyc"))
    for name, data in stale.items():  # an old pyc comes back (say, from an image layer)
        (cache / name).write_bytes(data)
    done = invoke("verify", str(repo))
    assert done.returncode == 1
    (line,) = [x for x in out(done) if "stale bytecode" in x]
    assert line.startswith(f"{cache}/torch_symm_mem.") and "(source " in line
    assert line.endswith("; `patchkit apply` drops it")
    assert invoke("status", str(repo)).stdout.decode().count("1 stale") == 1
    done = invoke("apply", str(repo))
    assert done.returncode == 0
    assert out(done)[-2:] == [
        "already applied (generated from the checkout's files): nothing written",
        f"dropped {len(stale)} stale bytecode file" + ("s" if len(stale) != 1 else ""),
    ]
    assert not list(cache.glob("torch_symm_mem.*.pyc"))
    assert invoke("verify", str(repo)).returncode == 0


def test_other_cc_pair_replaces_the_applied_patch(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    assert invoke("apply", str(repo), "--from-cc", "9", "--to-cc", "11").returncode == 0
    assert keys_equal(repo, 11, 9)
    done = invoke("apply", str(repo))
    assert done.returncode == 0
    assert any(line.startswith("note: replacing the applied patch (9 -> 11") for line in out(done))
    assert keys_equal(repo) and b"11:" not in (repo / COMM).read_bytes()
    assert invoke("revert", str(repo)).returncode == 0
    assert (repo / COMM).read_bytes() == original(origin, COMM)


def test_revert_refuses_edited_file_unless_forced(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    assert invoke("apply", str(repo)).returncode == 0
    edited = (repo / COMM).read_bytes() + b"# mine\n"
    (repo / COMM).write_bytes(edited)
    done = invoke("revert", str(repo))
    assert done.returncode == 3
    assert done.stderr.decode() == f"patchkit: {COMM}: was edited after apply; `patchkit revert --force` restores the original anyway\n"
    assert (repo / COMM).read_bytes() == edited
    done = invoke("revert", str(repo), "--force")
    assert done.returncode == 0
    kept = [line for line in out(done) if line.startswith("kept your edited copy in ")]
    assert len(kept) == 1
    assert Path(kept[0].split(" in ", 1)[1]).read_bytes() == edited
    assert (repo / COMM).read_bytes() == original(origin, COMM)


def test_revert_from_content_when_state_is_lost(origin: Path, patches: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    assert invoke("apply", str(repo), "--patches", str(patches)).returncode == 0
    shutil.rmtree(repo / ".git/patchkit")
    status = invoke("status", str(repo), "--patches", str(patches))
    assert f"  {COMM}: patched (no patchkit record); 0 cached bytecode files" in out(status)
    done = invoke("revert", str(repo), "--patches", str(patches))
    assert done.returncode == 0, done.stderr
    assert "(recognised from the files; no patchkit state)" in out(done)[1]
    for rel in (UTILS, COMM):
        assert (repo / rel).read_bytes() == original(origin, rel)


def test_plain_directory_keeps_state_in_dot_patchkit(origin: Path, tmp_path: Path) -> None:
    src = clone(origin, tmp_path / "co")
    plain = tmp_path / "plain"
    shutil.copytree(src, plain, ignore=shutil.ignore_patterns(".git"))
    done = invoke("apply", str(plain))
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == f"{plain}: SGLang 0.5.5, declared in python/sglang/version.py"
    assert (plain / ".patchkit/state.json").is_file()
    assert invoke("verify", str(plain)).returncode == 0
    assert invoke("revert", str(plain)).returncode == 0
    assert (plain / COMM).read_bytes() == original(origin, COMM)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: t / "missing", "{p}: no such file or directory"),
        (lambda t: (t / "file.txt").write_text("x") and t / "file.txt", "{p}: not a directory"),
        (lambda t: (t / "proj").mkdir() or t / "proj", "{p}: not an SGLang, vLLM or FlashInfer checkout or installed package (no python/sglang/, vllm/ or flashinfer/ folder, no package with a dist-info)"),
    ],
)
@pytest.mark.parametrize("command", ["apply", "verify", "revert", "status"])
def test_bad_paths(tmp_path: Path, make, message: str, command: str) -> None:
    path = make(tmp_path)
    done = invoke(command, str(path))
    assert done.returncode == 2
    assert done.stderr.decode() == f"patchkit: {message.format(p=path)}\n"
    assert done.stdout == b""


def test_symlinked_target_is_refused(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    outside = tmp_path / "outside.py"
    outside.write_bytes((repo / COMM).read_bytes())
    (repo / COMM).unlink()
    (repo / COMM).symlink_to(outside)
    before = outside.read_bytes()
    utils = (repo / UTILS).read_bytes()
    for command in ("apply", "verify", "revert"):
        done = invoke(command, str(repo))
        assert done.returncode == 3, command
        assert done.stderr.decode() == f"patchkit: {repo}/{COMM}: refused: target is a symlink\n"
    assert outside.read_bytes() == before and (repo / UTILS).read_bytes() == utils


def test_symlinked_folder_out_of_the_tree_is_refused(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(repo / DC), str(elsewhere))
    (repo / DC).symlink_to(elsewhere)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()}
    done = invoke("apply", str(repo))
    assert done.returncode == 3
    assert done.stderr.decode() == f"patchkit: {repo}/{DC}: refused: path goes through a symlinked folder\n"
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()} == before


def _hostile(patches: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "hostile"
    shutil.copytree(patches, copy)
    edit(copy / "0.5.5")
    return copy


def _rewrite_manifest(folder: Path, change) -> None:
    doc = json.loads((folder / "manifest.json").read_bytes())
    change(doc)
    (folder / "manifest.json").write_text(json.dumps(doc))


def _rewrite_entry(folder: Path, change) -> None:
    """Edit the manifest's series entry of the shipped patch (the only one: torch-symm-mem)."""

    def change_entry(doc: dict) -> None:
        assert [e["fix"] for e in doc["series"]] == ["torch-symm-mem"]
        change(doc["series"][0])

    _rewrite_manifest(folder, change_entry)


def _truncate(folder: Path) -> None:
    patch = next(folder.glob("*.patch"))
    data = patch.read_bytes()[:-200]
    patch.write_bytes(data)
    import hashlib

    _rewrite_entry(folder, lambda e: e.update(patch_sha256=hashlib.sha256(data).hexdigest()))


@pytest.mark.parametrize(
    ("edit", "code", "message"),
    [
        (lambda f: _rewrite_entry(f, lambda e: e["files"][0].update(path="../../etc/passwd")), 3,
         "patchkit: ../../etc/passwd: refused: path is not normalised (contains '..', '.' or '//')\n"),
        (lambda f: _rewrite_entry(f, lambda e: e["files"][0].update(path="/etc/passwd")), 3,
         "patchkit: /etc/passwd: refused: absolute path\n"),
        (lambda f: _rewrite_entry(f, lambda e: e["files"][0].update(path="python/sglang/other.py")), 3,
         "patchkit: python/sglang/other.py: refused: {m} names a file outside patchkit's target files\n"),
        (lambda f: _rewrite_entry(f, lambda e: e.update(patch="../x.patch")), 3,
         "patchkit: {m}: refused: patch name '../x.patch' is not a plain file name\n"),
        (lambda f: next(f.glob("*.patch")).write_bytes(next(f.glob("*.patch")).read_bytes().replace(b"+        12", b"+        13")), 2,
         "patchkit: {p}: does not match the sha256 in manifest.json (edited after generation?)\n"),
        (_truncate, 2, "patchkit: {p}: corrupt patch: "),
        (lambda f: (f / "manifest.json").write_bytes(b'{"version": '), 2, "patchkit: {m}: corrupt manifest: "),
        (lambda f: (f / "manifest.json").write_bytes(b"\x89PNG\x00\xff"), 2, "patchkit: {m}: corrupt manifest: "),
    ],
)
def test_hostile_or_broken_patches_are_refused_before_any_write(origin, patches, tmp_path, edit, code, message) -> None:
    repo = clone(origin, tmp_path / "co")
    hostile = _hostile(patches, tmp_path, edit)
    done = invoke("apply", str(repo), "--patches", str(hostile))
    assert done.returncode == code, done.stderr
    folder = hostile / "0.5.5"
    expected = message.format(m=folder / "manifest.json", p=next(folder.glob("*.patch")))
    assert done.stderr.decode().startswith(expected)
    assert len(done.stderr.decode().splitlines()) == 1 and b"Traceback" not in done.stderr
    assert git(repo, "status", "--porcelain") == ""


def test_json_outputs(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    doc = json.loads(invoke("apply", str(repo), "--json").stdout)
    [t] = doc["targets"]  # one target: a list all the same
    assert (doc["schema"], doc["command"], doc["ok"], doc["exit_code"]) == (2, "apply", True, 0)
    assert (t["action"], t["version"], t["files"]) == ("apply", "0.5.5", [UTILS, COMM])
    assert (t["kept"], t["pending"], t["set_aside"], t["jit_builds"], t["jit_error"]) == ([], False, None, [], None)
    assert t["lock"] == {"waited_s": None, "waited_for_pid": None, "recovered": None}  # taken, to write
    assert [(c["path"], c["added"], c["removed"]) for c in t["changes"]] == [(UTILS, 4, 0), (COMM, 1, 0)]  # "(+4 lines)", "(+1 line)"
    doc = json.loads(invoke("verify", str(repo), "--json").stdout)
    [t] = doc["targets"]
    assert (doc["ok"], t["in_effect"], t["problems"], t["to_cc"]) == (True, True, [], 12)
    doc = json.loads(invoke("status", str(repo), "--json").stdout)
    [t] = doc["targets"]
    assert t["applied"]["to_cc"] == 12 and [f["state"] for f in t["files"]] == ["patched", "patched"]
    doc = json.loads(invoke("revert", str(repo), "--json").stdout)
    [t] = doc["targets"]
    assert (doc["command"], t["action"], t["files"]) == ("revert", "revert", [UTILS, COMM])


def test_status_lines(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    assert invoke("apply", str(repo)).returncode == 0
    lines = out(invoke("status", str(repo)))
    assert lines[0] == f"target:   {repo} (git checkout; state in {repo}/.git/patchkit)"
    assert lines[1] == "project:  SGLang"
    assert lines[2] == "version:  0.5.5 (tag v0.5.5 at HEAD)"
    assert lines[3] == "applied:  generated from the checkout's files, key 12 copied from 10 (patchkit 0.1.0)"
    assert lines[-1] == "pending:  no interrupted transaction"


def test_half_patched_checkout_never_verifies(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    reference = clone(origin, tmp_path / "ref")
    assert invoke("apply", str(reference)).returncode == 0
    shutil.copy(reference / UTILS, repo / UTILS)  # one of the two files only
    done = invoke("verify", str(repo))
    assert done.returncode == 1
    assert out(done)[-2:] == [
        f"{COMM}: TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM has no key 12 (the patch is not applied)",
        "verify: 1 problem",
    ]
    # apply completes it.
    assert invoke("apply", str(repo)).returncode == 0
    assert invoke("verify", str(repo)).returncode == 0


def test_verify_passes_over_a_recorded_table_that_is_not_one(origin: Path, tmp_path: Path) -> None:
    """A state.json whose tables are not each a table's record (a bare name, a record without its
    name or with a scope that is no text: edited by hand or cut short) is verified by its files'
    post-images all the same: verify names the tables it can read and stops on none."""
    repo = clone(origin, tmp_path / "co")
    assert invoke("apply", str(repo)).returncode == 0
    state = repo / ".git/patchkit/state.json"
    doc = json.loads(state.read_text())
    for f in doc["files"]:
        f["tables"] = [t["name"] for t in f["tables"]] + [{"scope": "module"}, {"name": "X", "scope": 1}, *f["tables"]]
    state.write_text(json.dumps(doc))
    done = invoke("verify", str(repo))
    assert (done.returncode, done.stderr) == (0, b"")
    assert out(done)[-1] == "verify: ok (key 12 = key 10 in every table)"
    [t] = json.loads(invoke("verify", str(repo), "--json").stdout)["targets"]
    assert [(c["path"], c["how"], c["tables"]) for c in t["checked"]] == [
        (UTILS, "post-image hash recorded at apply", ["X", "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"]),
        (COMM, "post-image hash recorded at apply", ["X", "_WORLD_SIZES_MULTIMEM"])]
    (repo / COMM).write_bytes((repo / COMM).read_bytes() + b"# mine\n")  # evaluated from source: the records read for what apply added
    done = invoke("verify", str(repo))
    assert (done.returncode, done.stderr) == (0, b""), done.stdout
