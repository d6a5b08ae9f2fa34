"""Kills and races: apply and revert SIGKILLed at every step and at random instants,
a recovery that must not clobber a hand edit, the lock, and concurrent runs.

Every patchkit command runs as a separate process (``python -m patchkit``) on a git
checkout built in the test.  After each interruption the next apply or revert must
leave the checkout fully original (the tag's exact bytes) or fully patched (the
shipped patch's exact bytes, key 12 = key 10 in both tables), with the state dir
agreeing and no journal, lock or temp file left behind.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

import pytest

from crash_helpers import compile_pycs, pyc_of
from conftest import DC, GIT_ENV, ROOT, git, make_repo, run_cli
from patchkit.rewrite.evaluate import tables
from patchkit.fixes.registry import SGLANG

TAG = "v0.5.5"
UTILS = f"{DC}/all_reduce_utils.py"  # written first: the journal's files are sorted by path
COMM = f"{DC}/torch_symm_mem.py"
FILES = (UTILS, COMM)
PATCH_NAME = "0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
POINTS = ("objects", "journal", "file:1", "file:2", "state", "bytecode")
STATE_DIR = ".git/patchkit"
TMP_SUFFIX = ".patchkit-tmp"
# How verify names each table: from the state's record, or evaluated from source.
RECORDED_NAMES = {UTILS: "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES", COMM: "_WORLD_SIZES_MULTIMEM"}
EVALUATED_NAMES = {UTILS: "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES", COMM: "TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM"}
VERIFY_OK = "verify: ok (key 12 = key 10 in every table)"
LOCK_LINE = re.compile(
    r"patchkit: (?P<root>.+): another patchkit run( \(pid \d+\))? is working on this checkout; "
    r"gave up waiting after (?P<timeout>[0-9.]+)s\n"
)

# Every subprocess runs the patchkit of this working tree, whatever is installed.
PYTHONPATH = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


def env(**extra: str) -> dict[str, str]:
    """The environment run_cli gives, for Popen; no stray fault or lock settings."""
    full = dict(os.environ, **GIT_ENV, PYTHONPATH=PYTHONPATH)
    for name in ("PATCHKIT_SGLANG_REPO", "PATCHKIT_FAULT", "PATCHKIT_LOCK_TIMEOUT"):
        full.pop(name, None)
    full.update(extra)
    return full


def pk(*args: str, **extra: str) -> subprocess.CompletedProcess:
    done = run_cli(*args, env={"PYTHONPATH": PYTHONPATH, "PATCHKIT_FAULT": "", **extra})
    assert b"Traceback" not in done.stdout + done.stderr, done.stderr.decode()
    return done


def popen(*args: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "patchkit", *args], env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def lines(done) -> list[str]:
    return done.stdout.decode().splitlines()


def digest(data: bytes) -> str:
    return sha256(data).hexdigest()


@dataclass
class World:
    """The origin repository, its patches, and checkouts to copy: original and patched."""

    origin: Path
    patches: Path
    original: Path  # template checkout at TAG, bytecode compiled, no patchkit state
    patched: Path  # template checkout at TAG after a normal apply, bytecode compiled again
    orig: dict  # path -> the tag's bytes
    post: dict  # path -> the patched bytes

    @property
    def label(self) -> str:
        return f"{self.patches}/0.5.5/{PATCH_NAME}"

    def checkout(self, dest: Path, which: str = "original") -> Path:
        shutil.copytree(self.original if which == "original" else self.patched, dest, symlinks=True)
        return dest.resolve()


def stale_pycs(repo: Path, rel: str) -> list[Path]:
    """Timestamp pycs whose recorded mtime/size no longer match the source (checked here, not by patchkit)."""
    pyc = pyc_of(repo, rel)
    if not pyc.exists():
        return []
    header = pyc.read_bytes()[:16]
    st = os.stat(repo / rel)
    recorded = (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little"))
    return [] if recorded == (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF) else [pyc]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("crash")
    origin = make_repo(base / "origin")
    patches = base / "patches"
    done = pk("generate", "--repo", str(origin), "--out", str(patches))
    assert done.returncode == 0, done.stderr
    original = base / "original"
    subprocess.run(["git", "clone", "-q", str(origin), str(original)], check=True, capture_output=True)
    git(original, "checkout", "-q", TAG)
    compile_pycs(original)
    patched = base / "patched"
    shutil.copytree(original, patched, symlinks=True)
    done = pk("apply", str(patched), "--patches", str(patches), "--no-generate")
    assert done.returncode == 0, done.stderr
    assert lines(done)[-1] == "dropped 2 cached bytecode files"
    compile_pycs(patched)
    orig = {rel: git(origin, "show", f"{TAG}:{rel}").encode() for rel in FILES}
    post = {rel: (patched / rel).read_bytes() for rel in FILES}
    assert all(orig[rel] != post[rel] for rel in FILES)
    return World(origin, patches, original.resolve(), patched.resolve(), orig, post)


# -- what a checkout holds ---------------------------------------------------------


def leftovers(repo: Path) -> list[str]:
    """Every ``.*.patchkit-tmp`` file in the checkout, its .git and so its state dir."""
    found = []
    for folder, _, names in os.walk(repo):
        found += [os.path.join(folder, n) for n in names if n.startswith(".") and n.endswith(TMP_SUFFIX)]
    return sorted(found)


def patched_files(repo: Path, w: World) -> tuple[str, ...]:
    """Which files hold the patched bytes; every other one must hold the tag's exact bytes."""
    out = []
    for rel in FILES:
        data = (repo / rel).read_bytes()
        assert data in (w.orig[rel], w.post[rel]), f"{rel} holds neither the original nor the patched bytes"
        if data == w.post[rel]:
            out.append(rel)
    return tuple(out)


