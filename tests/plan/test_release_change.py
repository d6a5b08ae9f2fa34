"""State belongs to the release it was written for.

In-process tests of the pure decision (``plan.release_changed``: a typed value, said by
``render.reasons``, with its code) and of the state
store (``Store.set_aside``), then the commands on git checkouts built in the test:
another tag checked out, the files restored by git, a key 12 that patchkit did not
add, stale bytecode, a read-only target with nothing to do, running processes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from patchkit.digest import sha256
from patchkit.plan.release import release_changed
from patchkit.render.reasons import code, said
from patchkit.targets.state import Store
from patchkit.types import Applied, AppliedFile, source_from_json
from support.cli import invoke, run_cli
from support.repos import DC, git, make_repo

UTILS = f"{DC}/all_reduce_utils.py"
COMM = f"{DC}/torch_symm_mem.py"


def applied(version: str | None = "0.5.9", files: dict[str, tuple[bytes, bytes]] | None = None) -> Applied:
    files = files if files is not None else {"a.py": (b"old a", b"new a"), "b.py": (b"old b", b"new b")}
    return Applied(version, source_from_json("shipped patch p"), "id", 10, 12, "0.1.0",
                   [AppliedFile(p, sha256(pre), sha256(post), []) for p, (pre, post) in files.items()])


PATCHED = {"a.py": b"new a", "b.py": b"new b"}
ORIGINAL = {"a.py": b"old a", "b.py": b"old b"}


@pytest.mark.parametrize(
    "version, current, installed, expected",
    [
        ("0.5.9", PATCHED, None, None),  # as patchkit left it
        ("0.5.9", {"a.py": b"new a", "b.py": b"edited"}, None, None),  # an edit: not another release
        ("0.5.9", {"a.py": b"old a", "b.py": b"new b"}, None, None),  # one file restored: an edit
        (None, PATCHED, None, None),  # version unknown now: judged by the files
        ("0.5.23", PATCHED, None, "SGLang 0.5.9 was patched; 0.5.23 is checked out now"),
        ("0.5.23", PATCHED, {}, "SGLang 0.5.9 was patched; 0.5.23 is installed now"),
        ("0.5.9", ORIGINAL, None, "SGLang 0.5.9 was patched; its files were restored since (they are the originals again)"),
        ("0.5.9", ORIGINAL, {}, "SGLang 0.5.9 was patched; its files were reinstalled since (they are the originals again)"),
        # a reinstall from another build of the same version: a file is what pip installed
        ("0.5.9", {"a.py": b"rebuilt", "b.py": b"new b"}, {"a.py": sha256(b"rebuilt")},
         "SGLang 0.5.9 was patched; it was reinstalled since (a.py is as pip installed it)"),
        # an edit after apply is not what pip installed
        ("0.5.9", {"a.py": b"edited", "b.py": b"new b"}, {"a.py": sha256(b"old a")}, None),
    ],
)
def test_release_changed(version, current, installed, expected) -> None:
    assert said(release_changed(applied(), current, version, installed, "SGLang")) == expected


def test_each_way_to_tell_another_release_is_a_value_with_its_code() -> None:
    """The planner returns what it saw, not a sentence: the version here, the originals again,
    a file as pip installed it; --json gives each one's code."""
    seen = [release_changed(applied(), current, version, installed, "SGLang") for version, current, installed in (
        ("0.5.23", PATCHED, {}), ("0.5.9", ORIGINAL, None), ("0.5.9", {"a.py": b"rebuilt", "b.py": b"new b"}, {"a.py": sha256(b"rebuilt")}))]
    assert [(type(r).__name__, r.recorded, r.found, r.installed, code(r)) for r in seen] == [
        ("OtherVersion", "0.5.9", "0.5.23", True, "other-version"),
        ("OriginalsAgain", "0.5.9", "0.5.9", False, "originals-again"),
        ("Reinstalled", "0.5.9", "0.5.9", True, "reinstalled"),
    ]
    assert seen[2].path == "a.py"


def test_a_state_without_a_version_is_judged_by_its_files() -> None:
    assert release_changed(applied(None), PATCHED, "0.5.9", None, "SGLang") is None
    assert said(release_changed(applied(None), ORIGINAL, "0.5.9", None, "SGLang")) == (
        "SGLang 0.5.9 was patched; its files were restored since (they are the originals again)"
    )


