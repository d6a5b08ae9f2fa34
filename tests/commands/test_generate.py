"""``patchkit generate`` against git repositories with several tags built in the test."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support.cli import invoke
from support.repos import DC, RELEASES, UTILS_NEW, comm, git, make_repo

PATCH_NAME = "0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"


def _generate(repo: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return invoke("generate", "--repo", str(repo), "--out", str(out), *extra)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_generate_every_tag(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "patches"
    done = _generate(repo, out)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0].split() == ["v0.5.2", "nothing", "to", "patch"]
    assert lines[1].startswith("v0.5.3          patched -> ")
    # fusion-self-enable (on by default) has nothing to patch in a tree without server_args.py, as intended
    assert lines[1].endswith("/0.5.3/series: deepgemm-sm12x nothing to patch; fusion-self-enable nothing to patch; "
                             "torch-symm-mem 2 tables in 2 files; allreduce-fusion nothing to patch")
    assert lines[-1] == "4 tags: 3 patched, 1 nothing to patch, 0 already upstream, 0 errors"
    assert sorted(p.name for p in out.iterdir()) == ["0.5.16", "0.5.3", "0.5.5"]
    for version in ("0.5.3", "0.5.5", "0.5.16"):
        assert sorted(p.name for p in (out / version).iterdir()) == [PATCH_NAME, "manifest.json", "series"]
        assert (out / version / "series").read_text() == PATCH_NAME + "\n"  # quilt's list, in order


def test_patch_applies_at_its_tag_and_only_adds(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "patches"
    assert _generate(repo, out).returncode == 0
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    for version in ("0.5.3", "0.5.5", "0.5.16"):
        patch = out / version / PATCH_NAME
        git(clone, "checkout", "-q", f"v{version}")
        git(clone, "apply", "--check", str(patch))
        subprocess.run(["patch", "-p1", "--dry-run", "-s", "-i", str(patch)], cwd=clone, check=True)
        git(clone, "apply", str(patch))
        diff = git(clone, "diff", "--numstat")
        assert [row.split("\t")[1] for row in diff.splitlines()] == ["0", "0"]  # no line removed
        git(clone, "checkout", "-q", ".")


def test_patch_content_and_manifest(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "patches"
    assert _generate(repo, out).returncode == 0
    patch = (out / "0.5.16" / PATCH_NAME).read_bytes()
    head, _, _ = patch.partition(b"\n---\n")
    assert head.splitlines()[:4] == [
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
        b"From: patchkit <patchkit@users.noreply.invalid>",
        b"Date: Sun, 04 Jan 2026 12:00:00 +0000",  # the release commit's date, not the clock
        b"Subject: [PATCH] Add SM120 to the torch symm-mem all-reduce tables",
    ]
    assert b"Last-Update: 2026-01-04" in head
    assert b"         10: [4, 6, 8],\n+        12: [4, 6, 8],\n     }\n" in patch
    manifest = json.loads((out / "0.5.16" / "manifest.json").read_bytes())
    commit = git(repo, "rev-parse", "v0.5.16^{commit}").strip()
    assert manifest["tag"] == "v0.5.16" and manifest["commit"] == commit
    assert manifest["fixes"] == [{"fix": "deepgemm-sm12x", "status": "nothing to patch", "reason": None},
                                 {"fix": "fusion-self-enable", "status": "nothing to patch", "reason": None},
                                 {"fix": "torch-symm-mem", "status": "patched", "reason": None},
                                 {"fix": "allreduce-fusion", "status": "nothing to patch", "reason": None}]
    (series,) = manifest["series"]
    assert (series["fix"], series["from_cc"], series["to_cc"], series["patch"]) == ("torch-symm-mem", 10, 12, PATCH_NAME)
    assert [r["evidence"] for r in series["rules"]] == ["not upstream; copied from SM100, untuned"]
    entry = {f["path"]: f for f in series["files"]}[f"{DC}/torch_symm_mem.py"]
    assert entry["pre_blob"] == git(repo, "rev-parse", f"v0.5.16:{DC}/torch_symm_mem.py").strip()
    assert entry["tables"] == [
        {"name": "_WORLD_SIZES_MULTIMEM", "scope": "class TorchSymmMemCommunicator",
         "status": "patched", "added_key": 12, "copied_from": 10, "value": "[4, 6, 8]",
         "fix": "torch-symm-mem", "kind": "dict-key"}
    ]
    # The recorded post-image is what git makes of the patched file.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", "v0.5.16", str(repo), str(clone)], check=True, capture_output=True)
    git(clone, "apply", str(out / "0.5.16" / PATCH_NAME))
    assert git(clone, "hash-object", f"{DC}/torch_symm_mem.py").strip() == entry["post_blob"]


def test_values_are_per_release(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "patches"
    assert _generate(repo, out).returncode == 0
    assert b"+        12: [6, 8],\n" in (out / "0.5.5" / PATCH_NAME).read_bytes()
    assert b"+        12: [4, 6, 8],\n" in (out / "0.5.16" / PATCH_NAME).read_bytes()


def test_rerun_is_byte_identical_and_check_passes(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "patches"
    assert _generate(repo, out).returncode == 0
    first = _tree_bytes(out)
    assert _generate(repo, out).returncode == 0
    assert _tree_bytes(out) == first
    other = tmp_path / "again"
    assert _generate(repo, other).returncode == 0
    assert _tree_bytes(other) == first
    check = _generate(repo, out, "--check")
    assert check.returncode == 0, check.stdout
    assert check.stdout.decode().splitlines()[-1].endswith("; 0 differences in " + str(out))


def test_check_lists_differences_and_writes_nothing(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "patches"
    assert _generate(repo, out).returncode == 0
    (out / "0.5.5" / "manifest.json").write_bytes(b"{}\n")
    shutil.rmtree(out / "0.5.3")
    (out / "0.5.2").mkdir()
    (out / "0.5.2" / "0001-old.patch").write_bytes(b"stale\n")
    before = _tree_bytes(out)
    check = _generate(repo, out, "--check")
    assert check.returncode == 1
    text = check.stdout.decode()
    assert f"{out}/0.5.2/0001-old.patch: not written by generate (nothing to patch)" in text
    assert f"{out}/0.5.3/{PATCH_NAME}: missing" in text
    assert f"{out}/0.5.5/manifest.json: differs from what generate writes" in text
    assert _tree_bytes(out) == before
    # A real run repairs it, removing the stale file.
    assert _generate(repo, out).returncode == 0
    assert _generate(repo, out, "--check").returncode == 0
    assert not (out / "0.5.2").exists()


def test_selected_tags_and_other_cc_pair(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "p"
    done = _generate(repo, out, "--tag", "v0.5.16", "--from-cc", "9", "--to-cc", "11")
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.iterdir()] == ["0.5.16"]
    patch = next((out / "0.5.16").glob("*.patch")).read_bytes()
    assert b"Subject: [PATCH] Add SM110 to the torch symm-mem all-reduce tables" in patch
    assert b"         9: [4, 6, 8],\n+        11: [4, 6, 8],\n         10: [4, 6, 8],\n" in patch


def test_already_upstream(tmp_path: Path) -> None:
    upstream = comm(sm100="[6, 8],\n        12: [6, 8]")
    utils = UTILS_NEW.replace(b"    },\n}\n", b"    },\n    12: {\n        2: 1,\n    },\n}\n")
    repo = make_repo(tmp_path / "r", {"v0.6.0": {f"{DC}/torch_symm_mem.py": upstream, f"{DC}/all_reduce_utils.py": utils}})
    done = _generate(repo, tmp_path / "out", "--json")
    assert done.returncode == 0
    doc = json.loads(done.stdout)
    assert doc["tags"][0]["status"] == "already upstream"
    assert {t["name"] for t in doc["tags"][0]["tables"]} == {"_WORLD_SIZES_MULTIMEM", "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"}
    assert doc["summary"] == {"tags": 1, "patched": 0, "nothing to patch": 0, "already upstream": 1, "error": 0}
    assert not (tmp_path / "out").exists()


def test_broken_tag_is_reported_and_the_rest_handled(tmp_path: Path) -> None:
    releases = dict(RELEASES)
    releases["v0.5.17"] = {f"{DC}/torch_symm_mem.py": comm().replace(b"10: [6, 8]", b"11: [6, 8]")}
    repo = make_repo(tmp_path / "r", releases)
    out = tmp_path / "out"
    done = _generate(repo, out)
    assert done.returncode == 3
    assert done.stderr.decode() == (
        f"v0.5.17         error: torch-symm-mem cannot apply: {DC}/torch_symm_mem.py: table _WORLD_SIZES_MULTIMEM "
        "(class TorchSymmMemCommunicator) has no key 10 to copy from (keys: 9, 11)\n"
    )
    assert done.stdout.decode().splitlines()[-1] == "5 tags: 3 patched, 1 nothing to patch, 0 already upstream, 1 error"
    assert sorted(p.name for p in out.iterdir()) == ["0.5.16", "0.5.3", "0.5.5"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--repo", "{tmp}/nope"], 2, "patchkit: {tmp}/nope: no such repository (set --repo or $PATCHKIT_SGLANG_REPO)\n"),
        (["--repo", "{tmp}"], 2, "patchkit: {tmp}: not a git repository\n"),
        (["--repo", "{repo}", "--tag", "v9.9.9"], 2, "patchkit: {repo}: no tag 'v9.9.9' in this repository\n"),
    ],
)
def test_bad_input(repo: Path, tmp_path: Path, args: list[str], code: int, message: str) -> None:
    (tmp_path / "empty").mkdir()
    fill = {"tmp": str(tmp_path / "empty"), "repo": str(repo)}
    done = invoke("generate", *[a.format(**fill) for a in args], "--out", str(tmp_path / "out"))
    assert done.returncode == code
    assert done.stderr.decode() == message.format(**fill)
    assert done.stdout == b""
    assert not (tmp_path / "out").exists()


def test_bad_cc_is_a_usage_error(repo: Path, tmp_path: Path) -> None:
    # sm120 is a cc now (12.0, as nvcc and SGLang's flags name it): a value that is none, in the one line of every command
    done = _generate(repo, tmp_path / "o", "--to-cc", "sm12x")
    assert done.returncode == 2
    assert done.stderr.startswith(b"patchkit: --to-cc 'sm12x' is not the compute capability of an NVIDIA GPU: ")
    assert b"Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_repo_from_environment_and_work_tree_untouched(repo: Path, tmp_path: Path) -> None:
    (repo / "untracked.txt").write_bytes(b"mine\n")
    status = git(repo, "status", "--porcelain")
    head = git(repo, "rev-parse", "HEAD")
    done = invoke("generate", "--out", str(tmp_path / "o"), env={"PATCHKIT_SGLANG_REPO": str(repo)})
    assert done.returncode == 0, done.stderr
    assert git(repo, "status", "--porcelain") == status
    assert git(repo, "rev-parse", "HEAD") == head
