"""``patchkit upstream``: one commit on a new branch, the user's state untouched, an mbox git am takes."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import threading
from pathlib import Path

import black
import pytest

from support.cli import invoke
from support.repos import DC, git, make_repo

UTILS = f"{DC}/all_reduce_utils.py"
COMM = f"{DC}/torch_symm_mem.py"
BRANCH = "patchkit/sm120-torch-symm-mem"
MBOX = "0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
NO_IDENTITY = {
    "GIT_AUTHOR_NAME": None,
    "GIT_AUTHOR_EMAIL": None,
    "GIT_COMMITTER_NAME": None,
    "GIT_COMMITTER_EMAIL": None,
    "EMAIL": None,
}


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("origin") / "sglang")


def clone(origin: Path, dest: Path, tag: str = "v0.5.5") -> Path:
    subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", "-b", "work", tag)
    git(dest, "config", "user.name", "Jane Dev")
    git(dest, "config", "user.email", "jane@example.invalid")
    return dest


def snapshot(repo: Path) -> dict:
    """Everything of the user's that upstream must leave as it was."""
    files = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "index": git(repo, "diff", "--cached"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "files": files,
    }


def dirty(repo: Path) -> None:
    (repo / "python/sglang/version.py").write_bytes(b'__version__ = "0.5.5+local"\n')
    (repo / "notes.txt").write_bytes(b"untracked\n")
    (repo / "staged.txt").write_bytes(b"staged\n")
    git(repo, "add", "staged.txt")


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def test_upstream_leaves_the_user_state_and_makes_one_commit(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    dirty(repo)
    before = snapshot(repo)
    out = tmp_path / "up"
    done = invoke("upstream", str(repo), "--out", str(out), env=NO_IDENTITY)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    head = before["head"].strip()
    assert lines[0] == f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD; HEAD {head[:12]}"
    # The DeepGEMM and self-enabled fusion fixes (on by default) have nothing to patch in 0.5.5's fixture files
    # (no configurer.py, no server_args.py): a note each, no commit.
    assert lines[1:3] == ["note: deepgemm-sm12x: nothing to patch, no commit", "note: fusion-self-enable: nothing to patch, no commit"]
    assert lines[3].startswith(f"created branch {BRANCH} at ")
    assert lines[4].startswith("  author Jane Dev <jane@example.invalid>; 2 files changed")
    assert snapshot(repo) == before
    assert sorted(branches(repo)) == sorted(["main", "work", BRANCH])
    assert not (repo / ".git/patchkit").exists()

    # Exactly one commit on top of HEAD, by the user, changing exactly what apply changes.
    assert git(repo, "rev-list", f"HEAD..{BRANCH}").split() == [git(repo, "rev-parse", BRANCH).strip()]
    assert git(repo, "rev-parse", f"{BRANCH}^").strip() == head
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", BRANCH).strip() == (
        "Jane Dev <jane@example.invalid>|Jane Dev <jane@example.invalid>"
    )
    reference = tmp_path / "ref"
    subprocess.run(["git", "clone", "-q", "-b", "v0.5.5", str(origin), str(reference)], check=True, capture_output=True)
    assert invoke("apply", str(reference)).returncode == 0
    assert git(repo, "diff", "--name-only", "HEAD", BRANCH).split() == [UTILS, COMM]
    for rel in (UTILS, COMM):
        committed = subprocess.run(["git", "-C", str(repo), "show", f"{BRANCH}:{rel}"], capture_output=True, check=True).stdout
        assert committed == (reference / rel).read_bytes()
        with pytest.raises(black.NothingChanged):
            black.format_file_contents(committed.decode(), fast=False, mode=black.Mode())

    # The message: a short subject, the body the issue asks for, DEP-3 trailers.
    text = git(repo, "log", "-1", "--format=%B", BRANCH)
    subject, blank, *body = text.splitlines()
    assert subject == "Add SM120 to the torch symm-mem all-reduce tables" and len(subject) <= 72 and blank == ""
    body_text = " ".join("\n".join(body).split())  # the effect's paragraphs are wrapped at 72
    for needle in ("KeyError: 12", "copying the SM100 entry (key 10)", "not yet tuned",
                   "Without this change, SGLang 0.5.5 fails with `KeyError: 12` in TorchSymmMemCommunicator.__init__ (torch_symm_mem.py).",
                   "It then needs multicast over NVLink (NVSwitch) between the GPUs: without it the communicator will then turn "
                   "itself off (\"torch symmetric memory multicast operations are not supported\"), and the all-reduce stays on NCCL.",
                   "it does not turn on symmetric-memory all-reduce there",
                   "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module)", "Origin: patchkit", "Forwarded: no", "Last-Update: "):
        assert needle in body_text, needle

    # git am of the mbox on a fresh clone at the same tag gives the same files.
    assert sorted(p.name for p in out.iterdir()) == [MBOX, "PR.md"]
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", "-b", "v0.5.5", str(origin), str(fresh)], check=True, capture_output=True)
    git(fresh, "am", "-q", str(out / MBOX))
    assert git(fresh, "log", "-1", "--format=%s").strip() == subject
    assert git(fresh, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", f"{BRANCH}^{{tree}}")

    pr = (out / "PR.md").read_text()
    for section in ("## Motivation", "## Modifications", "## Accuracy Tests", "## Benchmarking and Profiling", "## Checklist"):
        assert section in pr, section
    assert "| `TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES` (module) | `12` | `{2: 64 * MiB, 8: 128 * MiB}` | key `10` |" in pr
    assert "| `_WORLD_SIZES_MULTIMEM` (class TorchSymmMemCommunicator) | `12` | `[6, 8]` | key `10` |" in pr
    assert f"git diff --stat {BRANCH}" in pr
    assert "(releases 0.5.3 to\n0.5.13.post1 index the tables directly)" in pr
    assert "This base (SGLang 0.5.5) fails with `KeyError: 12` in TorchSymmMemCommunicator.__init__ (torch_symm_mem.py)." in pr
    assert "on PCIe machines the change prevents the crash (or the warning) and\nthe server starts with the all-reduce on NCCL" in pr


def test_a_run_that_waited_for_the_lock_says_how_long_and_for_which(
    origin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its line as apply's and revert's (the lock's Waited value was printed as its repr before)."""
    from patchkit.targets.transaction import Lock

    repo = clone(origin, tmp_path / "co")
    store = repo / ".git" / "patchkit"
    store.mkdir(mode=0o755)
    fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, f"{os.getpid()}\n".encode())
    holder = Lock._holder
    released = threading.Event()

    def found_held(lock: Lock) -> int | None:  # upstream found the lock held: let it go 0.2 s later
        if not released.is_set():
            released.set()
            threading.Timer(0.2, os.close, (fd,)).start()  # closing the file releases the flock
        return holder(lock)

    monkeypatch.setattr(Lock, "_holder", found_held)
    done = invoke("upstream", str(repo), "--out", str(tmp_path / "up"))
    assert released.is_set()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[1:3] == ["note: deepgemm-sm12x: nothing to patch, no commit", "note: fusion-self-enable: nothing to patch, no commit"]
    assert re.fullmatch(rf"waited [0-9]+\.[0-9]s for another patchkit run \(pid {os.getpid()}\) to finish", lines[3]), lines[3]
    assert lines[4].startswith(f"created branch {BRANCH} at ")
    assert not store.exists()  # the lock taken after the wait, and removed with the state dir


def test_existing_branch_name_is_made_unique(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    git(repo, "branch", BRANCH)
    done = invoke("upstream", str(repo), "--out", str(tmp_path / "up"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[3].startswith(f"created branch {BRANCH}-2 at ")  # after the two notes
    assert git(repo, "rev-parse", BRANCH) == git(repo, "rev-parse", "HEAD")  # the old branch untouched


def test_named_branch_and_dry_run(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    before = snapshot(repo)
    out = tmp_path / "up"
    done = invoke("upstream", str(repo), "--branch", "sm120", "--out", str(out), "--dry-run")
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert "would create branch sm120 with one commit:\n\nAdd SM120 to the torch symm-mem all-reduce tables\n\n" in text
    assert "--- PR.md ---\n## Motivation" in text
    assert snapshot(repo) == before and branches(repo) == ["main", "work"] and not out.exists()


@pytest.mark.parametrize(
    ("setup", "env", "code", "message"),
    [
        (lambda r: None, NO_IDENTITY | {"HOME": "{tmp}", "GIT_CONFIG_GLOBAL": os.devnull, "XDG_CONFIG_HOME": "{tmp}"},
         2, "patchkit: {repo}: no git identity: set it with `git config user.name \"Your Name\"` and `git config user.email you@example.com`\n"),
        (lambda r: (invoke("apply", str(r)), git(r, "commit", "-qam", "already patched")), {},
         3, "patchkit: {repo}: nothing to change at HEAD ({head}): deepgemm-sm12x: nothing to patch; fusion-self-enable: nothing to patch; "
         "torch-symm-mem: already upstream\n"),
        (lambda r: None, {}, 2, None),
    ],
    ids=["no git identity", "nothing to change", "bad branch name"],
)
def test_failures_leave_nothing_behind(origin: Path, tmp_path: Path, setup, env, code, message) -> None:
    repo = clone(origin, tmp_path / "co")
    if "no git identity" in (message or ""):
        git(repo, "config", "--unset", "user.name")
        git(repo, "config", "--unset", "user.email")
    setup(repo)
    before = snapshot(repo)
    state = sorted(p.name for p in (repo / ".git/patchkit").iterdir()) if (repo / ".git/patchkit").exists() else None
    args = ["--branch", "bad..name"] if message is None else []
    env = {k: (v.format(tmp=tmp_path) if isinstance(v, str) else v) for k, v in env.items()}
    done = invoke("upstream", str(repo), "--out", str(tmp_path / "up"), *args, env=env)
    assert done.returncode == code, done.stderr
    expected = (message or "patchkit: bad..name: not a valid branch name\n").format(
        repo=repo, head=before["head"].strip()[:12]
    )
    assert done.stderr.decode() == expected
    assert snapshot(repo) == before
    assert branches(repo) == ["main", "work"]
    assert not (tmp_path / "up").exists()
    after = sorted(p.name for p in (repo / ".git/patchkit").iterdir()) if (repo / ".git/patchkit").exists() else None
    assert after == state


def test_not_a_git_checkout(origin: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / "python/sglang").mkdir(parents=True)
    done = invoke("upstream", str(plain), "--out", str(tmp_path / "up"))
    assert done.returncode == 2
    assert done.stderr.decode() == f"patchkit: {plain}: not a git checkout: upstream needs git history to branch from\n"
    assert not (tmp_path / "up").exists()


def test_template_override(origin: Path, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "co")
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "commit-message.j2").write_text("[Blackwell] SM{{ to_cc }}0 for symm-mem ({{ files|length }} files)\n\nBody.\n")
    done = invoke("upstream", str(repo), "--out", str(tmp_path / "up"), "--templates", str(templates))
    assert done.returncode == 0, done.stderr
    assert git(repo, "log", "-1", "--format=%B", BRANCH) == "[Blackwell] SM120 for symm-mem (2 files)\n\nBody.\n\n"
    (templates / "commit-message.j2").write_text("x" * 80 + "\n")
    done = invoke("upstream", str(repo), "--out", str(tmp_path / "up2"), "--templates", str(templates))
    assert done.returncode == 2
    assert done.stderr.decode().startswith(f"patchkit: {templates}/commit-message.j2: the subject must be 1 to 72 characters, not 80")
    assert sorted(branches(repo)) == sorted(["main", "work", BRANCH])


@pytest.mark.network  # SGLang 0.5.9's real files, as the session mirror holds them
def test_a_backport_is_said_to_a_maintainer_and_messages_wrap_at_72(prebuilt, tmp_path: Path) -> None:
    """``upstream --to-cc 12.1`` on SGLang 0.5.9 (the newcomer's D11): PR.md names the upstream change the
    DeepGEMM commit backports, its title, and how it applied, not "`1 hunk` added after `in 0.5.13`"; the
    comparison says how the test reads now.  Each commit message is wrapped at 72 columns (the rationale
    too, written at 100 in its fix file), list items and trailers continued indented, one blank line apart."""
    repo = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", str(prebuilt.release("sglang", "0.5.9")), str(repo)], check=True, capture_output=True)
    git(repo, "config", "user.name", "Jane Dev")
    git(repo, "config", "user.email", "jane@example.invalid")
    out = tmp_path / "up"
    done = invoke("upstream", str(repo), "--to-cc", "12.1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    pr = (out / "PR.md").read_text()
    assert ("### 1. Keep DeepGEMM off on SM120/SM121 unless it has their APIs\n\n"
            "`python/sglang/srt/layers/deep_gemm_wrapper/configurer.py`:\n"
            "- backport of SGLang 0.5.13's change, \"DeepGEMM requires TMEM/tcgen05 (SM100+datacenter), not available on SM120\": "
            "1 hunk, applied exactly\n"
            "- `sm_version == 120` (def _compute_enable_deep_gemm): now `sm_version in (120, 121)` (121 admitted as 120 is)\n\n") in pr
    assert "added after `in 0.5.13`" not in pr

    branch = "patchkit/sm120-deepgemm-sm12x-torch-symm-mem"
    deepgemm, symm_mem = (git(repo, "log", "-1", "--format=%B", f"{branch}~{n}") for n in (1, 0))
    assert deepgemm.startswith("Keep DeepGEMM off on SM120/SM121 unless it has their APIs\n\n"
                               "SGLang enables JIT DeepGEMM on every GPU from SM90 up unless a test in\n"
                               "_compute_enable_deep_gemm() refuses it.  A DeepGEMM without the SM12x\n")
    assert ("\n\npython/sglang/srt/layers/deep_gemm_wrapper/configurer.py:\n"
            "- backport of SGLang 0.5.13's change: 1 hunk, applied exactly\n"
            "- sm_version == 120 (def _compute_enable_deep_gemm): now sm_version in\n"
            "  (120, 121) (121 admitted as 120 is)\n\n"
            "Without this change, SGLang 0.5.9 fails with RuntimeError: Assertion\n") in deepgemm
    assert ("with a DeepGEMM lacking the SM12x kernels).\n\n"
            "Rule (backport): SGLang 0.5.13's change (DeepGEMM requires TMEM/tcgen05\n"
            "  (SM100+datacenter), not available on SM120), in\n"
            "  python/sglang/srt/layers/deep_gemm_wrapper/configurer.py\n"
            "Evidence: part of upstream SGLang 0.5.13's change to configurer.py, its\n") in deepgemm
    for text in (deepgemm, symm_mem):
        assert "\n\n\n" not in text.rstrip("\n") + "\n", text
        assert [line for line in text.splitlines() if len(line) > 72] == [], text
        assert text.rstrip("\n").endswith("\nForwarded: no\nLast-Update: " + text.rstrip("\n").rsplit(": ", 1)[1])
