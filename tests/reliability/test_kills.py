"""SIGKILL of apply, revert and upstream: at every write boundary and at random instants.

tests/targets/test_crash_and_race.py kills apply and revert of the shipped patch on a git
checkout at each fault point and inside each atomic write, and checks their exact lines.
This module adds what it does not cover, and scales with $PATCHKIT_KILLS:

1. every fault point (PATCHKIT_FAULT) of five more transactions: another cc pair
   generated from the checkout, the replacement of one applied patch by another,
   ``revert --force`` over a hand edit, and apply and revert in a plain folder;
2. upstream killed before each of its git commands and file renames (it has no fault
   hook: a wrapper around GitPython and os.replace kills it); the default budget kills it
   before every third step, the first and the last included (``upstream_kill_steps``);
3. chains of fault-hook kills over three states (original, 10 -> 12, 9 -> 11), kills
   of the recovery itself included;
4. apply and revert killed at random instants (git checkout and plain folder at once):
   anywhere in the run, counted from the lock, or inside the transaction;
5. upstream killed at random instants, the process alone or its whole process group.

Every killed run is a separate process: the kills at a fault point or before a step (1, 2 and 3) a
process forked from one that has imported patchkit's command line (support.forked: no run pays
Python's start-up; for 2, with upstream's steps wrapped), the kills at random instants ``python -m
patchkit`` itself, start-up included.  The commands after it run in this process
(support.crash.pk).  After each kill: a half-patched checkout only with a journal, and
then verify says 1 (every line of it checked); the next command finishes the
transaction; the checkout ends fully in one state, state.json agreeing, verify
agreeing, no journal, lock or temp file left.  For upstream: the user's HEAD, branch,
index and work tree unchanged, no branch or one complete branch of one commit, no lock
file in .git but in the scratch folder the next command removes, and no scratch folder
surviving the next command.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.crash import (
    BRANCH,
    COMM,
    FILES,
    FULL_KILLS,
    HANG_GUARD,
    POINTS,
    TARGET,
    World,
    after_kill,
    apply_args,
    check_interrupted,
    check_verify,
    clean,
    compile_pycs,
    env,
    git_state,
    kills_budget,
    leftovers,
    lines,
    new_branches,
    pk,
    popen,
    record,
    settled,
    state_dir,
    wait_for,
    wait_group,
    work_tree,
)
from support.forked import Forks
from support.repos import git

# -- what runs, and how many kills (docs/RELIABILITY.md is checked against these) -----------

# transition -> (kind of checkout, state it starts in, command)
TRANSITIONS = {
    "apply 9->11 generated (git)": ("git", "original", "apply911"),
    "apply replacing 9->11 (git)": ("git", "other", "apply"),
    "revert --force over an edit (git)": ("git", "edited", "revert-force"),
    "apply (plain folder)": ("plain", "original", "apply"),
    "revert (plain folder)": ("plain", "patched", "revert"),
}
BOUNDARY_CASES = [(t, p) for t in TRANSITIONS for p in POINTS]

# The steps of one upstream run, in order: each git command GitPython runs and each rename
# of an atomic write.  test_kill_upstream_before_each_step kills it before each one.
UPSTREAM_STEPS = (
    "git cat-file",
    "git cat-file",
    "git check-ref-format",
    "git read-tree",
    "git ls-tree",
    "git hash-object",
    "git update-index",
    "git ls-tree",
    "git hash-object",
    "git update-index",
    "git write-tree",
    "git commit-tree",
    "git update-ref",
    "git format-patch",
    "rename 0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch",
    "rename PR.md",
)

DEFAULT_KILLS = 48  # make test: the fixed kills, MIN_RANDOM of each random kind; make test-reliability sets PATCHKIT_KILLS
MIN_RANDOM = 4  # each random kind gets at least this many kills
STEP_STRIDE = 3  # below FULL_KILLS, upstream is killed before every third of its steps
SEED = 20261129


BOUNDARY = "apply/revert at every fault point of 5 more transactions"
STEPS = f"upstream before its steps: every third, the last included (each one from {FULL_KILLS} kills on)"
CHAINS = "apply/revert: chains of fault-hook kills, recoveries included"
TIMED = "apply/revert at random instants (git and plain folder)"
UPSTREAM_RANDOM = "upstream at random instants (process or process group)"


def upstream_kill_steps(total: int) -> list[int]:
    """The steps (1 for the first) upstream is killed before: each one from FULL_KILLS kills on
    (make test-reliability); below, every third, the first and the last included: 1, 4, 7, 10, 13
    (its update-ref: no branch yet) and 16 (the branch made, the mbox written, PR.md's rename left)."""
    steps = range(1, len(UPSTREAM_STEPS) + 1)
    return list(steps) if total >= FULL_KILLS else sorted({*steps[::STEP_STRIDE], steps[-1]})


def kill_plan(total: int) -> dict[str, int]:
    """How ``total`` kills are spread: the fixed boundary kills first, the rest at random."""
    fixed = {BOUNDARY: len(BOUNDARY_CASES), STEPS: len(upstream_kill_steps(total))}
    rest = max(total - sum(fixed.values()), 3 * MIN_RANDOM)
    upstream = max(MIN_RANDOM, rest * 2 // 5)
    chains = max(MIN_RANDOM, (rest - upstream) // 2)
    timed = max(MIN_RANDOM, rest - upstream - chains)
    return {**fixed, CHAINS: chains, TIMED: timed, UPSTREAM_RANDOM: upstream}


PLAN = kill_plan(kills_budget(DEFAULT_KILLS))
UPSTREAM_KILL_STEPS = upstream_kill_steps(kills_budget(DEFAULT_KILLS))


@pytest.fixture(scope="module")
def forks():
    """What the runs killed at a fault point are forked from (support.forked)."""
    runner = Forks(env(), HANG_GUARD, ("apply", "revert"))
    yield runner
    runner.close()


def _faulted(forks: Forks, args: list[str], point: str) -> subprocess.CompletedProcess:
    """``patchkit ARGS`` with PATCHKIT_FAULT=point, a process of its own: killed there, or done."""
    done = forks.run(args, {"PATCHKIT_FAULT": point})
    assert done.returncode is not None, f"{args[0]} still running after {HANG_GUARD}s"
    clean(done, args[0])
    return done


# -- 1. every fault point of five more transactions ---------------------------------------


def _boundary(w: World, forks: Forks, tmp_path: Path, transition: str, point: str) -> None:
    kind, start, command = TRANSITIONS[transition]
    repo = w.checkout(tmp_path / f"co-{point.replace(':', '')}", start, kind)
    done = _faulted(forks, apply_args(w, repo, command), point)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    journal = after_kill(w, repo, start, command, point)
    assert check_verify(repo, w) == (1 if journal or start == "original" else 0)

    # The next command finishes the transaction (roll forward), then does its own work.
    found = TARGET[command] if journal else start
    then = ("apply", "revert")[POINTS.index(point) % 2]
    done = pk(*apply_args(w, repo, then))
    if then == "apply" and found == "edited":
        # Never begun: the hand edit is still there, and apply refuses to build on it.
        assert done.returncode == 3 and b"edited after patchkit applied" in done.stderr, done.stderr
        assert w.state_of(repo) == "edited"
        done = pk(*apply_args(w, repo, "revert-force"))
        then = "revert-force"
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    finished = [line for line in lines(done) if line.startswith("finished an interrupted ")]
    assert len(finished) == journal, lines(done)
    assert settled(repo, w) == TARGET[then]
    check_verify(repo, w)


@pytest.mark.parametrize("transition", TRANSITIONS)
def test_kill_at_every_write_boundary(world: World, forks: Forks, tmp_path: Path, transition: str) -> None:
    """One kill at each fault point of the transaction (two at a time: two cores)."""

    def one(point: str) -> str | None:
        try:
            _boundary(world, forks, tmp_path, transition, point)
        except AssertionError as exc:
            return f"killed at {point}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(one, POINTS) if f]
    assert not failures, "\n\n".join(failures)


# -- 2. upstream killed before each of its steps ----------------------------------------------

# What the runs of upstream are forked from wraps GitPython's Git.execute and os.replace, before
# patchkit is imported (support.forked: each run a process of its own, in a session of its own, as
# ``python -m patchkit`` with this wrapper was).  PATCHKIT_TEST_STEP="record LOG" appends each step
# to LOG; "kill K" SIGKILLs the run just before its step K.
STEP_WRAPPER = r"""
import os, signal
count = 0
def step(name):
    global count
    count += 1
    mode, _, arg = os.environ.get("PATCHKIT_TEST_STEP", "").partition(" ")
    if mode == "record":
        with open(arg, "a") as f:
            f.write(name + "\n")
    elif mode == "kill" and count == int(arg):
        os.kill(os.getpid(), signal.SIGKILL)
import git.cmd
real_execute = git.cmd.Git.execute
def execute(self, command, *args, **kwargs):
    words = [str(c) for c in (command if isinstance(command, (list, tuple)) else [command])[1:]]
    words = [c for c in words if not c.startswith("-")]
    step("git " + (words[0] if words else "?"))
    return real_execute(self, command, *args, **kwargs)
git.cmd.Git.execute = execute
real_replace = os.replace
def replace(src, dst, *args, **kwargs):
    step("rename " + os.path.basename(os.fspath(dst)))
    return real_replace(src, dst, *args, **kwargs)
os.replace = replace
"""


def _dirty(repo: Path) -> None:
    """A user's checkout mid-work: an unstaged edit, a staged file, an untracked file."""
    for cache in repo.rglob("__pycache__"):  # apply and revert drop bytecode: keep the work tree comparable
        shutil.rmtree(cache)
    (repo / "python/sglang/version.py").write_bytes(b'__version__ = "0.5.5"  # local\n')
    (repo / "notes.txt").write_bytes(b"untracked\n")
    (repo / "staged.txt").write_bytes(b"staged\n")
    git(repo, "add", "staged.txt")


def _git_locks(repo: Path) -> list[str]:
    return sorted(str(p.relative_to(repo)) for p in (repo / ".git").rglob("*.lock"))


def _scratch(repo: Path) -> list[str]:
    store = repo / ".git" / "patchkit"
    return sorted(p.name for p in store.glob("upstream-*")) if store.is_dir() else []


class UpstreamChecks:
    """The invariants of a killed upstream; breaches of the promises that a later command
    cleans up are collected (and asserted at the end), everything else is asserted at once."""

    def __init__(self, w: World, repo: Path, out: Path) -> None:
        self.repo, self.out = repo, out
        self.user = git_state(repo)
        self.files = work_tree(repo)
        self.head = self.user["head"].strip()
        self.tree = None  # the tree every upstream commit must have, from the first success
        self.breaches: list[str] = []
        self.stats = {"kills": 0, "scratch left by the kill": 0, "branch complete": 0, "no branch": 0}

    def branch_ok(self, name: str, sha: str) -> None:
        repo = self.repo
        assert git(repo, "rev-list", f"{self.head}..{sha}").split() == [sha], f"{name}: not exactly one commit"
        assert git(repo, "rev-parse", f"{sha}^").strip() == self.head
        tree = git(repo, "rev-parse", f"{sha}^{{tree}}").strip()
        self.tree = self.tree or tree
        assert tree == self.tree, f"{name}: another tree"
        assert git(repo, "diff", "--name-only", self.head, sha).split() == list(FILES)

    def after_kill(self, what: str) -> dict[str, str]:
        repo = self.repo
        assert git_state(repo) == self.user, f"{what}: the user's git state changed"
        assert work_tree(repo) == self.files, f"{what}: the work tree changed"
        locks = _git_locks(repo)
        # A git killed inside update-ref leaves its ref's lock, as git itself does on a crash
        # (test_upstream_after_a_killed_git_left_a_ref_lock covers what upstream then says).
        ref_locks = [lock for lock in locks if lock.startswith(".git/refs/heads/patchkit/")]
        # A git killed while it writes upstream's private index (read-tree, update-index) leaves
        # index.lock in the scratch folder: part of that folder, which the next command removes
        # (next_command checks that no scratch folder survives it).
        scratch_locks = [lock for lock in locks if re.fullmatch(r"\.git/patchkit/upstream-\d+/index\.lock", lock)]
        assert sorted(set(locks) - set(ref_locks) - set(scratch_locks)) == [], f"{what}: lock files left in .git: {locks}"
        for lock in ref_locks:
            (repo / lock).unlink()
        for name, n in (("ref lock left by a killed git", len(ref_locks)), ("index lock left in the scratch folder", len(scratch_locks))):
            self.stats[name] = self.stats.get(name, 0) + n
        assert leftovers(repo) == [], f"{what}: temp files left: {leftovers(repo)}"
        new = new_branches(repo)
        assert set(new) <= {BRANCH}, f"{what}: unexpected branches {new}"
        for name, sha in new.items():
            self.branch_ok(name, sha)
        self.stats["branch complete" if new else "no branch"] += 1
        self.stats["scratch left by the kill"] += bool(_scratch(repo))
        return new

    def next_command(self, what: str, command: str, patches: Path) -> None:
        """Run the next patchkit command: the killed run's scratch folder must not survive it."""
        repo = self.repo
        before = set(new_branches(repo))
        if command == "upstream":
            done = pk("upstream", str(repo), "--out", str(self.out), "--patches", str(patches))
            assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
            made = set(new_branches(repo)) - before
            assert len(made) == 1, made
            name = made.pop()
            self.branch_ok(name, new_branches(repo)[name])
            # The synthetic releases have no DeepGEMM gate (configurer.py) and no server_args.py: those
            # fixes make no commit.
            assert lines(done)[1:3] == ["note: deepgemm-sm12x: nothing to patch, no commit",
                                        "note: fusion-self-enable: nothing to patch, no commit"]
            assert lines(done)[3].startswith(f"created branch {name} at ")
            temps = sorted(p.name for p in self.out.iterdir() if p.name.endswith(".patchkit-tmp"))
            if temps:
                self.breaches.append(f"{what}: temp files left in --out after the next upstream: {temps}")
        else:  # apply then revert: the user's files come back byte for byte
            for step in ("apply", "revert"):
                done = pk(step, str(repo), "--patches", str(patches))
                assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
            assert work_tree(repo) == self.files
            store = repo / ".git" / "patchkit"
            assert not (store / "state.json").exists() and not (store / "lock").exists()
        assert git_state(repo) == self.user
        left = _scratch(repo)
        if left:
            self.breaches.append(f"{what}: .git/patchkit/{left} survived the next command ({command})")
            for name in left:  # measured once; go on from a clean state dir
                shutil.rmtree(repo / ".git" / "patchkit" / name)
        for name in new_branches(repo):  # start the next round without patchkit branches
            git(repo, "update-ref", "-d", f"refs/heads/{name}")
        store = repo / ".git" / "patchkit"
        if store.is_dir() and not any(store.iterdir()):
            store.rmdir()


def _record_steps(w: World, runs: Forks, tmp_path: Path) -> list[str]:
    repo = w.checkout(tmp_path / "record", "original")
    log = tmp_path / "steps.log"
    done = runs.run(["upstream", str(repo), "--out", str(tmp_path / "record-out"), "--patches", str(w.patches)],
                    {"PATCHKIT_TEST_STEP": f"record {log}"}, session=True)
    assert done.returncode == 0, done.stderr.decode()
    return log.read_text().splitlines()


@pytest.fixture
def step_runs():
    """What the runs of upstream with STEP_WRAPPER are forked from."""
    runner = Forks(env(), HANG_GUARD, ("upstream",), preamble=STEP_WRAPPER)
    yield runner
    runner.close()


def test_kill_upstream_before_each_step(world: World, step_runs: Forks, tmp_path: Path) -> None:
    w = world
    steps = _record_steps(w, step_runs, tmp_path)
    assert tuple(steps) == UPSTREAM_STEPS, (
        "upstream's steps changed: update UPSTREAM_STEPS (and docs/RELIABILITY.md) to\n" + "\n".join(steps)
    )

    def one(k: int) -> tuple[dict, list[str]]:
        repo = w.checkout(tmp_path / f"co-{k}", "original")
        _dirty(repo)
        out = tmp_path / f"up-{k}"
        checks = UpstreamChecks(w, repo, out)
        done = step_runs.run(["upstream", str(repo), "--out", str(out), "--patches", str(w.patches)],
                             {"PATCHKIT_TEST_STEP": f"kill {k}"}, session=True)  # answered once its git children are done
        assert done.returncode == -signal.SIGKILL, (k, done.stderr.decode())
        what = f"killed before step {k} ({steps[k - 1]})"
        new = checks.after_kill(what)
        if k <= UPSTREAM_STEPS.index("git update-ref") + 1:
            assert new == {}, (what, new)  # killed before update-ref: no branch yet
        else:  # the branch is made before the files in --out: a complete branch, one commit on HEAD
            assert list(new) == ["patchkit/sm120-torch-symm-mem"], (what, new)
            (commit,) = new.values()
            head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
            parents = subprocess.run(["git", "-C", str(repo), "rev-parse", f"{commit}^@"], capture_output=True, text=True).stdout.split()
            assert parents == [head], (what, parents)
        checks.stats["kills"] += 1
        checks.next_command(what, "upstream", w.patches)
        return checks.stats, checks.breaches

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, UPSTREAM_KILL_STEPS))
    kills = sum(r[0]["kills"] for r in results)
    left = sum(r[0]["scratch left by the kill"] for r in results)
    breaches = [b for r in results for b in r[1]]
    record("upstream steps", steps=UPSTREAM_KILL_STEPS, kills=kills, scratch_left_by_kill=left, breaches=len(breaches))
    assert kills == len(UPSTREAM_KILL_STEPS) == PLAN[STEPS]
    assert not breaches, "\n".join(breaches)


# -- 3 and 4. chains of kills on apply and revert ------------------------------------------------


def _choose(rng: random.Random, state: str) -> str:
    """A command that has work to do from ``state``."""
    return rng.choice([c for c in ("apply", "apply911", "revert") if TARGET[c] != state])


def _settle(w: World, repo: Path, rng: random.Random, pending: bool, stats: dict) -> str:
    """The next command without a fault: finishes any pending transaction; checks everything."""
    command = rng.choice(("apply", "apply911", "revert"))
    done = pk(*apply_args(w, repo, command))
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    finished = [line for line in lines(done) if line.startswith("finished an interrupted ")]
    assert len(finished) == pending, lines(done)
    state = settled(repo, w)
    assert state == TARGET[command]
    check_verify(repo, w)
    compile_pycs(repo)  # the application runs again: fresh bytecode for the next kill to stale
    stats["settled"] += 1
    return state


def _fault_chain(w: World, forks: Forks, repo: Path, seed: int, wanted: int) -> dict:
    """Kill with the fault hook at random points, sometimes the recovering run too."""
    rng = random.Random(seed)
    state = settled(repo, w)
    stats = {"kills": 0, "kills in or after a recovery": 0, "not reached": 0, "settled": 0}
    stats.update({p: 0 for p in POINTS})
    pending = False
    while stats["kills"] < wanted:
        command = rng.choice(("apply", "apply911", "revert")) if pending else _choose(rng, state)
        point = rng.choice(POINTS)
        done = _faulted(forks, apply_args(w, repo, command), point)
        if done.returncode == -signal.SIGKILL:
            stats["kills"] += 1
            stats[point] += 1
            stats["kills in or after a recovery"] += pending
        else:  # the point was not on this run's path (nothing to do, or recovery only)
            assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
            stats["not reached"] += 1
        pending = check_interrupted(repo, w)
        if not pending and w.state_of(repo) in ("original", "patched", "other"):
            state = w.state_of(repo)
        if rng.random() < 0.5:  # else chain another kill onto this one
            state = _settle(w, repo, rng, pending, stats)
            pending = False
    if pending:
        _settle(w, repo, rng, True, stats)
    return stats


def test_fault_hook_chains(world: World, forks: Forks, tmp_path: Path) -> None:
    w = world
    wanted = PLAN[CHAINS]
    chains = [
        (w.checkout(tmp_path / "git", "original", "git"), SEED, (wanted + 1) // 2),
        (w.checkout(tmp_path / "plain", "patched", "plain"), SEED + 1, wanted // 2),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: _fault_chain(w, forks, *c), chains))
    total = {k: sum(r[k] for r in results) for k in results[0]}
    record("fault chains", **total)
    assert total["kills"] == wanted


def _measure(w: World, tmp_path: Path, kind: str) -> dict[str, float]:
    """How long an apply runs, counted from its start, from taking the lock, and from its journal:
    the median of three runs.

    Only the spread of the kill instants depends on it.  A busy machine may not look in
    time to see the lock or the journal of a run: that run then counts with its whole length.
    (The median, not the longest: the first run of a session compiles patchkit's bytecode and
    takes several times as long, and kills spread over that length mostly came after the run
    had ended, each a run and a check more for the same kill.)"""
    runs, locked, windows = [], [], []
    for i in range(3):
        repo = w.checkout(tmp_path / f"measure-{kind}-{i}", "original", kind)
        t0 = time.monotonic()
        proc = popen(*apply_args(w, repo, "apply"))
        t1 = time.monotonic() if wait_for(proc, state_dir(repo) / "lock") else None
        t2 = time.monotonic() if wait_for(proc, state_dir(repo) / "journal.json") else None
        proc.communicate(timeout=HANG_GUARD)
        assert proc.returncode == 0
        end = time.monotonic()
        runs.append(end - t0)
        locked += [end - t1] if t1 is not None else []
        windows += [end - t2] if t2 is not None else []
    run = statistics.median(runs)
    return {"run": run, "locked": statistics.median(locked or [run]), "transaction": statistics.median(windows or [run])}


def _timed_chain(w: World, repo: Path, seed: int, wanted: int, span: dict) -> dict:
    """Kill apply and revert at random instants; the next command finishes; check.

    The instant is drawn anywhere in the run (start-up included), from the moment the run
    holds the lock, or inside the transaction, counted from its journal."""
    rng = random.Random(seed)
    state = settled(repo, w)
    stats = {"kills": 0, "pending after kill": 0, "half-patched after kill": 0, "finished anyway": 0, "settled": 0}
    stats.update({"from start": 0, "from lock": 0, "from journal": 0})
    attempts = 0
    while stats["kills"] < wanted:
        attempts += 1
        assert attempts <= 4 * wanted + 10, stats
        command = _choose(rng, state)
        proc = popen(*apply_args(w, repo, command))
        mode = rng.random()
        if mode < 0.4:
            stats["from start"] += 1
            time.sleep(rng.uniform(0, 1.1 * span["run"]))
        elif mode < 0.7:
            stats["from lock"] += 1
            if wait_for(proc, state_dir(repo) / "lock"):
                time.sleep(rng.uniform(0, 1.1 * span["locked"]))
        else:
            stats["from journal"] += 1
            if wait_for(proc, state_dir(repo) / "journal.json"):
                time.sleep(rng.uniform(0, 1.2 * span["transaction"]))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=HANG_GUARD)
        clean((out, err, proc.returncode), command)
        if proc.returncode == -signal.SIGKILL:
            stats["kills"] += 1
        else:
            assert (proc.returncode, err) == (0, b""), err.decode()
            stats["finished anyway"] += 1
        half = w.state_of(repo) is None
        pending = check_interrupted(repo, w)
        stats["pending after kill"] += pending
        stats["half-patched after kill"] += half
        state = _settle(w, repo, rng, pending, stats)
    return stats


def test_random_instant_kills(world: World, tmp_path: Path) -> None:
    w = world
    wanted = PLAN[TIMED]
    spans = {kind: _measure(w, tmp_path, kind) for kind in ("git", "plain")}
    chains = [
        (w.checkout(tmp_path / "git", "original", "git"), SEED + 2, (wanted + 1) // 2, spans["git"]),
        (w.checkout(tmp_path / "plain", "patched", "plain"), SEED + 3, wanted // 2, spans["plain"]),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: _timed_chain(w, *c), chains))
    total = {k: sum(r[k] for r in results) for k in results[0]}
    record("random instants", spans=spans, **total)
    assert total["kills"] == wanted


# -- 5. upstream killed at random instants ---------------------------------------------------


def _ends_within(proc: subprocess.Popen, seconds: float) -> None:
    """Sleep ``seconds``, or less if the run ends first."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def _until_scratch(repo: Path, proc: subprocess.Popen) -> bool:
    """Wait until upstream's scratch folder appears (True), or the run ends first (False)."""
    deadline = time.monotonic() + HANG_GUARD
    while not _scratch(repo) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0002)
    return bool(_scratch(repo))


def _upstream_chain(w: World, tmp_path: Path, index: int, wanted: int) -> tuple[dict, list[str]]:
    rng = random.Random(SEED + 10 + index)
    repo = w.checkout(tmp_path / f"co-{index}", "original")
    _dirty(repo)
    out = tmp_path / f"up-{index}"
    checks = UpstreamChecks(w, repo, out)
    checks.stats.update({"group kills": 0, "finished anyway": 0})
    # How long a run takes, and how long it goes on once its scratch folder appears (the commit: the
    # kills aimed there are drawn within that time, not a quarter of the whole run, which let most
    # of those runs end first: a run and a check more for each such kill).
    t0 = time.monotonic()
    proc = popen("upstream", str(repo), "--out", str(out), "--patches", str(w.patches))
    commit = time.monotonic() if _until_scratch(repo, proc) else t0
    out_, err = proc.communicate(timeout=HANG_GUARD)
    end = time.monotonic()
    clean((out_, err, proc.returncode), "upstream")
    assert proc.returncode == 0, err.decode()
    took, window = end - t0, end - commit
    checks.branch_ok(BRANCH, new_branches(repo)[BRANCH])
    git(repo, "update-ref", "-d", f"refs/heads/{BRANCH}")
    attempts, n = 0, 0
    while checks.stats["kills"] < wanted:
        attempts += 1
        assert attempts <= 4 * wanted + 10, checks.stats
        group = rng.random() < 0.5
        started = time.monotonic()
        proc = popen("upstream", str(repo), "--out", str(out), "--patches", str(w.patches), session=True)
        if rng.random() < 0.5:
            _ends_within(proc, rng.uniform(0, 1.1 * took))
        else:  # around the commit: from the moment its scratch folder appears
            _until_scratch(repo, proc)
            _ends_within(proc, rng.uniform(0, 1.2 * window))
        ended = time.monotonic()
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)  # patchkit and every git it started
            else:
                proc.send_signal(signal.SIGKILL)  # patchkit alone: its git children run on
        except ProcessLookupError:  # it had ended, and no git of its group is left
            pass
        out_, err = proc.communicate(timeout=HANG_GUARD)
        wait_group(proc.pid)
        clean((out_, err, proc.returncode), "upstream")
        if proc.returncode != -signal.SIGKILL:
            assert (proc.returncode, err) == (0, b""), err.decode()
            checks.stats["finished anyway"] += 1
            # A run that finished before its kill: the first run (cold caches, a busy machine) was slower
            # than the runs now; aim the next kills within the quickest run seen (its end is known: the
            # wait for the kill's instant returned there).
            took = min(took, ended - started)
        else:
            checks.stats["kills"] += 1
            checks.stats["group kills"] += group
        n += 1
        what = f"kill {n} ({'group' if group else 'process'})"
        checks.after_kill(what)
        checks.next_command(what, rng.choice(("upstream", "apply")), w.patches)
    return checks.stats, checks.breaches


def test_random_upstream_kills(world: World, tmp_path: Path) -> None:
    w = world
    wanted = PLAN[UPSTREAM_RANDOM]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda i: _upstream_chain(w, tmp_path, i, (wanted + 1 - i) // 2), range(2)))
    total = {k: sum(r[0][k] for r in results) for k in results[0][0]}
    breaches = [b for r in results for b in r[1]]
    record("upstream random", breaches=len(breaches), **total)
    assert total["kills"] == wanted
    assert not breaches, f"{len(breaches)} of {total['kills']} kills:\n" + "\n".join(breaches)


def test_upstream_after_a_killed_git_left_a_ref_lock(world: World, tmp_path: Path) -> None:
    """A git killed inside ``update-ref`` (a kill of upstream's process group) leaves
    ``refs/heads/<branch>.lock``, and git refuses that ref until the file is removed.
    The next upstream must say so in one line (exit 3), or use another branch name; it
    must not crash, and must not leave an mbox for a commit no branch points to."""
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    lock = repo / ".git" / "refs" / "heads" / f"{BRANCH}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_bytes(b"")
    out = tmp_path / "up"
    done = pk("upstream", str(repo), "--out", str(out), "--patches", str(w.patches))
    assert done.returncode in (0, 3), done.stderr.decode()
    branches = new_branches(repo)
    if done.returncode == 3:
        assert done.stderr.count(b"\n") == 1 and BRANCH.encode() in done.stderr, done.stderr.decode()
        assert branches == {}
        assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())
    else:
        (name,) = branches
        assert name != BRANCH and lines(done)[1].startswith(f"created branch {name} at ")
    assert lock.exists()  # git's lock is the user's to remove, not patchkit's


@pytest.mark.parametrize("command", ["upstream", "apply", "revert"])
def test_a_scratch_folder_left_with_its_index_lock_goes_with_the_next_command(world: World, tmp_path: Path, command: str) -> None:
    """A kill of upstream's process group while git writes the private index (read-tree,
    update-index) leaves ``.git/patchkit/upstream-<pid>/`` with ``index.lock`` in it.  The
    next upstream, apply or revert removes the folder, lock included, and does its work."""
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    _dirty(repo)
    scratch = repo / ".git" / "patchkit" / "upstream-4242"
    scratch.mkdir(parents=True)
    for name, data in (("index", b"DIRC"), ("index.lock", b"DIRC"), ("blob0", w.images["patched"][COMM])):
        (scratch / name).write_bytes(data)
    checks = UpstreamChecks(w, repo, tmp_path / "up")
    assert checks.after_kill("a scratch folder left with its index lock") == {}
    assert checks.stats["index lock left in the scratch folder"] == 1
    if command == "upstream":
        done = pk("upstream", str(repo), "--out", str(tmp_path / "up"), "--patches", str(w.patches))
    else:  # revert: nothing to revert here, but the leftover makes it take the lock and clean up
        done = pk(*apply_args(w, repo, command))
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert not scratch.exists() and _git_locks(repo) == []
    assert w.state_of(repo) == ("patched" if command == "apply" else "original")
    if command == "upstream":
        assert git_state(repo) == checks.user and list(new_branches(repo)) == [BRANCH]
