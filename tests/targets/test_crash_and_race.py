"""Kills and races: apply and revert of the shipped patch SIGKILLed at every step and
inside each atomic write, a recovery that must not clobber a hand edit, the lock, and
concurrent runs.

Every run that is killed or raced is a separate process (``python -m patchkit``) on a git
checkout built in the test; the commands that look at what it left run in this process
(support.crash.pk).  After each interruption the next apply or revert must leave the
checkout fully original (the tag's exact bytes) or fully patched (the shipped patch's
exact bytes, key 12 = key 10 in both tables), with the state dir agreeing and no
journal, lock or temp file left behind; its exact lines are checked.  Kills at random
instants are in tests/reliability/test_kills.py.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.crash import (
    COMM,
    FILES,
    HANG_GUARD,
    POINTS,
    UTILS,
    World,
    after_kill,
    apply_args,
    check_interrupted,
    check_next,
    check_verify,
    clean,
    digest,
    env,
    leftovers,
    lines,
    pk,
    popen,
    pyc_of,
    revert_to_original,
    run,
    settled,
    state_dir,
)
from support.repos import symm_effect

LOCK_LINE = re.compile(
    r"patchkit: (?P<root>.+): another patchkit run( \(pid \d+\))? is working on this checkout; "
    r"gave up waiting after (?P<timeout>[0-9.]+)s\n"
)


def next_lines(w: World, repo: Path, command: str, finished: str | None, found: str, pycs: int) -> list[str]:
    """The exact output of ``command`` run on files that are ``found`` once any recovery is ``finished``."""
    out = [
        f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD",
        *([f"finished an interrupted {finished} (2 files)"] if finished else []),
    ]
    if command == "apply" and found == "patched":
        return out + [f"already applied (shipped patch {w.label}): nothing written"]
    if command == "revert" and found == "original":
        return out + ["note: the files hold the original release", "nothing to revert: nothing written"]
    if command == "apply":
        out += [
            f"applied shipped patch {w.label}",
            f"  patched {UTILS} (+4 lines)",
            f"  patched {COMM} (+1 line)",
            "  TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): key 12 = key 10",
            "  _WORLD_SIZES_MULTIMEM (class TorchSymmMemCommunicator): key 12 = key 10",
            symm_effect("SGLang", "0.5.5"),
        ]
    else:
        out += [f"reverted shipped patch {w.label}"] + [
            f"  restored {rel} (sha256 {digest(w.images['original'][rel])[:12]})" for rel in FILES
        ]
    return out + [f"dropped {pycs} cached bytecode file{'s' if pycs != 1 else ''}"]


# -- 1. every fault point ------------------------------------------------------------


@pytest.mark.parametrize("then", ["apply", "revert"])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_kill_at_each_fault_point_then_finish(world: World, tmp_path: Path, op: str, point: str, then: str) -> None:
    w = world
    start = "original" if op == "apply" else "patched"
    repo = w.checkout(tmp_path / "co", start)

    done = run(*apply_args(w, repo, op), PATCHKIT_FAULT=point)
    assert done.returncode == -signal.SIGKILL
    # Exactly what the transaction had done when it was killed.
    journal = after_kill(w, repo, start, op, point)

    # verify: never 0 with a transaction pending (and so never while half-patched).
    code = check_verify(repo, w)
    assert code == (1 if journal or start == "original" else 0)
    if then == "apply":
        status = pk("status", str(repo), "--patches", str(w.patches))
        assert status.returncode == 0
        pending = f"pending:  an interrupted {op} (the next apply or revert finishes it)" if journal else "pending:  no interrupted transaction"
        assert lines(status)[-1] == pending

    # Rolled forward if the journal was written, else never begun; then the next command does its own work.
    found = ("patched" if op == "apply" else "original") if journal else start
    pycs = sum(pyc_of(repo, rel).exists() for rel in FILES) if not journal else 0  # a recovery drops them
    expected = next_lines(w, repo, then, op if journal else None, found, pycs)
    state = check_next(w, repo, then, journal, expected)
    if state == "patched":  # a next revert was the revert after it all already
        revert_to_original(w, repo)


# -- the exact lines of a finished recovery ---------------------------------------


def test_recovery_lines_are_exact(world: World, tmp_path: Path) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    assert run(*apply_args(w, repo, "apply"), PATCHKIT_FAULT="file:1").returncode == -9
    done = pk(*apply_args(w, repo, "revert"))
    restored = [f"  restored {rel} (sha256 {digest(w.images['original'][rel])[:12]})" for rel in FILES]
    assert (done.returncode, done.stderr) == (0, b"")
    assert lines(done) == [
        f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD",
        "finished an interrupted apply (2 files)",
        f"reverted shipped patch {w.label}",
        *restored,
        "dropped 0 cached bytecode files",  # the recovery dropped them already
    ]
    assert settled(repo, w) == "original"
    assert run(*apply_args(w, repo, "apply"), PATCHKIT_FAULT="state").returncode == -9
    done = pk(*apply_args(w, repo, "apply"))
    assert lines(done) == [
        f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD",
        "finished an interrupted apply (2 files)",
        f"already applied (shipped patch {w.label}): nothing written",
    ]
    assert settled(repo, w) == "patched"


@pytest.mark.parametrize("second,then", [("state", "revert"), ("bytecode", "apply")])
def test_a_kill_during_recovery_is_recovered_too(world: World, tmp_path: Path, second: str, then: str) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    assert run(*apply_args(w, repo, "apply"), PATCHKIT_FAULT="file:1").returncode == -9
    # The next run finishes the first file's partner, then is killed too, inside the recovery.
    assert run(*apply_args(w, repo, "revert"), PATCHKIT_FAULT=second).returncode == -9
    assert w.state_of(repo) == "patched"
    assert (state_dir(repo) / "journal.json").exists()
    assert check_interrupted(repo, w)
    assert check_next(w, repo, then, True) == ("patched" if then == "apply" else "original")
    revert_to_original(w, repo)


# -- a kill inside an atomic write ---------------------------------------------------

# Runs patchkit with os.replace wrapped: the process SIGKILLs itself just before the
# rename that would put the named file in place (its temp file written and fsynced).
KILL_BEFORE_RENAME = r"""
import os, signal, sys
target = sys.argv.pop(1)
real = os.replace
def replace(src, dst, *args, **kwargs):
    dst = os.fspath(dst)
    if kwargs.get("dst_dir_fd") is not None:  # renamed relative to its folder's descriptor
        dst = os.path.join(os.readlink(f"/proc/self/fd/{kwargs['dst_dir_fd']}"), dst)
    name = "objects/" if os.path.basename(os.path.dirname(dst)) == "objects" else os.path.basename(dst)
    if name == target:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
