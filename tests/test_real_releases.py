"""Real SGLang releases from PyPI: the shipped patches are what generate writes, and they work.

By default a few small releases are fetched (and cached, see ``support.mirror``).
``make check-patches`` runs this module over every release of the full mirror
(PATCHKIT_REAL_MIRROR=<repo>).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import black
import pytest

from patchkit.data import shipped
from patchkit.fixes.registry import FIXES, SGLANG
from patchkit.rewrite.evaluate import tables
from patchkit.rewrite.found import Found, phrased
from patchkit.versions import version_key
from support.cli import invoke, run_cli
from support.mirror import default_cache
from support.prebuilt import MIRRORED
from support.repos import comm_list, git

pytestmark = pytest.mark.network  # real releases from PyPI, fetched once into the cache

SHIPPED = shipped("patches")


@pytest.fixture(scope="module")
def mirror(prebuilt) -> Path:
    return prebuilt.mirror("sglang")


@pytest.fixture(scope="module")
def generated(mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    done = invoke("generate", "--repo", str(mirror), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _tags(mirror: Path) -> list[str]:
    return git(mirror, "tag", "--list", "v*", "--sort=v:refname").split()


def test_shipped_patches_are_what_generate_writes(mirror: Path, generated: Path) -> None:
    for tag in _tags(mirror):
        version = tag[1:]
        ours = sorted(p.name for p in (generated / version).iterdir()) if (generated / version).exists() else []
        theirs = sorted(p.name for p in (SHIPPED / version).iterdir()) if (SHIPPED / version).exists() else []
        assert ours == theirs, version
        for name in ours:
            assert (generated / version / name).read_bytes() == (SHIPPED / version / name).read_bytes(), (version, name)


def test_releases_before_053_have_nothing_to_patch(mirror: Path, generated: Path) -> None:
    for tag in _tags(mirror):
        has_patch = (generated / tag[1:] / "series").exists()
        assert has_patch == (version_key(tag) >= version_key("0.5.3")), tag


@functools.cache
def _black_clean(source: bytes) -> bool:
    """Does black leave ``source`` as it is?  Remembered by the bytes (0.3 s a file): a series
    applied twice (git apply, patch -p1) checks the same files twice."""
    try:
        black.format_file_contents(source.decode(), fast=False, mode=black.Mode())
    except black.NothingChanged:
        return True
    return False


def _series(folder: Path) -> list[Path]:
    """The patches of a release folder, in the order its quilt ``series`` file lists them."""
    return [folder / name for name in (folder / "series").read_text().split()]


def _patched(clone: Path, patch: Path) -> list[list[str]]:
    """Apply one patch of the series as ``patch -p1`` would (checked dry first) and with git;
    the numstat rows it added."""
    before = {row.split("\t")[2] for row in git(clone, "diff", "--numstat").splitlines()}
    subprocess.run(["patch", "-p1", "--dry-run", "-s", "-i", str(patch)], cwd=clone, check=True)
    git(clone, "apply", str(patch))
    return [row.split("\t") for row in git(clone, "diff", "--numstat").splitlines() if row.split("\t")[2] not in before]


def _checked_file(clone: Path, path: str, tag: str) -> bytes:
    """The patched file: it compiles, and black-clean before means black-clean after."""
    before = git(clone, "show", f"HEAD:{path}").encode()
    after = (clone / path).read_bytes()
    compile(after, path, "exec")
    assert _black_clean(after) or not _black_clean(before), (tag, path)
    return after


def test_each_patch_applies_at_its_tag(mirror: Path, generated: Path, tmp_path: Path) -> None:
    """Each series applies in order (patch -p1, git apply); deepgemm-sm12x (0.5.4 - 0.5.20, first in
    the series) refuses SM120 and SM121 in configurer.py; fusion-self-enable (0.5.4.post2 - 0.5.7, next)
    narrows the self-enabled fusion in server_args.py to SM90/SM100; torch-symm-mem gives key 12 = key 10
    in every table; allreduce-fusion adds the SM120 flag to the gate, defined and imported."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(mirror), str(clone)], check=True)
    checked = fusion = 0
    for tag in _tags(mirror):
        folder = generated / tag[1:]
        if not (folder / "series").exists():
            continue
        git(clone, "checkout", "-q", "-f", tag)
        series = _series(folder)
        number = 1
        gated = version_key("0.5.4") <= version_key(tag) < version_key("0.5.21")  # the fix's releases
        assert (series[0].name == "0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch") == gated, tag
        if gated:
            deepgemm, *series = series
            (row,) = _patched(clone, deepgemm)
            assert row[2] == "python/sglang/srt/layers/deep_gemm_wrapper/configurer.py", (tag, row)
            assert "sm_version in (120, 121)" in _checked_file(clone, row[2], tag).decode(), tag
            number = 2
        if version_key("0.5.4.post2") <= version_key(tag[1:]) <= version_key("0.5.7"):  # fusion-self-enable's releases
            fusion_off, *series = series
            assert fusion_off.name == f"000{number}-Keep-SGLang-from-turning-the-all-reduce-fusion-on-by.patch", tag
            (row,) = _patched(clone, fusion_off)
            assert row[2] == "python/sglang/srt/server_args.py", (tag, row)
            assert "is_sm100_supported()" in _checked_file(clone, row[2], tag).decode(), tag
            number += 1
        torch, *rest = series
        assert torch.name == f"000{number}-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch", tag
        numstat = _patched(clone, torch)
        assert len(numstat) == 2 and all(removed == "0" for _, removed, _ in numstat), (tag, numstat)
        for _, _, path in numstat:
            found = tables(_checked_file(clone, path, tag), SGLANG.tables, path)
            assert found, (tag, path)
            for name, table in found.items():
                assert table[12] == table[10], (tag, path, name)
        for patch in rest:
            assert patch.name == f"000{number + 1}-Allow-the-FlashInfer-all-reduce-fusion-on-SM120.patch", tag
            (row,) = _patched(clone, patch)
            after = _checked_file(clone, row[2], tag).decode()
            assert "_is_sm100_supported or _is_sm120_supported" in after, tag
            assert "\n_is_sm120_supported = " in after, tag  # defined next to the SM100 flag
            assert "is_sm120_supported,\n" in after or "get_platform().is_sm120" in after, tag
            fusion += 1
        checked += 1
    assert checked >= 1 and fusion >= 1