def _store_with_state(root: Path) -> tuple[Store, Applied]:
    store = Store(root)
    store.ensure()
    state = applied()
    for pre in (b"old a", b"old b"):
        store.put(pre)
    store.set_applied(state)
    return store, state


def test_set_aside_keeps_the_state_and_its_originals(tmp_path: Path) -> None:
    store, state = _store_with_state(tmp_path / "state")
    before = store.state_file.read_bytes()
    folder = store.set_aside(state)
    assert folder.parent == store.aside and folder.name.endswith("-0.5.9")
    assert not store.state_file.exists() and store.applied() is None
    assert (folder / "state.json").read_bytes() == before
    assert sorted(p.name for p in (folder / "objects").iterdir()) == sorted([sha256(b"old a"), sha256(b"old b")])
    assert (folder / "objects" / sha256(b"old a")).read_bytes() == b"old a"
    assert store.set_aside_states() == [folder / "state.json"]
    # A second one in the same second gets its own folder.
    store.set_applied(state)
    second = store.set_aside(state)
    assert second != folder and store.set_aside_states() == [folder / "state.json", second / "state.json"]


def test_a_killed_set_aside_is_cleared_and_the_state_kept(tmp_path: Path) -> None:
    store, state = _store_with_state(tmp_path / "state")
    half = store.aside / "20260101T000000Z-0.5.9"
    (half / "objects").mkdir(parents=True)  # killed before state.json moved
    (half / "objects" / sha256(b"old a")).write_bytes(b"old a")
    store.clean_leftovers()
    assert not half.exists()
    assert store.applied() == state


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("origin") / "sglang")


def clone(origin: Path, dest: Path, tag: str = "v0.5.5") -> Path:
    subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", tag)
    return dest


def out(done: subprocess.CompletedProcess) -> list[str]:
    assert b"Traceback" not in done.stderr
    return done.stdout.decode().splitlines()