from patchkit.cli import main
main()
"""


@pytest.mark.parametrize("then", ["apply", "revert"])
@pytest.mark.parametrize(
    "op,target",
    [
        ("apply", "objects/"),
        ("apply", "journal.json"),
        ("apply", "all_reduce_utils.py"),
        ("apply", "state.json"),
        ("revert", "journal.json"),
        ("revert", "all_reduce_utils.py"),
    ],
)
def test_kill_inside_an_atomic_write_leaves_no_temp_file(
    world: World, tmp_path: Path, op: str, target: str, then: str
) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original" if op == "apply" else "patched")
    done = subprocess.run(
        [sys.executable, "-c", KILL_BEFORE_RENAME, target, *apply_args(w, repo, op)], env=env(), capture_output=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert len(leftovers(repo)) == 1  # the temp file of the rename that never happened
    pending = check_interrupted(repo, w)
    assert pending == (target in ("all_reduce_utils.py", "state.json"))
    check_next(w, repo, then, pending)  # settled(): no temp file may be left anywhere


# -- 3. recovery refuses to clobber a hand edit ------------------------------------


def test_recovery_refuses_to_overwrite_a_file_edited_meanwhile(world: World, tmp_path: Path) -> None:
    w = world
    orig, post = w.images["original"], w.images["patched"]
    repo = w.checkout(tmp_path / "co", "original")
    store = state_dir(repo)
    assert run(*apply_args(w, repo, "apply"), PATCHKIT_FAULT="file:1").returncode == -9
    assert (repo / UTILS).read_bytes() == post[UTILS]
    assert (repo / COMM).read_bytes() == orig[COMM]
    edited = orig[COMM].replace(b"10: [6, 8]", b"10: [2, 4, 6, 8]")
    assert edited != orig[COMM]
    (repo / COMM).write_bytes(edited)
    journal = (store / "journal.json").read_bytes()
    message = (
        f"patchkit: {repo}/{COMM}: changed during an interrupted apply; patchkit will not overwrite it "
        f"(the journal is {store}/journal.json)\n"
    ).encode()

    for command in ("apply", "revert"):
        done = pk(*apply_args(w, repo, command))
        assert (done.returncode, done.stdout, done.stderr) == (3, b"", message), done.stderr
        assert (repo / COMM).read_bytes() == edited
        assert (repo / UTILS).read_bytes() == post[UTILS]
        assert (store / "journal.json").read_bytes() == journal  # still pending
        assert not (store / "lock").exists()
        assert leftovers(repo) == []
    done = pk("verify", str(repo))
    assert done.returncode == 1
    assert (
        f"{store}/journal.json: an interrupted transaction is pending; run `patchkit apply` or `patchkit revert` to finish it"
        in lines(done)
    )

    # Put the file back as it was: the interrupted apply can now be finished.
    (repo / COMM).write_bytes(orig[COMM])
    check_next(w, repo, "apply", True)
    revert_to_original(w, repo)


# -- 4. the lock ----------------------------------------------------------------------


def test_a_held_lock_is_refused_with_one_line(world: World, tmp_path: Path) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    store = state_dir(repo)
    store.mkdir()
    fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        stamps = {rel: os.stat(repo / rel).st_mtime_ns for rel in FILES}
        for command in ("apply", "revert"):
            t0 = time.monotonic()
            done = pk(*apply_args(w, repo, command), PATCHKIT_LOCK_TIMEOUT="0.5")
            took = time.monotonic() - t0
            assert (done.returncode, done.stdout) == (3, b"")
            assert done.stderr.decode() == (
                f"patchkit: {repo}: another patchkit run (pid {os.getpid()}) is working on this checkout; "
                "gave up waiting after 0.5s\n"
            )
            assert 0.5 <= took < HANG_GUARD  # it waited the timeout out (the upper bound only catches a hang)
            assert {rel: (repo / rel).read_bytes() for rel in FILES} == w.images["original"]
            assert {rel: os.stat(repo / rel).st_mtime_ns for rel in FILES} == stamps
            assert sorted(p.name for p in store.iterdir()) == ["lock"]
            assert (store / "lock").read_bytes() == f"{os.getpid()}\n".encode()
        # verify only reads: it does not wait for the lock.
        assert check_verify(repo, w) == 1
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    # Released (its file still there, as a killed holder leaves it): apply works and removes it.
    done = pk(*apply_args(w, repo, "apply"), PATCHKIT_LOCK_TIMEOUT="0.5")
    assert (done.returncode, done.stderr) == (0, b"")
    assert lines(done)[1] == f"applied shipped patch {w.label}"
    assert settled(repo, w) == "patched"
    assert not (store / "lock").exists()


# -- 5. races ----------------------------------------------------------------------------


def _effect(op: str, out: list[str]) -> str:
    """What a finished run says it did: "write" or "noop"."""
    if op == "apply":
        if any(line.startswith("applied shipped patch ") for line in out):
            return "write"
        assert any(line.startswith("already applied ") for line in out), out
        return "noop"
    if any(line.startswith("reverted shipped patch ") for line in out):
        return "write"
    assert out[-1] == "nothing to revert: nothing written", out
    return "noop"


def _serialisable(start: str, runs: list[tuple[str, str]], final: str) -> bool:
    """Is there an order of the runs that, one at a time, says what each said and ends in ``final``?"""
    for order in itertools.permutations(runs):
        kind, ok = start, True
        for op, effect in order:
            if effect == "refused":
                continue
            want = "original" if op == "revert" else "patched"
            ok = ok and effect == ("noop" if kind == want else "write")
            kind = want
        if ok and kind == final:
            return True
    return False


RACES = [("apply", "apply"), ("apply", "revert"), ("apply", "apply", "revert"), ("apply", "revert", "verify")]
ROUNDS = 3  # per race; the start state alternates: original, patched, original


@pytest.mark.parametrize("ops", RACES, ids="+".join)
def test_concurrent_runs_serialise(world: World, tmp_path: Path, ops: tuple[str, ...]) -> None:
    w = world
    for rnd in range(ROUNDS):
        start = "original" if rnd % 2 == 0 else "patched"
        repo = w.checkout(tmp_path / f"co-{rnd}", start)
        procs = [popen(*(apply_args(w, repo, op) if op != "verify" else ["verify", str(repo)])) for op in ops]
        runs = []
        for op, proc in zip(ops, procs, strict=True):
            out, err = proc.communicate(timeout=HANG_GUARD)
            clean((out, err, proc.returncode), op)
            if op == "verify":  # takes no lock: may see either side of a transaction, never fails
                assert proc.returncode in (0, 1) and err == b"", err.decode()
                assert out.decode().splitlines()[-1].startswith("verify: "), out
                continue
            if proc.returncode == 3:
                match = LOCK_LINE.fullmatch(err.decode())
                assert match and match["root"] == str(repo), err.decode()
                runs.append((op, "refused"))
                continue
            assert (proc.returncode, err) == (0, b""), err.decode()
            text = out.decode().splitlines()
            assert not any(line.startswith("finished an interrupted") for line in text)
            runs.append((op, _effect(op, text)))
        final = settled(repo, w)
        assert check_verify(repo, w) == (0 if final == "patched" else 1)
        assert _serialisable(start, runs, final), (start, runs, final)
        if final == "patched":
            revert_to_original(w, repo)


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_state_ended_between_two_reads_is_read_again_under_the_lock(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """apply and revert read the state, then its originals, without the lock.  A revert that runs to its
    end in between prunes those originals: the apply+apply+revert race above once refused "its original
    bytes are missing from .../objects" (exit 3).  Such a read is not tidy: the run reads again under the
    lock and does what it would do after that revert."""
    from patchkit.targets.state import Store

    w = world
    repo = w.checkout(tmp_path / "co", "patched")
    get = Store.get

    def revert_meanwhile(store: Store, digest: str) -> bytes | None:
        monkeypatch.setattr(Store, "get", get)  # once: the first original read, without the lock
        assert run(*apply_args(w, repo, "revert")).returncode == 0  # another process, to its end
        return get(store, digest)

    monkeypatch.setattr(Store, "get", revert_meanwhile)
    done = pk(*apply_args(w, repo, op))
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert Store.get is get  # the read it raced with happened
    if op == "apply":
        assert lines(done)[1].startswith("applied shipped patch "), lines(done)
        assert settled(repo, w) == "patched"
        revert_to_original(w, repo)
    else:
        assert lines(done)[-1] == "nothing to revert: nothing written", lines(done)
        assert settled(repo, w) == "original"