def test_a_series_applies_with_git_am(mirror: Path, generated: Path, tmp_path: Path) -> None:
    """The series of the newest release, as mail: `git am` makes one commit per patch."""
    tag = _tags(mirror)[-1]
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(clone)], check=True, capture_output=True)
    series = _series(generated / tag[1:])
    env = dict(os.environ, GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t.invalid")
    subprocess.run(["git", "am", "-q", *map(str, series)], cwd=clone, check=True, env=env)
    subjects = git(clone, "log", "--format=%s", f"{tag}..HEAD").splitlines()
    titles = {"torch-symm-mem": "Add SM120 to the torch symm-mem all-reduce tables",
              "allreduce-fusion": "Allow the FlashInfer all-reduce fusion on SM120"}
    manifest = json.loads((generated / tag[1:] / "manifest.json").read_bytes())
    assert subjects == [titles[e["fix"]] for e in reversed(manifest["series"])] and len(subjects) >= 1


def test_other_cc_pair_on_a_real_release(mirror: Path, tmp_path: Path) -> None:
    tag = _tags(mirror)[-1]
    out = tmp_path / "p"
    done = invoke("generate", "--repo", str(mirror), "--tag", tag, "--from-cc", "9", "--to-cc", "11", "--out", str(out))
    assert done.returncode == 0, done.stderr
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(clone)], check=True, capture_output=True)
    git(clone, "apply", str(next((out / tag[1:]).glob("*.patch"))))
    for path in git(clone, "diff", "--name-only").split():
        for name, table in tables((clone / path).read_bytes(), SGLANG.tables, path).items():
            assert table[11] == table[9], (path, name)


def test_apply_cycle_on_a_real_checkout(mirror: Path, tmp_path: Path) -> None:
    """The checkout "Done when": a real 0.5.9 clone with bytecode, the shipped patch, verify, revert."""
    import compileall

    tag = "v0.5.9" if "v0.5.9" in _tags(mirror) else _tags(mirror)[-1]
    repo = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(repo)], check=True, capture_output=True)
    assert compileall.compile_dir(repo / "python/sglang/srt/distributed", quiet=1)
    assert compileall.compile_dir(repo / "python/sglang/srt/layers/deep_gemm_wrapper", quiet=1)  # the DeepGEMM fix's file
    before = {p: p.read_bytes() for p in repo.rglob("*.pyc")}
    done = invoke("apply", str(repo), "--no-generate")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{repo}: SGLang {tag[1:]}, tag {tag} at HEAD"
    assert lines[1].startswith(f"applied shipped patch patches/{tag[1:]}/0001-")
    patched = [row.split("\t")[2] for row in git(repo, "diff", "--numstat").splitlines()]
    gone = {p for p in before if not p.exists()}
    assert sorted(p.name.split(".")[0] for p in gone) == sorted(Path(f).stem for f in patched)
    assert all(p.read_bytes() == data for p, data in before.items() if p not in gone)
    assert invoke("verify", str(repo)).returncode == 0
    stamp = [os.stat(repo / f).st_mtime_ns for f in patched]
    assert invoke("apply", str(repo)).stdout.decode().splitlines()[-1].startswith("already applied")
    assert [os.stat(repo / f).st_mtime_ns for f in patched] == stamp
    assert invoke("revert", str(repo)).returncode == 0
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert invoke("verify", str(repo)).returncode == 1