def keys_copied(repo: Path) -> bool:
    found = {}
    for rel in FILES:
        found.update(tables((repo / rel).read_bytes(), SGLANG.tables, rel))
    assert len(found) == 2
    return all(12 in t and t[12] == t[10] for t in found.values())


def settled(repo: Path, w: World) -> str:
    """Assert a consistent, finished checkout; return "original" or "patched"."""
    store = repo / STATE_DIR
    assert leftovers(repo) == []
    assert not (store / "journal.json").exists()
    assert not (store / "lock").exists()
    done = patched_files(repo, w)
    assert done in ((), FILES), f"half-patched: only {done} patched"
    for rel in FILES:
        assert stale_pycs(repo, rel) == [], f"stale bytecode of {rel}"
    if done:
        assert keys_copied(repo)
        state = json.loads((store / "state.json").read_bytes())
        assert {f["path"]: (f["pre_sha256"], f["post_sha256"]) for f in state["files"]} == {
            rel: (digest(w.orig[rel]), digest(w.post[rel])) for rel in FILES
        }
        for rel in FILES:  # what a revert needs
            assert (store / "objects" / digest(w.orig[rel])).read_bytes() == w.orig[rel]
        return "patched"
    assert not keys_copied(repo)
    assert not (store / "state.json").exists()
    for rel in FILES:
        assert (repo / rel).read_bytes() == w.orig[rel]
    return "original"


