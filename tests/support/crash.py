"""The one helper module of the crash and race tests: tests/targets/test_crash_and_race.py
and the reliability suite (tests/reliability/): ``from support.crash import ...``.

Two ways to run patchkit:

- ``run``/``popen``: ``python -m patchkit`` in a separate process.  Every run that is
  killed (PATCHKIT_FAULT, SIGKILL) or raced against another one goes this way, or is forked
  from a Python that has imported patchkit once (support.forked: test_kills.py's kills at a
  fault point or before a step of upstream).
- ``pk``: the same command line in this process (``support.cli.invoke``), for the commands
  that look at, finish or undo what a killed or raced run left.  Same arguments, same
  exit code, same bytes on stdout and stderr; a Python start-up less.

A world (``build_world``) holds an origin repository with the shipped-patch layout of
SGLang 0.5.5, its generated patches, and template checkouts in four states, as git
checkouts and plain folders.  Everything a test checks is worked out here from the
bytes on disk: which state the files are in, what state.json must record, what
``verify`` must print.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

from support.cli import PROCESS_ENV, invoke, run_cli
from support.repos import DC, GIT_ENV, ROOT, git, make_repo

TAG = "v0.5.5"
VERSION = "0.5.5"
UTILS = f"{DC}/all_reduce_utils.py"  # sorted first: a transaction writes it first (file:1)
COMM = f"{DC}/torch_symm_mem.py"
FILES = (UTILS, COMM)
PATCH_NAME = "0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
POINTS = ("objects", "journal", "file:1", "file:2", "state", "bytecode")
TMP_SUFFIX = ".patchkit-tmp"
EDIT = b"# a local edit after apply\n"

# How verify names each table: from the state's record, or evaluated from source.
RECORDED_NAMES = {UTILS: "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES", COMM: "_WORLD_SIZES_MULTIMEM"}
EVALUATED_NAMES = {UTILS: "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES", COMM: "TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM"}
# The cc pair of each state, and the keys its files hold.
PAIRS = {"patched": (10, 12), "other": (9, 11), "edited": (10, 12)}
KEYS = {"original": set(), "patched": {12}, "other": {11}, "edited": {12}}

# Every subprocess runs the patchkit of this working tree, whatever is installed.
PYTHONPATH = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

# The kill budget of tests/reliability/test_kills.py (see there and docs/RELIABILITY.md).  From
# FULL_KILLS on (make test-reliability), every sweep of the reliability suite runs whole (FULL_SIZE):
# every step, page and millisecond; make test runs a sample of each.
KILLS_ENV = "PATCHKIT_KILLS"
FULL_KILLS = 400
RECORD_ENV = "PATCHKIT_RELIABILITY_LOG"
HANG_GUARD = 120  # seconds: only a run that hangs gets near this, however busy the machine


def env(**extra: str | None) -> dict[str, str]:
    """The environment for a subprocess: the test git identity, no stray patchkit settings,
    Python's bytecode cache of support.cli.PROCESS_ENV; ``None`` removes a variable."""
    full = dict(os.environ, **GIT_ENV, PYTHONPATH=PYTHONPATH)
    for name in ("PATCHKIT_SGLANG_REPO", "PATCHKIT_FAULT", "PATCHKIT_LOCK_TIMEOUT"):
        full.pop(name, None)
    for name, value in {**PROCESS_ENV, **extra}.items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return full


def clean(done: subprocess.CompletedProcess | tuple, what: str = "") -> None:
    """No traceback, and a failure is said in at most one stderr line."""
    out, err, code = (done.stdout, done.stderr, done.returncode) if not isinstance(done, tuple) else done
    assert b"Traceback" not in out + err, f"{what}: traceback\n{err.decode(errors='replace')}"
    if code not in (0, -9):
        assert len(err.splitlines()) <= 1, f"{what}: more than one stderr line\n{err.decode(errors='replace')}"


def pk(*args: str, **extra: str) -> subprocess.CompletedProcess:
    """patchkit ARGS in this process (no kill, no race); never a traceback, one line at most on failure."""
    done = invoke(*args, env={"PATCHKIT_FAULT": None, "PATCHKIT_LOCK_TIMEOUT": None, **extra})
    clean(done, " ".join(args[:1]))
    return done