def test_upstream_on_a_real_checkout(mirror: Path, tmp_path: Path) -> None:
    """The upstream "Done when": dirty real clone untouched, one commit per default fix (the DeepGEMM
    fix, then the tables), git am reproduces them."""
    tag = "v0.5.9" if "v0.5.9" in _tags(mirror) else _tags(mirror)[-1]
    repo = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(repo)], check=True, capture_output=True)
    git(repo, "checkout", "-q", "-b", "mine")
    (repo / "python/sglang/version.py").write_bytes(b"# local edit\n")
    (repo / "scratch.txt").write_bytes(b"untracked\n")
    status, head = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")
    out = tmp_path / "up"
    done = invoke("upstream", str(repo), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")) == (status, head)
    assert git(repo, "symbolic-ref", "--short", "HEAD").strip() == "mine"
    branch = "patchkit/sm120-deepgemm-sm12x-torch-symm-mem"
    assert git(repo, "rev-list", "--count", f"HEAD..{branch}").strip() == "2"
    mboxes = sorted(out.glob("*.patch"))
    assert [p.name for p in mboxes] == ["0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch",
                                        "0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"]
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(fresh)], check=True, capture_output=True)
    git(fresh, "am", "-q", *map(str, mboxes))
    assert git(fresh, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", f"{branch}^{{tree}}")
    for path in git(repo, "diff", "--name-only", "HEAD", branch).split():
        assert _black_clean((fresh / path).read_bytes()), path
    pr = (out / "PR.md").read_text()
    assert "| `TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES` (module) | `12` |" in pr
    assert "| `_WORLD_SIZES_MULTIMEM` (class TorchSymmMemCommunicator) | `12` | `[6, 8]` | key `10` |" in pr


def test_upstream_one_commit_per_fix(mirror: Path, tmp_path: Path) -> None:
    """upstream --all-fixes: one commit per fix that changes the release, an mbox each that
    git am reproduces, and a PR.md that cites every rule's evidence."""
    tag = "v0.5.9" if "v0.5.9" in _tags(mirror) else _tags(mirror)[-1]
    repo = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(repo)], check=True, capture_output=True)
    out = tmp_path / "up"
    done = invoke("upstream", str(repo), "--out", str(out), "--all-fixes")
    assert done.returncode == 0, done.stderr
    branch = "patchkit/sm120-deepgemm-sm12x-torch-symm-mem-allreduce-fusion"
    subjects = git(repo, "log", "--format=%s", f"HEAD..{branch}").splitlines()
    assert subjects == ["Allow the FlashInfer all-reduce fusion on SM120", "Add SM120 to the torch symm-mem all-reduce tables",
                        "Keep DeepGEMM off on SM120/SM121 unless it has their APIs"]
    mboxes = sorted(out.glob("*.patch"))
    assert [p.name for p in mboxes] == ["0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch",
                                        "0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch",
                                        "0003-Allow-the-FlashInfer-all-reduce-fusion-on-SM120.patch"]
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(fresh)], check=True, capture_output=True)
    git(fresh, "am", "-q", *map(str, mboxes))
    assert git(fresh, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", f"{branch}^{{tree}}")
    # The fusion commit is the shipped 0003 patch's change.
    assert git(repo, "diff", "--name-only", f"{branch}^", branch).split() == ["python/sglang/srt/layers/communicator.py"]
    pr = (out / "PR.md").read_text()
    assert "### 3. Allow the FlashInfer all-reduce fusion on SM120" in pr
    assert pr.count("Evidence: not upstream; copied from SM100, untuned.") == 2
    assert "patchkit apply . --fix deepgemm-sm12x --fix torch-symm-mem --fix allreduce-fusion" in pr
    again = invoke("upstream", str(repo), "--out", str(tmp_path / "up2"), "--fix", "allreduce-fusion", "--dry-run")
    assert again.returncode == 0, again.stderr
    assert again.stdout.decode().splitlines()[1] == "would create branch patchkit/sm120-allreduce-fusion with one commit:"


def test_installed_package_with_pip_bytecode(tmp_path: Path) -> None:
    """The installed-package "Done when": a real wheel pip-installed in a virtualenv."""
    import sys

    from support.mirror import fetch_wheel

    wheel = fetch_wheel("0.5.9", default_cache())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin/python")
    site = next((venv / "lib").glob("python3*/site-packages"))
    # pip (from this interpreter) installs into the venv and compiles bytecode, as users get it.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True, capture_output=True)
    package = site / "sglang"
    pycs_before = {p: p.read_bytes() for p in package.rglob("*.pyc")}
    assert pycs_before, "pip compiled no bytecode"
    original = {p: p.read_bytes() for p in (package / "srt/distributed/device_communicators").glob("*.py")}

    done = invoke("apply", "--python", python, "--no-generate")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{package}: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info"
    assert lines[1] == "applied shipped patch patches/0.5.9/0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch + patches/0.5.9/0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
    gone = {p for p in pycs_before if not p.exists()}
    assert sorted(p.name.split(".")[0] for p in gone) == ["all_reduce_utils", "configurer", "torch_symm_mem"]
    assert all(p.read_bytes() == data for p, data in pycs_before.items() if p not in gone)
    assert (site / ".patchkit-sglang/state.json").is_file()
    assert invoke("verify", "--python", python).returncode == 0
    assert invoke("apply", str(package)).stdout.decode().splitlines()[-1].startswith("already applied")
    assert invoke("revert", str(site)).returncode == 0
    assert {p: p.read_bytes() for p in original} == original
    assert invoke("verify", "--python", python).returncode == 1


def test_vllm_release_with_string_keys(tmp_path: Path, prebuilt) -> None:
    """A second project: a real vLLM release, tables keyed "9.0"/"10.0", patched with "12.0"."""
    from patchkit.fixes.registry import PROJECTS

    VLLM = PROJECTS["vllm"]
    repo = tmp_path / "vllm"
    shutil.copytree(prebuilt.release("vllm", "0.11.0"), repo, symlinks=True)
    out = tmp_path / "p"
    done = invoke("generate", "--project", "vllm", "--repo", str(repo), "--out", str(out), "--from-cc", "10.0", "--to-cc", "12.0")
    assert done.returncode == 0, done.stderr
    patch = next((out / "0.11.0").glob("*.patch"))
    assert patch.name == "0001-Add-SM120-to-the-all-reduce-size-tables.patch"
    git(repo, "apply", "--check", str(patch))

    # Named: vLLM only warns without it, and no SM12x GPU has multicast (a plain apply and verify leave it out).
    assert invoke("verify", str(repo), "--fix", "torch-symm-mem").returncode == 1
    done = invoke("apply", str(repo), "--fix", "torch-symm-mem")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[0] == f"{repo}: vLLM 0.11.0, tag v0.11.0 at HEAD"
    path = "vllm/distributed/device_communicators/all_reduce_utils.py"
    found = tables((repo / path).read_bytes(), VLLM.tables, path)
    assert sorted(found) == ["CUSTOM_ALL_REDUCE_MAX_SIZES", "SYMM_MEM_ALL_REDUCE_MAX_SIZES"]
    assert all(t["12.0"] == t["10.0"] for t in found.values())
    comm = "vllm/distributed/device_communicators/symm_mem.py"
    (multimem,) = tables((repo / comm).read_bytes(), VLLM.tables, comm).values()
    assert multimem["12.0"] == multimem["10.0"] == [6, 8]
    reference = tmp_path / "ref"
    subprocess.run(["git", "clone", "-q", str(repo), str(reference)], check=True, capture_output=True)
    git(reference, "apply", str(patch))
    assert (reference / path).read_bytes() == (repo / path).read_bytes()
    assert (reference / comm).read_bytes() == (repo / comm).read_bytes()
    assert invoke("verify", str(repo)).returncode == 0
    assert invoke("revert", str(repo)).returncode == 0
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_scan_finds_the_symm_mem_tables_in_a_real_tree(prebuilt) -> None:
    """`patchkit scan` on a real tree: SGLang 0.5.9 checked out (0.5.23's is scan/test_real_gates.py's)."""
    import json

    done = run_cli("scan", str(prebuilt.release("sglang", "0.5.9") / "python"), "--cc", "12", "--json")
    assert done.returncode == 1, done.stderr  # gates found
    doc = json.loads(done.stdout)
    tables = {f["name"]: f for f in doc["findings"] if f["kind"] == "table"}
    assert tables["TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"]["patchable"]
    assert tables["TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM"]["patchable"]
    assert tables["TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"]["path"].endswith("device_communicators/all_reduce_utils.py")
    assert doc["skipped"] == []
    assert len(doc["findings"]) > 2  # other capability gates too, each with a line
    assert all(isinstance(f["line"], int) and f["line"] > 0 for f in doc["findings"])


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_kills_and_races_on_a_real_checkout(mirror: Path, tmp_path: Path, op: str) -> None:
    """The reliability "Done when" on real SGLang: a SIGKILL at every write boundary of apply
    and revert, then the next command repairs; two runs at once end consistent.

    One clone takes every kill in turn: each round ends with the clone proven as fresh
    (no change to a tracked file, no untracked file, an empty state dir)."""
    tag = "v0.5.9" if "v0.5.9" in _tags(mirror) else _tags(mirror)[-1]
    files = ["python/sglang/srt/distributed/device_communicators/all_reduce_utils.py",
             "python/sglang/srt/distributed/device_communicators/torch_symm_mem.py"]
    repo = tmp_path / op
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(repo)], check=True, capture_output=True)
    for point in ("objects", "journal", "file:1", "file:2", "state", "bytecode"):
        if op == "revert":
            assert invoke("apply", str(repo)).returncode == 0
        killed = run_cli(op, str(repo), env={"PATCHKIT_FAULT": point})  # a process of its own, killed
        assert killed.returncode == -9, (point, killed.stderr)
        half = git(repo, "diff", "--name-only", "--", *files).split()
        if (repo / ".git/patchkit/journal.json").exists():
            assert invoke("verify", str(repo)).returncode == 1, point  # never accepted while pending
        done = invoke("apply", str(repo))
        assert done.returncode == 0, (point, done.stderr)
        assert invoke("verify", str(repo)).returncode == 0, point
        assert invoke("revert", str(repo)).returncode == 0, point
        assert git(repo, "status", "--porcelain", "--untracked-files=all") == "", point
        leftovers = [p.name for p in (repo / ".git/patchkit").glob("*")] if (repo / ".git/patchkit").exists() else []
        assert leftovers == [], (point, leftovers, half)
    # Each waits for the lock as long as it takes (a hang guard, not a measure): all three must succeed.
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""), PATCHKIT_LOCK_TIMEOUT="120")
    procs = [subprocess.Popen([sys.executable, "-m", "patchkit", cmd, str(repo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
             for cmd in ("apply", op, "apply")]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and b"Traceback" not in err, err
    state = invoke("verify", str(repo)).returncode
    changed = git(repo, "status", "--porcelain", "--untracked-files=no") != ""
    assert (state, changed) in ((0, True), (1, False))  # fully patched and verified, or fully original


# --- FlashInfer (flashinfer-python wheels) and a whole environment --------------------------

PR_3903 = ("csrc/trtllm_allreduce.cu", "flashinfer/aot.py", "flashinfer/comm/trtllm_ar.py", "flashinfer/jit/comm.py",
           "include/flashinfer/comm/trtllm_allreduce.cuh", "include/flashinfer/comm/trtllm_allreduce_fusion.cuh",
           "include/flashinfer/comm/trtllm_moe_allreduce_fusion.cuh", "include/flashinfer/utils.cuh")
GUARD = b"__CUDA_ARCH__ < 1200"


@pytest.fixture(scope="module")
def flashinfer_mirror(prebuilt) -> Path:
    return prebuilt.mirror("flashinfer")


# What each release holds decides what generate must do there (read from the release, not from
# patchkit's output): the backport's hunk in utils.cuh goes above GetCudaMultiProcessorCount(),
# which releases before 0.6.0 lack; flashinfer/aot.py binds has_sm120f from 0.6.6.
BACKPORT = next(r for r in FIXES["allreduce-fusion"].rules if r.kind == "backport")
UTILS_CONTEXT = b"inline int GetCudaMultiProcessorCount() {"
UTILS_CONFLICT = "include/flashinfer/utils.cuh: hunk 1 (@@ -359,6 +359,22 @@) conflicts"
# What the manifest keeps of it: the code and its fields, said as UTILS_CONFLICT when read.
UTILS_CONFLICT_SAVED = {"code": "hunk-conflicts", "path": "include/flashinfer/utils.cuh",
                        "fields": {"number": 1, "header": "@@ -359,6 +359,22 @@"}}


def test_flashinfer_series_carry_the_whole_upstream_change(flashinfer_mirror: Path, tmp_path: Path) -> None:
    """generate on FlashInfer (every fix, as `make patches`), on any mirror that holds
    the session mirror's four (support.prebuilt.MIRRORED, or `make flashinfer-mirror`'s every release): each release
    from the one PR 3903 landed in is already upstream (no folder, no `< 1200` guard); each release
    before it whose utils.cuh lacks the hunk's context gets a manifest that says it cannot apply;
    every other gets all of FlashInfer PR 3903 (its 8 shipped files), refreshed where aot.py has no
    has_sm120f.  The shipped series are what it writes; after `git apply` and `patch -p1` no
    `< 1200` guard is left, the JIT list is upstream's, and on the release it was made on 7 of the
    8 files are the landed release's bytes."""
    out = tmp_path / "out"
    done = invoke("generate", "--project", "flashinfer", "--repo", str(flashinfer_mirror), "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    asked = invoke("generate", "--project", "flashinfer", "--fix", "allreduce-fusion", "--tag", "v0.5.0",
                   "--repo", str(flashinfer_mirror), "--out", str(tmp_path / "asked"))
    assert asked.returncode == 3 and not (tmp_path / "asked" / "0.5.0").exists()  # named and cannot apply: an error
    assert "v0.5.0  error: allreduce-fusion cannot apply: include/flashinfer/utils.cuh: hunk 1" in asked.stderr.decode()
    shipped_root = SHIPPED / "flashinfer"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(flashinfer_mirror), str(clone)], check=True)
    landed, made_on = BACKPORT.origin.landed_in, BACKPORT.made_on
    tags = _tags(flashinfer_mirror)
    assert {f"v{v}" for v in MIRRORED["flashinfer"]} <= set(tags) and {f"v{landed}", f"v{made_on}"} <= set(tags)
    seen = {"upstream": [], "cannot apply": [], "patched": [], "refreshed": []}
    for tag in tags:
        version, folder = tag[1:], out / tag[1:]
        ours = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        theirs = sorted(p.name for p in (shipped_root / version).iterdir()) if (shipped_root / version).exists() else []
        assert ours == theirs, version
        for name in ours:
            assert (folder / name).read_bytes() == (shipped_root / version / name).read_bytes(), (version, name)
        original = {p: git(flashinfer_mirror, "show", f"{tag}:{p}").encode() for p in PR_3903}
        if version_key(version) >= version_key(landed):
            assert not folder.exists() and f"{tag:<14}  already upstream" in lines, version
            assert GUARD not in original["include/flashinfer/comm/trtllm_allreduce.cuh"], version
            seen["upstream"].append(version)
            continue
        manifest = json.loads((folder / "manifest.json").read_bytes())
        if UTILS_CONTEXT not in original["include/flashinfer/utils.cuh"]:
            assert manifest["series"] == [] and ours == ["manifest.json"], version
            assert manifest["fixes"] == [{"fix": "allreduce-fusion", "status": "cannot apply", "reason": None,
                                          "unfit": UTILS_CONFLICT_SAVED}], version
            assert f"{tag:<14}  nothing to patch: allreduce-fusion cannot apply ({UTILS_CONFLICT})" in lines, version
            seen["cannot apply"].append(version)
            continue
        (patch,) = _series(folder)
        (entry,) = manifest["series"]
        assert [f["path"] for f in entry["files"]] == list(PR_3903), version
        assert all(t["kind"] == "backport" and t["name"] == "FlashInfer PR 3903" for f in entry["files"] for t in f["tables"])
        assert original["include/flashinfer/comm/trtllm_allreduce.cuh"].count(GUARD) == 13, version
        for how in (["git", "apply", str(patch)], ["patch", "-p1", "-s", "-i", str(patch)]):
            git(clone, "checkout", "-q", "-f", tag)
            subprocess.run(how, cwd=clone, check=True)
            assert GUARD not in (clone / "include/flashinfer/comm/trtllm_allreduce.cuh").read_bytes(), (tag, how[0])
            assert comm_list(_checked_file(clone, "flashinfer/jit/comm.py", tag)) == [9, 10, 12]
            for path in ("flashinfer/aot.py", "flashinfer/comm/trtllm_ar.py"):
                _checked_file(clone, path, tag)
            cluster = (clone / "include/flashinfer/utils.cuh").read_bytes()
            assert b"inline int GetMaxClusterSize(const void* kernel, int block_dim) {" in cluster
        aot = (clone / "flashinfer/aot.py").read_bytes()
        aot_table = entry["files"][1]["tables"][0]
        aot_value = aot_table["value"]  # a value; apply and the commit message say it in words
        aot_said = phrased(Found.from_json(aot_table)).value
        if b"has_sm120f" not in original["flashinfer/aot.py"]:  # refreshed: the AOT condition leaves it out
            assert b"or has_sm120f" not in aot and b"            or has_sm121\n        ):\n            jit_specs.append(gen_trtllm_comm_module())" in aot
            assert aot_value["how"] == "merged" and [r["drop"] for r in aot_value["refreshed"]] == [["            or has_sm120f"]], version
            assert "by a three-way merge, refreshed: no has_sm120f in flashinfer/aot.py before 0.6.6" in aot_said, version
            seen["refreshed"].append(version)
        else:
            assert b"            or has_sm120f\n" in aot and "refreshed" not in aot_value and "refreshed" not in aot_said, version
        if version == made_on:  # the release it was made on: upstream's bytes, but for unrelated changes
            same = [p for p in PR_3903 if (clone / p).read_bytes() == git(flashinfer_mirror, "show", f"v{landed}:{p}").encode()]
            assert same == [p for p in PR_3903 if p != "flashinfer/jit/comm.py"]
        seen["patched"].append(version)
    # The four releases this test is built around are each what it says of them, on any mirror.
    assert "0.5.0" in seen["cannot apply"] and {"0.6.4", "0.6.16.post4"} <= set(seen["patched"]) and "0.6.17" in seen["upstream"]
    assert "0.6.4" in seen["refreshed"] and "0.6.16.post4" not in seen["refreshed"]


def test_one_environment_sglang_and_flashinfer(tmp_path: Path, prebuilt) -> None:
    """One venv with the sglang 0.5.9 and flashinfer-python 0.6.4 wheels: apply --all-fixes
    patches both, FlashInfer's JIT sources below flashinfer/data/ included; verify exits 0;
    revert gives back the wheels' exact bytes, every file as its RECORD lists it."""
    from support.mirror import fetch_wheel
    from support.venvs import copy_venv

    # A copy of the session's template with both installed by pip (gpus/test_doctor.py's too).
    template = prebuilt.venv(fetch_wheel("0.5.9", default_cache()), fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))
    venv = copy_venv(template, tmp_path / "venv")
    python = str(venv / "bin/python")
    site = next((venv / "lib").glob("python3*/site-packages"))
    installed = {p: p.replace("include/", "flashinfer/data/include/", 1).replace("csrc/", "flashinfer/data/csrc/", 1)
                 for p in PR_3903}
    files = ["sglang/srt/distributed/device_communicators/all_reduce_utils.py",
             "sglang/srt/distributed/device_communicators/torch_symm_mem.py",
             "sglang/srt/layers/communicator.py", *installed.values()]
    original = {f: (site / f).read_bytes() for f in files}
    assert installed["csrc/trtllm_allreduce.cu"] == "flashinfer/data/csrc/trtllm_allreduce.cu"

    before = invoke("verify", "--python", python, "--all-fixes")
    assert before.returncode == 1
    assert ("flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh: lacks FlashInfer PR 3903 (14 hunks; the "
            "allreduce-fusion patch is not applied)") in before.stdout.decode().splitlines()
    default = invoke("apply", "--python", python)
    assert default.returncode == 0, default.stderr
    assert (site / files[2]).read_bytes() == original[files[2]]  # the default: torch-symm-mem only
    assert all((site / f).read_bytes() == original[f] for f in installed.values())
    assert ("note: no rule of deepgemm-sm12x, fusion-self-enable, torch-symm-mem patches FlashInfer; allreduce-fusion does "
            "(--fix NAME)") in default.stdout.decode()

    done = invoke("apply", "--python", python, "--all-fixes")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert "applied shipped patch patches/flashinfer/0.6.4/0001-Allow-the-FlashInfer-all-reduce-fusion-on-SM120.patch" in lines
    assert "  patched flashinfer/data/include/flashinfer/utils.cuh (+16 lines)" in lines
    assert all((site / f).read_bytes() != original[f] for f in files)
    assert GUARD not in (site / installed["include/flashinfer/comm/trtllm_allreduce.cuh"]).read_bytes()
    assert comm_list((site / "flashinfer/jit/comm.py").read_bytes()) == [9, 10, 12]
    verified = invoke("verify", "--python", python, "--all-fixes")
    assert verified.returncode == 0, verified.stdout
    assert "checked flashinfer/data/csrc/trtllm_allreduce.cu: FlashInfer PR 3903 (post-image hash recorded at apply)" in \
        verified.stdout.decode().splitlines()
    assert invoke("apply", "--python", python, "--all-fixes").stdout.decode().count("already applied") == 2

    reverted = invoke("revert", "--python", python)
    assert reverted.returncode == 0, reverted.stderr
    assert {f: (site / f).read_bytes() for f in files} == original
    assert _record_mismatches(site, "flashinfer_python-0.6.4.dist-info") == []


