"""Races with upstream: two or more patchkit processes on one checkout at once.

tests/targets/test_crash_and_race.py races apply+apply, apply+revert, apply+apply+revert and
apply+revert+verify, and checks the lock's refusal line.  This module adds upstream to
the mix (upstream takes no lock: it works from HEAD in a private index), and checks
that a run that had to wait for the lock says so.

Every round: no traceback; each run exits 0, or exits with one clear line; the
checkout ends fully original or fully patched, verify agreeing; every new branch
holds exactly one commit on HEAD with the tree apply makes; one branch per successful
upstream and none for a failed one; the user's HEAD, branch and index unchanged; no
lock, temp or scratch file left in the state dir.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path

import pytest

from support.crash import (
    BRANCH,
    FILES,
    FULL_SIZE,
    HANG_GUARD,
    TARGET,
    World,
    apply_args,
    check_verify,
    clean,
    git_state,
    leftovers,
    new_branches,
    popen,
    settled,
    state_dir,
)
from support.repos import git

RACES = [
    ("apply", "upstream"),
    ("revert", "upstream"),
    ("upstream", "upstream"),
    ("upstream", "upstream", "same --out"),
    ("apply", "upstream", "apply", "upstream"),
]
RACE_ROUNDS = (2, 3)  # per race, make test and make test-reliability; the start state alternates: original, patched, original
ROUNDS = RACE_ROUNDS[FULL_SIZE]
ONE_LINE = re.compile(rb"patchkit: [^\n]+\n")


def _mbox_commit(out: Path) -> str | None:
    mboxes = list(out.glob("*.patch")) if out.is_dir() else []
    if not mboxes:
        return None
    (mbox,) = mboxes
    return mbox.read_text().split()[1]  # "From <sha> Mon Sep 17 00:00:00 2001"


@pytest.mark.parametrize("race", RACES, ids=["+".join(r) for r in RACES])
def test_races_with_upstream(world: World, tmp_path: Path, race: tuple[str, ...]) -> None:
    w = world
    same_out = race[-1] == "same --out"
    ops = race[:-1] if same_out else race
    stats = {"upstream ok": 0, "upstream refused": 0, "apply/revert ok": 0, "apply/revert refused": 0}
    for rnd in range(ROUNDS):
        start = "original" if rnd % 2 == 0 else "patched"
        if "revert" in ops:
            start = "patched"
        repo = w.checkout(tmp_path / f"co-{rnd}", start)
        user = git_state(repo)
        head = user["head"].strip()
        outs = [tmp_path / f"up-{rnd}" if same_out else tmp_path / f"up-{rnd}-{i}" for i in range(len(ops))]
        procs = []
        for i, op in enumerate(ops):
            args = ["upstream", str(repo), "--out", str(outs[i]), "--patches", str(w.patches)] if op == "upstream" else apply_args(w, repo, op)
            procs.append(popen(*args))
        results = []
        for op, proc in zip(ops, procs, strict=True):
            out, err = proc.communicate(timeout=HANG_GUARD)
            clean((out, err, proc.returncode), f"{op} racing {ops}")
            if proc.returncode == 0:
                assert err == b"", err.decode()
            else:
                # Refused with one clear line (the lock, or a branch taken meanwhile), never a crash.
                assert proc.returncode == 3 and ONE_LINE.fullmatch(err), (op, proc.returncode, err.decode())
            results.append((op, proc.returncode, out.decode()))

        # The checkout: fully in one state, as the last writer left it.
        final = settled(repo, w)
        writers = [op for op, code, _ in results if op != "upstream" and code == 0]
        assert {TARGET[op] for op in writers} == {final} if writers else final == start, (results, final)
        check_verify(repo, w)
        assert git_state(repo)["head"] == user["head"] and git_state(repo)["branch"] == user["branch"]
        assert git_state(repo)["index"] == user["index"] and git_state(repo)["cached"] == user["cached"]
        store = state_dir(repo)
        assert leftovers(repo) == []
        assert not store.exists() or sorted(p.name for p in store.iterdir()) in ([], ["objects", "state.json"])

        # The branches: one complete branch per successful upstream, none for a refused one.
        branches = new_branches(repo)
        ok = [i for i, (op, code, _) in enumerate(results) if op == "upstream" and code == 0]
        refused = [i for i, (op, code, _) in enumerate(results) if op == "upstream" and code != 0]
        assert len(branches) == len(ok), (branches, results)
        trees = set()
        for name, sha in branches.items():
            assert name == BRANCH or re.fullmatch(re.escape(BRANCH) + r"-\d+", name), name
            assert git(repo, "rev-list", f"{head}..{sha}").split() == [sha]
            assert git(repo, "rev-parse", f"{sha}^").strip() == head
            assert git(repo, "diff", "--name-only", head, sha).split() == list(FILES)
            trees.add(git(repo, "rev-parse", f"{sha}^{{tree}}").strip())
        assert len(trees) <= 1
        for i in ok:  # each success names its own branch, and its mbox is that branch's commit
            created = [line for line in results[i][2].splitlines() if line.startswith("created branch ")]
            assert len(created) == 1
            name = created[0].split()[2]
            assert name in branches
            assert _mbox_commit(outs[i]) in set(branches.values())
            if not same_out:
                assert _mbox_commit(outs[i]) == branches[name]
        for i in refused:
            if not same_out:
                assert not outs[i].exists() or not any(outs[i].iterdir()), f"a refused upstream left {list(outs[i].iterdir())}"
        stats["upstream ok"] += len(ok)
        stats["upstream refused"] += len(refused)
        stats["apply/revert ok"] += len(writers)
        stats["apply/revert refused"] += sum(1 for op, code, _ in results if op != "upstream" and code != 0)
    print(race, stats)


def _atime_moves(path: Path) -> bool:
    """Does reading ``path`` move its access time here (not on a noatime mount)?"""
    os.utime(path, (0, os.stat(path).st_mtime))
    path.read_bytes()
    return os.stat(path).st_atime != 0


def test_a_run_that_waited_for_the_lock_says_so(world: World, tmp_path: Path) -> None:
    """Issue 6: "the loser told clearly why it waited or gave up".  Giving up is covered by
    tests/targets/test_crash_and_race.py.  Here the holder lets go once the other run has found
    the lock held: it then reads the holder's pid from the lock file, which moves the file's
    access time (set back to 0 before).  Where access times do not move, it holds 2 s."""
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    store = state_dir(repo)
    store.mkdir()
    lock = store / "lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, f"{os.getpid()}\n".encode())
    signal = _atime_moves(lock)
    os.utime(lock, (0, os.stat(lock).st_mtime))
    try:
        proc = popen(*apply_args(w, repo, "apply"), PATCHKIT_LOCK_TIMEOUT=str(HANG_GUARD))  # it must wait, not give up
        deadline = time.monotonic() + (HANG_GUARD if signal else 2)
        while proc.poll() is None and time.monotonic() < deadline and not (signal and os.stat(lock).st_atime != 0):
            time.sleep(0.005)
        assert proc.poll() is None, "apply ended while the lock was held"
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    out, err = proc.communicate(timeout=HANG_GUARD)
    clean((out, err, proc.returncode), "apply")
    assert (proc.returncode, err) == (0, b""), err.decode()
    assert settled(repo, w) == "patched"
    waited = [line for line in out.decode().splitlines() if line.startswith("waited ")]
    assert len(waited) == 1 and re.fullmatch(rf"waited \d+\.\ds for another patchkit run \(pid {os.getpid()}\) to finish", waited[0]), (
        "apply waited for the lock and did not say so in one line:\n" + out.decode()
    )