def test_checkout_of_another_tag_sets_the_state_aside(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co", "v0.5.3")
    assert invoke("apply", str(repo)).returncode == 0
    git(repo, "checkout", "-q", "-f", "v0.5.16")
    release = {rel: (repo / rel).read_bytes() for rel in (UTILS, COMM)}
    status = out(invoke("status", str(repo)))
    assert status[3] == (
        "applied:  nothing for this release; SGLang 0.5.3 was patched; 0.5.16 is checked out now: "
        "that state no longer applies (the next apply or revert sets it aside)"
    )
    forced = invoke("revert", "--force", str(repo))
    assert forced.returncode == 3 and len(forced.stderr.splitlines()) == 1
    assert {rel: (repo / rel).read_bytes() for rel in release} == release
    done = invoke("revert", str(repo))
    assert done.returncode == 0, done.stderr
    lines = out(done)
    assert lines[1].startswith(f"SGLang 0.5.3 was patched; 0.5.16 is checked out now: the old state is set aside in {repo}/.git/patchkit/aside/")
    assert lines[-1] == "nothing to revert: nothing written"
    assert {rel: (repo / rel).read_bytes() for rel in release} == release
    assert invoke("apply", str(repo)).returncode == 0
    assert invoke("verify", str(repo)).returncode == 0
    assert invoke("revert", str(repo)).returncode == 0
    assert {rel: (repo / rel).read_bytes() for rel in release} == release
    (aside,) = (repo / ".git/patchkit/aside").glob("*/state.json")
    assert json.loads(aside.read_bytes())["version"] == "0.5.3"


def test_files_restored_by_git_are_not_an_edit(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    assert invoke("apply", str(repo)).returncode == 0
    git(repo, "checkout", "-q", "--", ".")
    assert invoke("verify", str(repo)).returncode == 1
    [planned] = json.loads(invoke("apply", str(repo), "--dry-run", "--json").stdout)["targets"]
    reason = "SGLang 0.5.5 was patched; its files were restored since (they are the originals again)"
    assert (planned["set_aside"], planned["lock"]) == ({"reason": reason, "code": "originals-again", "folder": None}, None)  # a real run would
    done = invoke("apply", str(repo))
    assert done.returncode == 0, done.stderr
    assert out(done)[1].startswith("SGLang 0.5.5 was patched; its files were restored since (they are the originals again): the old state is set aside in ")
    assert invoke("verify", str(repo)).returncode == 0
    # Only one of the two restored: apply patches it again, revert restores both.
    git(repo, "checkout", "-q", "--", UTILS)
    done = invoke("apply", str(repo))
    assert done.returncode == 0, done.stderr
    assert f"  patched {UTILS} (+4 lines)" in out(done)
    assert invoke("revert", str(repo)).returncode == 0
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_key_12_patchkit_did_not_add(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    utils = repo / UTILS
    utils.write_bytes(utils.read_bytes().replace(b"    10: {\n", b"    12: {\n        2: 1,\n    },\n    10: {\n", 1))
    assert invoke("apply", str(repo)).returncode == 0  # patches the other table
    done = invoke("verify", str(repo))
    assert done.returncode == 0, done.stdout
    assert (
        f"note: {UTILS}: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has a key 12 that patchkit did not add, left as it is: "
        "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[12] = {2: 1} differs from TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[10] = "
        "{2: 67108864, 8: 134217728}"
    ) in out(done)
    # A key 12 that patchkit added and somebody changed afterwards is a problem.
    comm = repo / COMM
    comm.write_bytes(comm.read_bytes().replace(b"        12: [6, 8],\n", b"        12: [8],\n"))
    done = invoke("verify", str(repo))
    assert done.returncode == 1
    assert (
        f"{COMM}: TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM[12] = [8] differs from "
        "TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM[10] = [6, 8]"
    ) in out(done)


def test_an_interrupted_apply_of_another_release_is_set_aside_not_finished(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co", "v0.5.3")
    killed = run_cli("apply", str(repo), env={"PATCHKIT_FAULT": "file:1"})
    assert killed.returncode == -9
    git(repo, "checkout", "-q", "-f", "v0.5.16")
    release = {rel: (repo / rel).read_bytes() for rel in (UTILS, COMM)}
    done = invoke("apply", str(repo))
    assert done.returncode == 0, done.stderr
    assert out(done)[1].startswith(f"an interrupted apply of SGLang 0.5.3 is set aside in {repo}/.git/patchkit/aside/")
    assert out(done)[1].endswith(": 0.5.16 is here now")
    assert invoke("verify", str(repo)).returncode == 0
    assert invoke("revert", str(repo)).returncode == 0
    assert {rel: (repo / rel).read_bytes() for rel in release} == release
    (journal,) = (repo / ".git/patchkit/aside").glob("*/journal.json")
    for entry in json.loads(journal.read_bytes())["files"]:
        assert (journal.parent / "objects" / entry["before"]).is_file()


def test_what_the_lock_found_is_in_the_json(origin: Path, tmp_path: Path) -> None:
    """The lines a run says of its lock are values in --json: an interrupted apply finished, one of
    another release set aside (with its folder), a state of another release set aside."""
    repo = clone(origin, tmp_path / "co", "v0.5.3")
    assert run_cli("apply", str(repo), env={"PATCHKIT_FAULT": "file:1"}).returncode == -9
    [t] = json.loads(invoke("apply", str(repo), "--json").stdout)["targets"]
    assert (t["pending"], t["action"], t["set_aside"]) == (True, "already applied", None)
    assert t["lock"] == {"waited_s": None, "waited_for_pid": None, "recovered": {"op": "apply", "finished": True, "files": 2}}

    assert run_cli("revert", str(repo), env={"PATCHKIT_FAULT": "file:1"}).returncode == -9
    git(repo, "checkout", "-q", "-f", "v0.5.16")
    [t] = json.loads(invoke("revert", str(repo), "--json").stdout)["targets"]
    (journal,) = (repo / ".git/patchkit/aside").glob("*/journal.json")
    assert t["lock"]["recovered"] == {"op": "revert", "finished": False, "release": "0.5.3", "set_aside": str(journal.parent)}
    (state,) = (repo / ".git/patchkit/aside").glob("*/state.json")
    assert t["set_aside"] == {"reason": "SGLang 0.5.3 was patched; 0.5.16 is checked out now", "code": "other-version",
                              "folder": str(state.parent)}
    assert (t["action"], t["files"], t["pending"]) == ("nothing to revert", [], True)