def _record_mismatches(site: Path, dist_info: str) -> list[str]:
    """The files of a dist-info's RECORD whose sha256 is not the one it lists."""
    import base64
    import csv
    import hashlib

    bad = []
    for row in csv.reader((site / dist_info / "RECORD").read_text().splitlines()):
        if len(row) > 1 and row[1].startswith("sha256=") and not row[0].startswith("../"):  # scripts: elsewhere
            digest = base64.urlsafe_b64encode(hashlib.sha256((site / row[0]).read_bytes()).digest()).rstrip(b"=").decode()
            if digest != row[1][len("sha256="):]:
                bad.append(row[0])
    return bad


def test_a_release_the_backport_cannot_apply_to_is_refused_whole(tmp_path: Path) -> None:
    """flashinfer-python 0.5.0: its manifest says PR 3903 cannot apply; apply --fix refuses
    (exit 3) and writes nothing, not even the parts that would fit."""
    from support.mirror import fetch_wheel

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site),
                    str(fetch_wheel("0.5.0", default_cache(), "flashinfer-python"))], check=True, capture_output=True)
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    done = invoke("apply", str(site), "--fix", "allreduce-fusion")
    assert done.returncode == 3
    assert done.stderr.decode() == ("patchkit: allreduce-fusion cannot apply on FlashInfer 0.5.0: include/flashinfer/utils.cuh: "
                                    "hunk 1 (@@ -359,6 +359,22 @@) conflicts; nothing written\n")
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    assert not (site / ".patchkit-flashinfer").exists()