def run(*args: str, **extra: str) -> subprocess.CompletedProcess:
    """``python -m patchkit ARGS`` in a subprocess (the way to be killed: PATCHKIT_FAULT=point)."""
    done = run_cli(*args, env={"PYTHONPATH": PYTHONPATH, "PATCHKIT_FAULT": None, "PATCHKIT_LOCK_TIMEOUT": None, **extra})
    clean(done, " ".join(args[:1]))
    return done


def popen(*args: str, session: bool = False, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "patchkit", *args],
        env=env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=session,
    )


def lines(done) -> list[str]:
    return done.stdout.decode().splitlines()


def digest(data: bytes) -> str:
    return sha256(data).hexdigest()


def kills_budget(default: int) -> int:
    value = os.environ.get(KILLS_ENV, "").strip()
    return int(value) if value else default


FULL_SIZE = kills_budget(0) >= FULL_KILLS


def record(test: str, **counts) -> None:
    """Print what a test did (pytest -s shows it); with $PATCHKIT_RELIABILITY_LOG, append it there as JSON."""
    line = json.dumps({"test": test, **counts}, sort_keys=True)
    print(line)
    path = os.environ.get(RECORD_ENV)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def wait_for(proc: subprocess.Popen, path: Path, timeout: float = HANG_GUARD) -> bool:
    """Poll until ``path`` exists with content (the lock: its holder's pid; the journal);
    False if ``proc`` ended first.  ``timeout`` is a hang guard, not a measure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if path.stat().st_size:
                return True
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.0002)
    raise AssertionError(f"{path} never appeared")


# -- bytecode ---------------------------------------------------------------------------------


def compile_pycs(repo: Path) -> None:
    """Timestamp bytecode of the two table modules, as an ``import`` leaves it."""
    for rel in FILES:
        source = str(repo / rel)
        py_compile.compile(
            source,
            cfile=importlib.util.cache_from_source(source),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
        )


def pyc_of(repo: Path, rel: str) -> Path:
    return Path(importlib.util.cache_from_source(str(repo / rel)))


def stale_pycs(repo: Path, rels: tuple[str, ...] = FILES) -> list[Path]:
    """Timestamp pycs whose recorded mtime/size no longer match their source (checked here, not by patchkit)."""
    out = []
    for rel in rels:
        pyc = pyc_of(repo, rel)
        if not pyc.exists():
            continue
        header = pyc.read_bytes()[:16]
        st = os.stat(repo / rel)
        seen = (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little"))
        if seen != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
            out.append(pyc)
    return out


# -- a world: origin repository, patches, template checkouts in every state -------------------


@dataclass
class World:
    """The origin repository, its patches, and template checkouts to copy, in each state.

    States: "original" (the tag's bytes), "patched" (key 12 = key 10, the shipped patch),
    "other" (key 11 = key 9: another cc pair, generated from the checkout), "edited"
    (patched, then COMM edited by hand).  Kinds: "git" (state in .git/patchkit) and
    "plain" (no .git, state in .patchkit).  Every template has fresh bytecode.
    """

    base: Path
    origin: Path
    patches: Path
    templates: dict = field(default_factory=dict)  # (kind, state) -> Path
    images: dict = field(default_factory=dict)  # state -> {path: bytes}

    @property
    def label(self) -> str:
        """How apply and revert name the shipped patch."""
        return f"{self.patches}/{VERSION}/{PATCH_NAME}"

    def checkout(self, dest: Path, state: str = "original", kind: str = "git") -> Path:
        shutil.copytree(self.templates[(kind, state)], dest, symlinks=True)
        return dest.resolve()

    def state_of(self, repo: Path) -> str | None:
        """Which state all files are in (None if the files are in different states)."""
        return state_of(self.images, {rel: (repo / rel).read_bytes() for rel in FILES})


def state_of(images: dict, files: dict[str, bytes]) -> str | None:
    found = {file_state(images, rel, files[rel]) for rel in FILES}
    if found == {"patched", "edited"}:  # UTILS patched + COMM edited
        return "edited"
    return found.pop() if len(found) == 1 else None


def file_state(images: dict | World, rel: str, data: bytes) -> str:
    """The state whose image of ``rel`` is ``data`` (UTILS is the same when patched and edited)."""
    images = images.images if isinstance(images, World) else images
    if rel == COMM and data == images["edited"][COMM]:
        return "edited"
    names = [s for s, image in images.items() if image[rel] == data and s != "edited"]
    assert names, f"{rel} holds bytes of no known state"
    return names[0]


def state_dir(repo: Path) -> Path:
    return repo / ".git" / "patchkit" if (repo / ".git").is_dir() else repo / ".patchkit"


def apply_args(w: World, repo: Path, command: str) -> list[str]:
    """The CLI arguments of a command of the state machine (see World)."""
    if command == "apply":
        return ["apply", str(repo), "--patches", str(w.patches)]
    if command == "apply911":
        return ["apply", str(repo), "--patches", str(w.patches), "--from-cc", "9", "--to-cc", "11"]
    if command == "revert":
        return ["revert", str(repo), "--patches", str(w.patches)]
    if command == "revert-force":
        return ["revert", str(repo), "--patches", str(w.patches), "--force"]
    raise AssertionError(command)


TARGET = {"apply": "patched", "apply911": "other", "revert": "original", "revert-force": "original"}


def build_world(base: Path) -> World:
    from patchkit.fixes.registry import SGLANG
    from patchkit.rewrite.evaluate import tables

    origin = make_repo(base / "origin")
    patches = base / "patches"
    done = pk("generate", "--repo", str(origin), "--out", str(patches))
    assert done.returncode == 0, done.stderr
    w = World(base, origin, patches)
    original = base / "t-git-original"
    subprocess.run(["git", "clone", "-q", str(origin), str(original)], check=True, capture_output=True)
    git(original, "checkout", "-q", "-b", "work", TAG)
    git(original, "config", "user.name", "Jane Dev")
    git(original, "config", "user.email", "jane@example.invalid")
    compile_pycs(original)
    w.templates[("git", "original")] = original.resolve()
    for state, command in (("patched", "apply"), ("other", "apply911")):
        dest = base / f"t-git-{state}"
        shutil.copytree(original, dest, symlinks=True)
        done = pk(*apply_args(w, dest, command))
        assert done.returncode == 0, done.stderr
        assert lines(done)[-1] == "dropped 2 cached bytecode files"
        compile_pycs(dest)
        w.templates[("git", state)] = dest.resolve()
    edited = base / "t-git-edited"
    shutil.copytree(w.templates[("git", "patched")], edited, symlinks=True)
    (edited / COMM).write_bytes((edited / COMM).read_bytes() + EDIT)
    compile_pycs(edited)
    w.templates[("git", "edited")] = edited.resolve()
    for state in ("original", "patched"):
        dest = base / f"t-plain-{state}"
        shutil.copytree(original, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        if state == "patched":
            done = pk(*apply_args(w, dest, "apply"))
            assert done.returncode == 0, done.stderr
        compile_pycs(dest)
        w.templates[("plain", state)] = dest.resolve()
    for state in ("original", "patched", "other", "edited"):
        w.images[state] = {rel: (w.templates[("git", state)] / rel).read_bytes() for rel in FILES}
    assert w.images["original"] == {rel: git(origin, "show", f"{TAG}:{rel}").encode() for rel in FILES}
    assert len({tuple(i.values()) for i in w.images.values()}) == 4
    assert w.images["patched"] == {rel: (w.templates[("plain", "patched")] / rel).read_bytes() for rel in FILES}
    # What each state's tables hold, evaluated once here: later checks compare bytes with these images.
    for state, image in w.images.items():
        found = {}
        for rel in FILES:
            found.update(tables(image[rel], SGLANG.tables, rel))
        assert len(found) == 2, (state, found)
        for table in found.values():
            assert {11, 12} & set(table) == KEYS[state], (state, table)
            if state != "original":
                old, new = PAIRS[state]
                assert table[new] == table[old], (state, table)
    return w


# -- what a checkout holds --------------------------------------------------------------------


def leftovers(root: Path) -> list[str]:
    """Every ``.*.patchkit-tmp`` file under ``root`` (its .git and state dir included)."""
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.join(folder, n) for n in names if n.startswith(".") and n.endswith(TMP_SUFFIX)]
    return sorted(found)


def state_json(repo: Path) -> dict | None:
    path = state_dir(repo) / "state.json"
    return json.loads(path.read_bytes()) if path.exists() else None


def recorded(repo: Path) -> dict[str, tuple[str, str]] | None:
    """path -> (pre sha256, post sha256) of state.json, or None without one."""
    doc = state_json(repo)
    return None if doc is None else {f["path"]: (f["pre_sha256"], f["post_sha256"]) for f in doc["files"]}


def expected_record(w: World, state: str) -> dict[str, tuple[str, str]] | None:
    """What state.json records once a transaction to ``state`` is done ("edited": the patched record)."""
    if state == "original":
        return None
    post = w.images["patched" if state == "edited" else state]
    return {rel: (digest(w.images["original"][rel]), digest(post[rel])) for rel in FILES}


def settled(repo: Path, w: World) -> str:
    """Assert a finished, consistent checkout; return its state."""
    store = state_dir(repo)
    assert leftovers(repo) == [], leftovers(repo)
    assert not (store / "journal.json").exists(), "journal left behind"
    assert not (store / "lock").exists(), "lock file left behind"
    state = w.state_of(repo)
    assert state in ("original", "patched", "other"), f"not settled: {state}"
    assert recorded(repo) == expected_record(w, state), (state, recorded(repo))
    assert stale_pycs(repo) == [], "stale bytecode"
    if state != "original":
        assert (state_json(repo)["from_cc"], state_json(repo)["to_cc"]) == PAIRS[state]
        for rel in FILES:  # what a revert needs
            assert (store / "objects" / digest(w.images["original"][rel])).read_bytes() == w.images["original"][rel]
    return state


def expected_verify(repo: Path, w: World) -> tuple[int, list[str]]:
    """verify's exit code and every line it prints, worked out from what is on disk.

    (The reason of a stale pyc, e.g. "source mtime ...", is left as "..." here.)"""
    store = state_dir(repo)
    git_checkout = (repo / ".git").is_dir()
    first = f"{repo}: SGLang {VERSION}, " + (f"tag {TAG} at HEAD" if git_checkout else "declared in python/sglang/version.py")
    problems, notes, checked = [], [], []
    journal = json.loads((store / "journal.json").read_bytes()) if (store / "journal.json").exists() else None
    if journal is not None:
        problems.append(
            f"{store}/journal.json: an interrupted transaction is pending; run `patchkit apply` or `patchkit revert` to finish it"
        )
    doc = state_json(repo)
    old, new = (doc["from_cc"], doc["to_cc"]) if doc else (10, 12)
    posts = {f["path"]: f["post_sha256"] for f in doc["files"]} if doc else {}
    ours = set(posts) | {f["path"] for f in ((journal or {}).get("applied") or {}).get("files", [])}
    for rel in FILES:
        data = (repo / rel).read_bytes()
        if posts.get(rel) == digest(data):
            checked.append(f"checked {rel}: {RECORDED_NAMES[rel]} (post-image hash recorded at apply)")
        else:
            checked.append(f"checked {rel}: {EVALUATED_NAMES[rel]} (tables evaluated from source)")
            if new not in KEYS[file_state(w, rel, data)]:
                problems.append(f"{rel}: {EVALUATED_NAMES[rel]} has no key {new} (the patch is not applied)")
            elif rel not in ours:
                notes.append(f"note: {rel}: {EVALUATED_NAMES[rel]} already has key {new}, not added by patchkit (equal to key {old})")
        problems += [f"{pyc}: stale bytecode (...); `patchkit apply` drops it" for pyc in stale_pycs(repo, (rel,))]
    if problems:
        summary = f"verify: {len(problems)} problem{'s' if len(problems) != 1 else ''}"
    else:
        summary = f"verify: ok (key {new} = key {old} in every table{' patchkit added' if notes else ''})"
    return (1 if problems else 0), [first, *checked, *notes, *problems, summary]


def check_verify(repo: Path, w: World) -> int:
    """Run verify (in process) and compare every line with ``expected_verify``; return its exit code."""
    want_code, want = expected_verify(repo, w)
    done = pk("verify", str(repo))
    got = [re.sub(r"stale bytecode \(.*\);", "stale bytecode (...);", line) for line in lines(done)]
    assert (done.returncode, got, done.stderr) == (want_code, want, b""), (want_code, want, done.returncode, got, done.stderr)
    return done.returncode


def check_interrupted(repo: Path, w: World) -> bool:
    """Right after a kill: half-patched only with a journal, and then verify says 1.  Returns: pending?"""
    pending = (state_dir(repo) / "journal.json").exists()
    if w.state_of(repo) is None:
        assert pending, "files in different states and no journal to finish the transaction"
    if pending:
        assert check_verify(repo, w) == 1
    return pending


def after_kill(w: World, repo: Path, start: str, command: str, point: str) -> bool:
    """Assert exactly what a transaction (``command`` from ``start``) had done when killed at
    ``point``: the files written, their bytecode, the journal, state.json, the kept copy of a
    hand edit; the killed holder's lock file left, no temp file.  Returns: journal written?"""
    store = state_dir(repo)
    target = TARGET[command]
    written = {"objects": 0, "journal": 0, "file:1": 1}.get(point, 2)
    for i, rel in enumerate(FILES):  # the journal's files are sorted by path: UTILS first
        want = w.images[target if i < written else start][rel]
        assert (repo / rel).read_bytes() == want, (rel, point)
        assert pyc_of(repo, rel).exists() == (point != "bytecode"), (rel, point)
    assert {p.name for p in stale_pycs(repo)} == (
        {pyc_of(repo, rel).name for rel in FILES[:written]} if point != "bytecode" else set()
    )
    journal = point != "objects"
    assert (store / "journal.json").exists() == journal
    record_state = target if point in ("state", "bytecode") else start
    assert recorded(repo) == expected_record(w, record_state), (point, recorded(repo))
    assert (store / "lock").exists()  # left by the killed holder; must not block anyone
    assert leftovers(repo) == []
    if command == "revert-force":  # the edited copy is kept before the transaction starts
        kept = list((store / "edited").iterdir())
        assert [p.read_bytes() for p in kept] == [w.images["edited"][COMM]]
    return journal


def check_next(w: World, repo: Path, command: str, pending: bool, want: list[str] | None = None) -> str:
    """Run the next command (in process): it finishes an interrupted transaction first, says
    so in one line, then does its own work; everything settled, verify agreeing.  Returns the state."""
    done = pk(*apply_args(w, repo, command))
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    finished = [line for line in lines(done) if line.startswith("finished an interrupted ")]
    assert len(finished) == pending, lines(done)
    if want is not None:
        assert lines(done) == want
    state = settled(repo, w)
    assert state == TARGET[command]
    check_verify(repo, w)
    return state


def revert_to_original(w: World, repo: Path) -> None:
    """Revert (in process) and check that the tag's exact bytes are back."""
    done = pk(*apply_args(w, repo, "revert"))
    assert (done.returncode, done.stderr) == (0, b"")
    assert settled(repo, w) == "original"
    assert {rel: (repo / rel).read_bytes() for rel in FILES} == w.images["original"]


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


def wait_group(pgid: int, timeout: float = HANG_GUARD) -> None:
    """Wait until no process of the group is left (orphaned git children of a killed run)."""
    deadline = time.monotonic() + timeout
    while _group_members(pgid):
        assert time.monotonic() < deadline, f"process group {pgid} still alive after {timeout}s"
        time.sleep(0.005)


# -- outside the checkout -----------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, mode, bytes (files), target (symlinks), mtime.  (Paths as
    strings: a whole installed package is taken several times a test, and Path objects cost more
    than the reading.)"""
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for folder, dirs, names in os.walk(root):
        below = os.path.relpath(folder, root)
        for name in dirs + names:
            path, rel = os.path.join(folder, name), name if below == "." else f"{below}/{name}"
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                out[rel] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", stat.S_IMODE(info.st_mode), f.read(), info.st_mtime_ns)
    return out


def git_state(repo: Path) -> dict[str, str]:
    """The user's git state upstream must leave alone."""
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "-q", "HEAD"),
        "index": git(repo, "ls-files", "-s"),
        "cached": git(repo, "diff", "--cached"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
    }


BRANCH = "patchkit/sm120-torch-symm-mem"  # upstream's default branch
USER_BRANCHES = {"main", "work"}  # the branches of a world's checkouts


def new_branches(repo: Path) -> dict[str, str]:
    """name -> commit of every branch but the user's own: the ones upstream made."""
    out = git(repo, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads").split("\n")
    return dict(line.split() for line in out if line and line.split()[0] not in USER_BRANCHES)


def work_tree(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