def expected_verify(repo: Path, w: World) -> tuple[int, list[str]]:
    """verify's exit code and lines, worked out from what is on disk."""
    store = repo / STATE_DIR
    out = [f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD"]
    problems = []
    if (store / "journal.json").exists():
        problems.append(
            f"{store}/journal.json: an interrupted transaction is pending; run `patchkit apply` or `patchkit revert` to finish it"
        )
    recorded = {}
    if (store / "state.json").exists():
        recorded = {f["path"]: f["post_sha256"] for f in json.loads((store / "state.json").read_bytes())["files"]}
    for rel in FILES:
        data = (repo / rel).read_bytes()
        if recorded.get(rel) == digest(data):
            out.append(f"checked {rel}: {RECORDED_NAMES[rel]} (post-image hash recorded at apply)")
        else:
            out.append(f"checked {rel}: {EVALUATED_NAMES[rel]} (tables evaluated from source)")
            if data == w.orig[rel]:
                problems.append(f"{rel}: {EVALUATED_NAMES[rel]} has no key 12 (the patch is not applied)")
        problems += [f"{pyc}: stale bytecode (...); `patchkit apply` drops it" for pyc in stale_pycs(repo, rel)]
    summary = f"verify: {len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else VERIFY_OK
    return (1 if problems else 0), out + problems + [summary]


def check_verify(repo: Path, w: World) -> int:
    want_code, want = expected_verify(repo, w)
    done = pk("verify", str(repo))
    got = [re.sub(r"stale bytecode \(.*\);", "stale bytecode (...);", line) for line in lines(done)]
    assert (done.returncode, got, done.stderr) == (want_code, want, b"")
    return done.returncode


def check_interrupted(repo: Path, w: World) -> bool:
    """Right after a kill: never verify-clean while pending or half-patched.  Returns: journal pending?"""
    pending = (repo / STATE_DIR / "journal.json").exists()
    half = patched_files(repo, w) not in ((), FILES)
    if pending or half:
        assert pending, "files half-patched with no journal to finish the transaction"
        code = check_verify(repo, w)
        assert code == 1
    return pending


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
        ]
    else:
        out += [f"reverted shipped patch {w.label}"] + [
            f"  restored {rel} (sha256 {digest(w.orig[rel])[:12]})" for rel in FILES
        ]
    return out + [f"dropped {pycs} cached bytecode file{'s' if pycs != 1 else ''}"]


def check_next(repo: Path, w: World, command: str, pending: bool, want: list[str] | None = None) -> str:
    """Run the next command; it must finish any interrupted transaction; return the settled state."""
    done = pk(command, str(repo), "--patches", str(w.patches))
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    out = lines(done)
    assert out[0] == f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD"
    finished = [line for line in out if line.startswith("finished an interrupted ")]
    assert len(finished) == (1 if pending else 0), out
    if want is not None:
        assert out == want
    kind = settled(repo, w)
    assert check_verify(repo, w) == (0 if kind == "patched" else 1)
    return kind


def revert_to_original(repo: Path, w: World) -> None:
    done = pk("revert", str(repo), "--patches", str(w.patches))
    assert (done.returncode, done.stderr) == (0, b"")
    assert settled(repo, w) == "original"
    for rel in FILES:
        assert (repo / rel).read_bytes() == git(w.origin, "show", f"{TAG}:{rel}").encode()


# -- 1. every fault point ------------------------------------------------------------


def _after_kill(op: str, point: str) -> dict:
    """What must be on disk after ``op`` killed itself at ``point``."""
    step = POINTS.index(point)
    written = FILES[: max(0, min(step - 1, 2))]  # file:1 -> the first file, file:2 and later -> both
    return {
        "written": written,
        "journal": point != "objects",
        "state": (
            point in ("state", "bytecode") if op == "apply" else point in ("objects", "journal", "file:1", "file:2")
        ),
        "pycs": point != "bytecode",
    }


