"""Real vLLM releases from PyPI: the shipped ``patches/vllm`` series are what generate writes,
and they work.

By default three releases are fetched from their source archives (and cached, see
``support.mirror``): the first with the tables, the first keying "10.3", and the
newest.  ``make check-patches`` runs this module over every release of the full mirror
(PATCHKIT_REAL_VLLM_MIRROR=<repo>).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_real_releases import _black_clean, _checked_file, _patched, _series

from patchkit.data import shipped
from patchkit.fixes.registry import PROJECTS
from patchkit.rewrite.evaluate import tables
from support.cli import invoke
from support.mirror import VLLM_RELEASES
from support.repos import git

VLLM = PROJECTS["vllm"]

pytestmark = pytest.mark.network  # vLLM's real source archives, fetched once into the cache

SHIPPED = shipped("patches") / VLLM.patches
PATCH = "0001-Add-SM120-to-the-all-reduce-size-tables.patch"
DC = "vllm/distributed/device_communicators"
FILES = [f"{DC}/all_reduce_utils.py", f"{DC}/symm_mem.py"]


@pytest.fixture(scope="module")
def mirror(prebuilt) -> Path:
    return prebuilt.mirror("vllm")


@pytest.fixture(scope="module")
def generated(mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The series generate writes from the mirror (default fixes), and its per-tag lines."""
    out = tmp_path_factory.mktemp("generated")
    done = invoke("generate", "--project", "vllm", "--repo", str(mirror), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out, done.stdout.decode().splitlines()


def _tags(mirror: Path) -> list[str]:
    return git(mirror, "tag", "--list", "v*", "--sort=v:refname").split()


def test_every_release_is_patched_and_shipped(mirror: Path, generated) -> None:
    """Every mirrored release gets a series; the shipped ones are exactly what generate writes,
    and (over the full mirror) one release folder is shipped per release of VLLM_RELEASES."""
    out, lines = generated
    tags = _tags(mirror)
    assert tags and set(tags) <= {f"v{v}" for v in VLLM_RELEASES}
    for tag in tags:
        version = tag[1:]
        assert any(line.startswith(f"{tag} ") and " patched -> " in line for line in lines), (tag, lines)
        ours = sorted(p.name for p in (out / version).iterdir())
        theirs = sorted(p.name for p in (SHIPPED / version).iterdir()) if (SHIPPED / version).exists() else []
        assert ours == theirs == ["0001-Add-SM120-to-the-all-reduce-size-tables.patch", "manifest.json", "series"], version
        for name in ours:
            assert (out / version / name).read_bytes() == (SHIPPED / version / name).read_bytes(), (version, name)
    assert lines[-1].startswith(f"{len(tags)} tags: {len(tags)} patched, 0 nothing to patch, 0 already upstream, 0 errors")
    shipped_versions = sorted(p.name for p in SHIPPED.iterdir() if p.is_dir())
    assert sorted(shipped_versions) == sorted(VLLM_RELEASES)
    if os.environ.get("PATCHKIT_REAL_VLLM_MIRROR"):
        assert tags == [f"v{v}" for v in VLLM_RELEASES]


def test_each_patch_applies_at_its_tag(mirror: Path, tmp_path: Path) -> None:
    """Each shipped patch applies at its tag (git apply, and patch -p1 to the same bytes), only
    adds lines, compiles, keeps black-clean files clean, and gives every table's "12.0" the
    value of its "10.0" (three tables in two files, whatever else the release keys)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(mirror), str(clone)], check=True)
    black_clean = 0  # files black-clean before the patch (0.10.2 and 0.11.0 are not)
    for tag in _tags(mirror):
        (patch,) = _series(SHIPPED / tag[1:])
        assert patch.name == PATCH, tag
        git(clone, "checkout", "-q", "-f", tag)
        numstat = _patched(clone, patch)
        assert sorted(path for _, _, path in numstat) == FILES, (tag, numstat)
        assert all(removed == "0" for _, removed, _ in numstat), (tag, numstat)
        names = []
        for path in FILES:
            black_clean += _black_clean(git(clone, "show", f"HEAD:{path}").encode())
            found = tables(_checked_file(clone, path, tag), VLLM.tables, path)
            assert found, (tag, path)
            for name, table in found.items():
                assert table["12.0"] == table["10.0"], (tag, path, name)
                names.append(name)
        assert sorted(names) == [
            "CUSTOM_ALL_REDUCE_MAX_SIZES", "SYMM_MEM_ALL_REDUCE_MAX_SIZES", "SymmMemCommunicator._WORLD_SIZES_MULTIMEM"
        ], tag
        by_git = {path: (clone / path).read_bytes() for path in FILES}
        git(clone, "checkout", "-q", "-f", tag)
        subprocess.run(["patch", "-p1", "-s", "-i", str(patch)], cwd=clone, check=True)
        assert {path: (clone / path).read_bytes() for path in FILES} == by_git, tag
    assert black_clean >= 2  # the black check held something


def test_apply_cycle_on_a_real_checkout(mirror: Path, tmp_path: Path) -> None:
    """A checkout of a real vLLM release with bytecode: apply takes the shipped series,
    verify exits 0, revert gives back the release's exact bytes."""
    import compileall

    tag = "v0.19.0" if "v0.19.0" in _tags(mirror) else _tags(mirror)[-1]
    repo = tmp_path / "vllm"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(repo)], check=True, capture_output=True)
    assert compileall.compile_dir(repo / DC, quiet=1)
    original = {path: (repo / path).read_bytes() for path in FILES}
    assert invoke("verify", str(repo), "--fix", "torch-symm-mem").returncode == 1

    done = invoke("apply", str(repo), "--project", "vllm", "--fix", "torch-symm-mem")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{repo}: vLLM {tag[1:]}, tag {tag} at HEAD"
    assert lines[1] == f"applied shipped patch patches/vllm/{tag[1:]}/{PATCH}"
    assert sorted(git(repo, "diff", "--name-only").split()) == FILES
    reference = tmp_path / "reference"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(reference)], check=True, capture_output=True)
    git(reference, "apply", str(SHIPPED / tag[1:] / PATCH))
    assert {p: (repo / p).read_bytes() for p in FILES} == {p: (reference / p).read_bytes() for p in FILES}

    verified = invoke("verify", str(repo), "--fix", "torch-symm-mem")
    assert verified.returncode == 0, verified.stdout
    assert invoke("apply", str(repo), "--project", "vllm", "--fix", "torch-symm-mem").stdout.decode().splitlines()[-1].startswith("already applied")
    reverted = invoke("revert", str(repo))
    assert reverted.returncode == 0, reverted.stderr
    assert {path: (repo / path).read_bytes() for path in FILES} == original
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert invoke("verify", str(repo), "--fix", "torch-symm-mem").returncode == 1
