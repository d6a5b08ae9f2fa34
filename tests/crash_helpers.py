"""Shared helpers of the crash tests (tests/target/test_crash_and_race.py) and the reliability suite (tests/reliability/).

Not a ``conftest.py``: tests/ has no ``__init__.py`` files, so a second
``conftest.py`` here would take the module name ``conftest`` from tests/conftest.py
and break every ``from conftest import ...`` of the other test modules.  The test
modules of this folder import this one by name (pytest puts their folder on
sys.path), and reach tests/conftest.py as ``conftest`` as the others do.

Some helpers are minimal copies of tests/target/test_crash_and_race.py's, extended to the
states this suite adds: a second cc pair applied (9 -> 11), plain folders, a file
edited after apply.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

from conftest import DC, GIT_ENV, ROOT, git, make_repo, run_cli

TAG = "v0.5.5"
VERSION = "0.5.5"
UTILS = f"{DC}/all_reduce_utils.py"  # sorted first: a transaction writes it first (file:1)
COMM = f"{DC}/torch_symm_mem.py"
FILES = (UTILS, COMM)
PATCH_NAME = "0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
POINTS = ("objects", "journal", "file:1", "file:2", "state", "bytecode")
TMP_SUFFIX = ".patchkit-tmp"
EDIT = b"# a local edit after apply\n"

# Every subprocess runs the patchkit of this working tree, whatever is installed.
PYTHONPATH = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

# The kill budget of tests/reliability/test_kills.py (see there and docs/RELIABILITY.md).
KILLS_ENV = "PATCHKIT_KILLS"


def env(**extra: str) -> dict[str, str]:
    """The environment for Popen: the test git identity, no stray patchkit settings."""
    full = dict(os.environ, **GIT_ENV, PYTHONPATH=PYTHONPATH)
    for name in ("PATCHKIT_SGLANG_REPO", "PATCHKIT_FAULT", "PATCHKIT_LOCK_TIMEOUT"):
        full.pop(name, None)
    full.update(extra)
    return full


def clean(done: subprocess.CompletedProcess | tuple, what: str = "") -> None:
    """No traceback, and a failure is said in at most one stderr line."""
    out, err, code = (done.stdout, done.stderr, done.returncode) if not isinstance(done, tuple) else done
    assert b"Traceback" not in out + err, f"{what}: traceback\n{err.decode(errors='replace')}"
    if code not in (0, -9):
        assert len(err.splitlines()) <= 1, f"{what}: more than one stderr line\n{err.decode(errors='replace')}"


def pk(*args: str, **extra: str) -> subprocess.CompletedProcess:
    """``python -m patchkit ARGS`` in a subprocess; never a traceback."""
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


RECORD_ENV = "PATCHKIT_RELIABILITY_LOG"


def record(test: str, **counts) -> None:
    """Print what a test did (pytest -s shows it); with $PATCHKIT_RELIABILITY_LOG, append it there as JSON."""
    line = json.dumps({"test": test, **counts}, sort_keys=True)
    print(line)
    path = os.environ.get(RECORD_ENV)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


# -- a world: origin repository, patches, template checkouts in every state -------------


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


def stale_pycs(repo: Path) -> list[Path]:
    """Timestamp pycs whose recorded mtime/size no longer match their source (checked here, not by patchkit)."""
    out = []
    for rel in FILES:
        pyc = pyc_of(repo, rel)
        if not pyc.exists():
            continue
        header = pyc.read_bytes()[:16]
        st = os.stat(repo / rel)
        recorded = (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little"))
        if recorded != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
            out.append(pyc)
    return out


@dataclass
class World:
    """The origin repository, its patches, and template checkouts to copy, in each state.

    States: "original" (the tag's bytes), "patched" (key 12 = key 10, the shipped patch),
    "other" (key 11 = key 9: another cc pair, generated from the checkout), "edited"
    (patched, then COMM edited by hand).  Kinds: "git" (state in .git/patchkit) and
    "plain" (no .git, state in .patchkit).
    """

    base: Path
    origin: Path
    patches: Path
    templates: dict = field(default_factory=dict)  # (kind, state) -> Path
    images: dict = field(default_factory=dict)  # state -> {path: bytes}

    def checkout(self, dest: Path, state: str = "original", kind: str = "git") -> Path:
        shutil.copytree(self.templates[(kind, state)], dest, symlinks=True)
        return dest.resolve()

    def state_of(self, repo: Path) -> str | None:
        """Which state all files are in (None if the files are in different states)."""
        found = set()
        for rel in FILES:
            data = (repo / rel).read_bytes()
            names = [s for s, image in self.images.items() if image[rel] == data and s != "edited"]
            if rel == COMM and data == self.images["edited"][COMM]:
                names = ["edited"]
            assert names, f"{repo / rel} holds bytes of no known state"
            found.add(names[0])
        if found == {"patched", "edited"}:  # UTILS patched + COMM edited
            return "edited"
        return found.pop() if len(found) == 1 else None


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
    return w


# -- what a checkout holds --------------------------------------------------------------


def leftovers(root: Path) -> list[str]:
    """Every ``.*.patchkit-tmp`` file under ``root`` (its .git and state dir included)."""
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.join(folder, n) for n in names if n.startswith(".") and n.endswith(TMP_SUFFIX)]
    return sorted(found)


def recorded(repo: Path) -> dict[str, str] | None:
    """path -> post sha256 of state.json, or None without one."""
    path = state_dir(repo) / "state.json"
    if not path.exists():
        return None
    return {f["path"]: f["post_sha256"] for f in json.loads(path.read_bytes())["files"]}


def expected_record(w: World, state: str) -> dict[str, str] | None:
    if state == "original":
        return None
    return {rel: digest(w.images[state][rel]) for rel in FILES}


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
        for rel in FILES:  # what a revert needs
            assert (store / "objects" / digest(w.images["original"][rel])).read_bytes() == w.images["original"][rel]
    return state


def expected_verify(repo: Path, w: World) -> int:
    """verify's exit code, worked out from what is on disk."""
    store = state_dir(repo)
    if (store / "journal.json").exists() or stale_pycs(repo):
        return 1
    state = w.state_of(repo)
    rec = recorded(repo)
    if state in ("patched", "edited") or (state == "other" and rec == expected_record(w, "other")):
        return 0  # "edited" only appends a comment: the tables still hold key 12 = key 10
    return 1


def check_verify(repo: Path, w: World) -> int:
    want = expected_verify(repo, w)
    done = pk("verify", str(repo))
    assert (done.returncode, done.stderr) == (want, b""), (want, done.returncode, done.stdout.decode(), done.stderr)
    if (state_dir(repo) / "journal.json").exists():
        assert any("an interrupted transaction is pending" in line for line in lines(done)), lines(done)
    return done.returncode


def check_interrupted(repo: Path, w: World) -> bool:
    """Right after a kill: half-patched only with a journal, and then verify says 1.  Returns: pending?"""
    pending = (state_dir(repo) / "journal.json").exists()
    if w.state_of(repo) is None:
        assert pending, "files in different states and no journal to finish the transaction"
    if pending:
        assert check_verify(repo, w) == 1
    return pending


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


def wait_group(pgid: int, timeout: float = 30) -> None:
    """Wait until no process of the group is left (orphaned git children of a killed run)."""
    deadline = time.monotonic() + timeout
    while _group_members(pgid):
        assert time.monotonic() < deadline, f"process group {pgid} still alive after {timeout}s"
        time.sleep(0.005)


# -- outside the checkout -----------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, mode, bytes (files), target (symlinks), mtime."""
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(folder) / name
            info = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                out[rel] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                out[rel] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes(), info.st_mtime_ns)
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


def work_tree(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