@pytest.mark.parametrize("then", ["apply", "revert"])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_kill_at_each_fault_point_then_finish(world: World, tmp_path: Path, op: str, point: str, then: str) -> None:
    w = world
    start = "original" if op == "apply" else "patched"
    repo = w.checkout(tmp_path / "co", start)
    store = repo / STATE_DIR
    before = w.orig if op == "apply" else w.post
    after = w.post if op == "apply" else w.orig

    done = pk(op, str(repo), "--patches", str(w.patches), PATCHKIT_FAULT=point)
    assert done.returncode == -signal.SIGKILL

    # Exactly what the transaction had done when it was killed.
    want = _after_kill(op, point)
    for rel in FILES:
        assert (repo / rel).read_bytes() == (after[rel] if rel in want["written"] else before[rel]), rel
        assert pyc_of(repo, rel).exists() == want["pycs"], rel
        assert bool(stale_pycs(repo, rel)) == (want["pycs"] and rel in want["written"]), rel
    assert (store / "journal.json").exists() == want["journal"]
    assert (store / "state.json").exists() == want["state"]
    assert (store / "lock").exists()  # left by the killed holder; must not block anyone
    assert leftovers(repo) == []

    # verify: never 0 with a transaction pending (and so never while half-patched).
    code = check_verify(repo, w)
    if want["journal"]:
        assert code == 1
    else:
        assert code == (0 if start == "patched" else 1)
    if then == "apply":
        status = pk("status", str(repo), "--patches", str(w.patches))
        assert status.returncode == 0
        pending = (
            f"pending:  an interrupted {op} (the next apply or revert finishes it)"
            if want["journal"]
            else "pending:  none"
        )
        assert lines(status)[-1] == pending

    # Rolled forward if the journal was written, else never begun; then the next command does its own work.
    found = ("patched" if op == "apply" else "original") if want["journal"] else start
    pycs = sum(pyc_of(repo, rel).exists() for rel in FILES) if not want["journal"] else 0  # a recovery drops them
    expected = next_lines(w, repo, then, op if want["journal"] else None, found, pycs)
    kind = check_next(repo, w, then, want["journal"], expected)
    assert kind == ("patched" if then == "apply" else "original")
    if kind == "patched":  # a next revert was the revert after it all already
        revert_to_original(repo, w)


# -- the exact lines of a finished recovery ---------------------------------------


def test_recovery_lines_are_exact(world: World, tmp_path: Path) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    assert pk("apply", str(repo), "--patches", str(w.patches), PATCHKIT_FAULT="file:1").returncode == -9
    done = pk("revert", str(repo), "--patches", str(w.patches))
    restored = [f"  restored {rel} (sha256 {digest(w.orig[rel])[:12]})" for rel in FILES]
    assert (done.returncode, done.stderr) == (0, b"")
    assert lines(done) == [
        f"{repo}: SGLang 0.5.5, tag v0.5.5 at HEAD",
        "finished an interrupted apply (2 files)",
        f"reverted shipped patch {w.label}",
        *restored,
        "dropped 0 cached bytecode files",  # the recovery dropped them already
    ]
    assert settled(repo, w) == "original"
    assert pk("apply", str(repo), "--patches", str(w.patches), PATCHKIT_FAULT="state").returncode == -9
    done = pk("apply", str(repo), "--patches", str(w.patches))
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
    assert pk("apply", str(repo), "--patches", str(w.patches), PATCHKIT_FAULT="file:1").returncode == -9
    # The next run finishes the first file's partner, then is killed too, inside the recovery.
    assert pk("revert", str(repo), "--patches", str(w.patches), PATCHKIT_FAULT=second).returncode == -9
    assert patched_files(repo, w) == FILES
    assert (repo / STATE_DIR / "journal.json").exists()
    assert check_interrupted(repo, w)
    assert check_next(repo, w, then, True) == ("patched" if then == "apply" else "original")
    revert_to_original(repo, w)


# -- a kill inside an atomic write ---------------------------------------------------

# Runs patchkit with os.replace wrapped: the process SIGKILLs itself just before the
# rename that would put the named file in place (its temp file written and fsynced).
KILL_BEFORE_RENAME = r"""
import os, signal, sys
target = sys.argv.pop(1)
real = os.replace
def replace(src, dst, *args, **kwargs):
    dst = os.fspath(dst)
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
        ("revert", "objects/"),
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
        [sys.executable, "-c", KILL_BEFORE_RENAME, target, op, str(repo), "--patches", str(w.patches)],
        env=env(),
        capture_output=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert len(leftovers(repo)) == 1  # the temp file of the rename that never happened
    pending = check_interrupted(repo, w)
    assert pending == (target in ("all_reduce_utils.py", "state.json"))
    check_next(repo, w, then, pending)  # settled(): no temp file may be left anywhere


# -- 2. kills at random instants ------------------------------------------------------


def _wait_for(proc: subprocess.Popen, path: Path) -> bool:
    """Poll until ``path`` has content (the lock: its holder's pid; the journal); False if ``proc`` ended first."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if path.read_bytes():
                return True
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.0002)
    raise AssertionError(f"{path} never appeared")