def test_flashinfer_jit_builds_follow_the_patched_sources(tmp_path: Path, prebuilt) -> None:
    """A trtllm_comm build made before apply (in the cache FlashInfer 0.6.4 computes for
    FLASHINFER_CUDA_ARCH_LIST=12.0a below $HOME) would be loaded instead of compiling the patched
    sources: apply drops it and leaves other modules' builds; a stale one found later makes
    status say so and verify exit 1; revert drops a build made from the patched sources."""
    import os

    from support.mirror import fetch_wheel
    from support.venvs import copy_venv, site_packages

    site = site_packages(copy_venv(prebuilt.venv(fetch_wheel("0.6.4", default_cache(), "flashinfer-python")), tmp_path / "V"))
    home = tmp_path / "home"
    ops = home / ".cache/flashinfer/0.6.4/120a/cached_ops"
    env = {"HOME": str(home)}

    def build(module: str, when: float) -> Path:
        folder = ops / module
        folder.mkdir(parents=True, exist_ok=True)
        for name in (f"{module}.so", "build.ninja"):
            (folder / name).write_bytes(b"built by the test\n")
            os.utime(folder / name, (when, when))
        return folder

    old = build("trtllm_comm", 1_000_000_000.0)
    other = build("norm", 1_000_000_000.0)
    done = invoke("apply", str(site), "--fix", "allreduce-fusion", env=env)
    assert done.returncode == 0, done.stderr
    assert f"dropped stale FlashInfer JIT build {old} (built before the patch)" in done.stdout.decode().splitlines()
    assert not old.exists() and (other / "norm.so").is_file()

    stale = build("trtllm_comm", 1_000_000_000.0)  # e.g. restored from a backup: older than the patched files
    status = invoke("status", str(site), env=env)
    assert (f"  {stale}: stale FlashInfer JIT build (cached JIT build), older than the patched sources; "
            "`patchkit apply` drops it") in status.stdout.decode().splitlines()
    verify = invoke("verify", str(site), "--fix", "allreduce-fusion", env=env)
    assert verify.returncode == 1
    assert (f"{stale}: stale FlashInfer JIT build (built before the patched sources); `patchkit apply` drops it"
            in verify.stdout.decode().splitlines())
    [t] = json.loads(invoke("status", str(site), "--json", env=env).stdout)["targets"]
    assert [(b["module"], b["path"], b["kind"], b["droppable"]) for b in t["jit_builds"]] == [
        ("trtllm_comm", str(stale), "cached JIT build", True)]
    dropped = {"module": "trtllm_comm", "path": str(stale), "kind": "cached JIT build", "error": None}
    [t] = json.loads(invoke("apply", str(site), "--fix", "allreduce-fusion", "--dry-run", "--json", env=env).stdout)["targets"]
    assert (t["jit_builds"], t["jit_builds_dropped"]) == ([dict(dropped, outcome="would drop")], [])
    again = invoke("apply", str(site), "--fix", "allreduce-fusion", "--json", env=env)
    [t] = json.loads(again.stdout)["targets"]
    assert again.returncode == 0 and not stale.exists()
    assert (t["action"], t["jit_builds"], t["jit_builds_dropped"]) == ("already applied", [dict(dropped, outcome="dropped")],
                                                                       [str(stale)])
    assert invoke("verify", str(site), "--fix", "allreduce-fusion", env=env).returncode == 0

    # The server builds from the patched sources (the build is newer than they are); verify is
    # content with it; revert writes the originals after it, and drops it.
    for f in PR_3903:
        installed = site / f.replace("include/", "flashinfer/data/include/", 1).replace("csrc/", "flashinfer/data/csrc/", 1)
        os.utime(installed, (1_500_000_000.0, 1_500_000_000.0))
    later = build("trtllm_comm", 1_500_000_010.0)
    assert invoke("verify", str(site), "--fix", "allreduce-fusion", env=env).returncode == 0
    reverted = invoke("revert", str(site), env=env)
    assert reverted.returncode == 0, reverted.stderr
    assert f"dropped stale FlashInfer JIT build {later} (built from the patched sources)" in reverted.stdout.decode().splitlines()
    assert not later.exists() and (other / "norm.so").is_file()