def _timed(w: World, repo: Path, op: str, **extra: str) -> tuple[float, float, int]:
    """Run ``op``: (seconds from Popen to the lock being held, seconds from there to the exit, exit code)."""
    t0 = time.monotonic()
    proc = popen(op, str(repo), "--patches", str(w.patches), **extra)
    assert _wait_for(proc, repo / STATE_DIR / "lock")
    t1 = time.monotonic()
    proc.communicate()
    return t1 - t0, time.monotonic() - t1, proc.returncode


def _measure(w: World, tmp_path: Path) -> dict[str, dict[str, float]]:
    """Per op: how long a run takes, and when its transaction starts and ends counted from the lock."""
    spans = {}
    for op, start in (("apply", "original"), ("revert", "patched")):
        runs, begins, ends = [], [], []
        for i in range(2):
            before, after, code = _timed(w, w.checkout(tmp_path / f"measure-{op}-{i}", start), op)
            assert code == 0
            runs.append(before + after)
            _, after, code = _timed(
                w, w.checkout(tmp_path / f"measure-{op}-{i}-o", start), op, PATCHKIT_FAULT="objects"
            )
            assert code == -signal.SIGKILL
            begins.append(after)
            _, after, code = _timed(
                w, w.checkout(tmp_path / f"measure-{op}-{i}-b", start), op, PATCHKIT_FAULT="bytecode"
            )
            assert code == -signal.SIGKILL
            ends.append(after)
        spans[op] = {"run": max(runs), "begin": min(begins), "end": max(ends)}
    return spans


def _kill_chain(w: World, repo: Path, seed: int, kills_wanted: int, spans: dict) -> dict:
    """Kill apply (on an original checkout) or revert (on a patched one) at random instants, recover, check."""
    rng = random.Random(seed)
    kind = settled(repo, w)
    stats = {"kills": 0, "pending": 0, "half-patched": 0, "finished": 0, "not-started": 0}
    attempts = 0
    while stats["kills"] < kills_wanted:
        attempts += 1
        assert attempts <= 3 * kills_wanted, stats
        op = "apply" if kind == "original" else "revert"
        span = spans[op]
        proc = popen(op, str(repo), "--patches", str(w.patches))
        mode = rng.random()
        if mode < 0.4:  # anywhere in the run, start-up included
            time.sleep(rng.uniform(0, 1.1 * span["run"]))
        elif mode < 0.7:  # around the transaction, counted from taking the lock
            if _wait_for(proc, repo / STATE_DIR / "lock"):
                time.sleep(rng.uniform(0.8 * span["begin"], 1.2 * span["end"]))
        elif _wait_for(proc, repo / STATE_DIR / "journal.json"):  # in the transaction, counted from its journal
            time.sleep(rng.uniform(0, 1.2 * (span["end"] - span["begin"])))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        assert b"Traceback" not in out + err
        if proc.returncode == -signal.SIGKILL:
            stats["kills"] += 1
        else:
            assert (proc.returncode, err) == (0, b""), err.decode()
            stats["finished"] += 1
        now = patched_files(repo, w)
        pending = check_interrupted(repo, w)
        stats["pending"] += pending
        stats["half-patched"] += now not in ((), FILES)
        stats["not-started"] += not pending and now == (FILES if kind == "patched" else ())
        kind = check_next(repo, w, rng.choice(("apply", "revert")), pending)
    revert_to_original(repo, w)
    return stats


def test_random_kills(world: World, tmp_path: Path) -> None:
    w = world
    spans = _measure(w, tmp_path)
    chains = [(w.checkout(tmp_path / f"chain-{i}", ("original", "patched")[i]), 20261129 + i) for i in range(2)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores: one chain each
        results = list(pool.map(lambda chain: _kill_chain(w, chain[0], chain[1], 20, spans), chains))
    print("random kills:", spans, results)
    assert sum(r["kills"] for r in results) >= 40


# -- 3. recovery refuses to clobber a hand edit ------------------------------------


def test_recovery_refuses_to_overwrite_a_file_edited_meanwhile(world: World, tmp_path: Path) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    assert pk("apply", str(repo), "--patches", str(w.patches), PATCHKIT_FAULT="file:1").returncode == -9
    assert (repo / UTILS).read_bytes() == w.post[UTILS]
    assert (repo / COMM).read_bytes() == w.orig[COMM]
    edited = w.orig[COMM].replace(b"10: [6, 8]", b"10: [2, 4, 6, 8]")
    assert edited != w.orig[COMM]
    (repo / COMM).write_bytes(edited)
    journal = (repo / STATE_DIR / "journal.json").read_bytes()
    message = (
        f"patchkit: {repo}/{COMM}: changed during an interrupted apply; patchkit will not overwrite it "
        f"(the journal is {repo}/{STATE_DIR}/journal.json)\n"
    ).encode()

    for command in ("apply", "revert"):
        done = pk(command, str(repo), "--patches", str(w.patches))
        assert (done.returncode, done.stdout, done.stderr) == (3, b"", message), done.stderr
        assert (repo / COMM).read_bytes() == edited
        assert (repo / UTILS).read_bytes() == w.post[UTILS]
        assert (repo / STATE_DIR / "journal.json").read_bytes() == journal  # still pending
        assert not (repo / STATE_DIR / "lock").exists()
        assert leftovers(repo) == []
    done = pk("verify", str(repo))
    assert done.returncode == 1
    assert (
        f"{repo}/{STATE_DIR}/journal.json: an interrupted transaction is pending; run `patchkit apply` or `patchkit revert` to finish it"
        in lines(done)
    )

    # Put the file back as it was: the interrupted apply can now be finished.
    (repo / COMM).write_bytes(w.orig[COMM])
    check_next(repo, w, "apply", True)
    revert_to_original(repo, w)


# -- 4. the lock ----------------------------------------------------------------------


def test_a_held_lock_is_refused_with_one_line(world: World, tmp_path: Path) -> None:
    w = world
    repo = w.checkout(tmp_path / "co", "original")
    store = repo / STATE_DIR
    store.mkdir()
    fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        stamps = {rel: os.stat(repo / rel).st_mtime_ns for rel in FILES}
        for command in ("apply", "revert"):
            t0 = time.monotonic()
            done = pk(command, str(repo), "--patches", str(w.patches), PATCHKIT_LOCK_TIMEOUT="0.5")
            took = time.monotonic() - t0
            assert (done.returncode, done.stdout) == (3, b"")
            assert done.stderr.decode() == (
                f"patchkit: {repo}: another patchkit run (pid {os.getpid()}) is working on this checkout; "
                "gave up waiting after 0.5s\n"
            )
            assert 0.5 <= took < 5
            assert {rel: (repo / rel).read_bytes() for rel in FILES} == w.orig
            assert {rel: os.stat(repo / rel).st_mtime_ns for rel in FILES} == stamps
            assert sorted(p.name for p in store.iterdir()) == ["lock"]
            assert (store / "lock").read_bytes() == f"{os.getpid()}\n".encode()
        # verify only reads: it does not wait for the lock.
        assert check_verify(repo, w) == 1
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    # Released (its file still there, as a killed holder leaves it): apply works and removes it.
    done = pk("apply", str(repo), "--patches", str(w.patches), PATCHKIT_LOCK_TIMEOUT="0.5")
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


@pytest.mark.parametrize(
    "ops",
    [("apply", "apply"), ("apply", "revert"), ("apply", "apply", "revert"), ("apply", "revert", "verify")],
    ids="+".join,
)
def test_concurrent_runs_serialise(world: World, tmp_path: Path, ops: tuple[str, ...]) -> None:
    w = world
    for rnd in range(3):
        start = "original" if rnd % 2 == 0 else "patched"
        repo = w.checkout(tmp_path / f"co-{rnd}", start)
        procs = [popen(op, str(repo), *(["--patches", str(w.patches)] if op != "verify" else [])) for op in ops]
        runs = []
        for op, proc in zip(ops, procs):
            out, err = proc.communicate(timeout=60)
            assert b"Traceback" not in out + err, err.decode()
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
            revert_to_original(repo, w)
