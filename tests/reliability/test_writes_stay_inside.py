"""Nothing is ever written outside the target and its state dir, whatever links the target holds.

On the real SGLang 0.5.9 release: its PyPI wheel installed by pip (``sglang_venv``), a git
checkout of its files (``prebuilt.release``) and the same files as a plain folder.  Each probe
plants a symlink to a file or folder outside the target where patchkit writes, and checks
the outside bytes and mtimes, the exact exit code and line, and that the target is either
untouched or exactly the shipped patch's post-image (never half-applied).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import invoke
from support.crash import snapshot
from support.repos import GIT_ENV, git
from support.venvs import copy_venv

DC = "sglang/srt/distributed/device_communicators"
FILES = (f"{DC}/all_reduce_utils.py", f"{DC}/torch_symm_mem.py")  # what the default fix patches in 0.5.9
LINK = "refused: is a symlink; patchkit never reads or writes its state through one (remove it)\n"


def _manifest() -> dict:
    from patchkit.data import shipped

    return json.loads((shipped("patches") / "0.5.9" / "manifest.json").read_bytes())


def _posts() -> dict[str, str]:
    """repository path -> sha256 of the shipped torch-symm-mem patch's post-image."""
    (entry,) = [e for e in _manifest()["series"] if e["fix"] == "torch-symm-mem"]
    return {f["path"]: f["post_sha256"] for f in entry["files"]}


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


class Kind:
    """A target of the real release: where its files are, its state dir, how to name it."""

    def __init__(self, name: str, root: Path, package: Path, state: Path, args: list[str]) -> None:
        self.name, self.root, self.package, self.state, self.args = name, root, package, state, args

    def file(self, rel: str) -> Path:
        return self.package / rel

    def repo_path(self, rel: str) -> str:
        return rel if self.name == "wheel" else f"python/{rel}"


@pytest.fixture(scope="module")
def release_checkout(prebuilt) -> Path:
    given = os.environ.get("PATCHKIT_REAL_MIRROR_059")
    return Path(given) if given else prebuilt.release("sglang", "0.5.9")


KINDS = ("wheel", "checkout", "folder")
STATE_ENTRIES = ("state.json", "objects", "aside", ".state.json.patchkit-tmp")
LOCK_COMMANDS = ("apply", "revert")
STATE_DIR_COMMANDS = ("apply", "verify", "status", "revert")
INSIDE_COMMANDS = ("revert", "apply --all-fixes", "apply")
RECORDED_COMMANDS = ("apply --all-fixes", "status", "verify", "apply --fix torch-symm-mem", "revert")


def _make(kind: str, tmp_path: Path, sglang_venv: Path, release_checkout: Path) -> Kind:
    if kind == "wheel":
        venv = copy_venv(sglang_venv, tmp_path / "V")
        site = next((venv / "lib").glob("python3*/site-packages"))
        return Kind(kind, site, site, site / ".patchkit-sglang", ["--python", str(venv / "bin" / "python")])
    repo = tmp_path / "sglang"
    shutil.copytree(release_checkout, repo, symlinks=True, ignore=None if kind == "checkout" else shutil.ignore_patterns(".git"))
    state = repo / ".git" / "patchkit" if kind == "checkout" else repo / ".patchkit"
    return Kind(kind, repo, repo / "python", state, [str(repo)])


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the target with a file and a folder in it, that patchkit must never touch."""
    out = tmp_path / "outside"
    (out / "dir").mkdir(parents=True)
    (out / "precious").write_bytes(b"the user's file\n")
    (out / "dir" / "keep").write_bytes(b"keep\n")
    os.utime(out / "precious", ns=(1_000_000_000, 1_000_000_000))
    return out


def _one_line(done, line: str) -> None:
    assert (done.returncode, done.stdout, done.stderr.decode()) == (3, b"", f"patchkit: {line}")


@pytest.mark.parametrize("kind", KINDS[:2])
def test_a_committed_symlink_at_the_old_temp_name_is_never_followed(kind, tmp_path, sglang_venv, release_checkout, outside):
    """A fork commits ``.torch_symm_mem.py.patchkit-tmp -> /some/file`` (and one for
    all_reduce_utils.py): apply writes each file through a temp name of its own, so the
    outside file keeps its bytes and mtime, the patched files are regular files holding
    the shipped post-image, and the links stay as they were; verify and revert hold."""
    t = _make(kind, tmp_path, sglang_venv, release_checkout)
    links = [t.file(rel).with_name(f".{Path(rel).name}.patchkit-tmp") for rel in FILES]
    for link in links:
        link.symlink_to(outside / "precious")
    if kind == "checkout":
        git(t.root, "add", "-f", *[str(p.relative_to(t.root)) for p in links])
        git(t.root, "commit", "-qm", "a fork's commit")
    before_outside = snapshot(outside)
    originals = {rel: t.file(rel).read_bytes() for rel in FILES}

    done = invoke("apply", *t.args)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert snapshot(outside) == before_outside
    posts = _posts()
    for rel in FILES:
        assert not t.file(rel).is_symlink() and _sha(t.file(rel)) == posts[f"python/{rel}"], rel
    assert [os.readlink(p) for p in links] == [str(outside / "precious")] * 2
    assert invoke("verify", *t.args).returncode == 0
    done = invoke("revert", *t.args)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert {rel: t.file(rel).read_bytes() for rel in FILES} == originals
    assert [os.readlink(p) for p in links] == [str(outside / "precious")] * 2
    assert snapshot(outside) == before_outside


@pytest.mark.parametrize("kind", KINDS)
def test_a_symlinked_lock_is_refused(kind, tmp_path, sglang_venv, release_checkout, outside: Path) -> None:
    """``<state dir>/lock -> /some/file``: apply and revert refuse (exit 3, one line naming
    the lock) before anything is written: the file is neither truncated nor given a PID."""
    target = _make(kind, tmp_path, sglang_venv, release_checkout)
    target.state.mkdir()
    lock = target.state / "lock"
    lock.symlink_to(outside / "precious")
    before, before_outside = snapshot(target.package), snapshot(outside)
    for command in LOCK_COMMANDS:
        _one_line(invoke(command, *target.args), f"{lock}: {LINK}")
        assert snapshot(outside) == before_outside
        assert snapshot(target.package) == before
    assert sorted(os.listdir(target.state)) == ["lock"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["dir", "precious", "missing"])
def test_a_symlinked_state_dir_is_refused(kind, tmp_path, sglang_venv, release_checkout, outside: Path, where: str) -> None:
    """The state dir itself a link (to a folder, a file, or nothing yet): every command that
    reads or writes state refuses it in one line, and nothing is written where it points."""
    target = _make(kind, tmp_path, sglang_venv, release_checkout)
    target.state.symlink_to(outside / where)
    before, before_outside = snapshot(target.package), snapshot(outside)
    for command in STATE_DIR_COMMANDS:
        _one_line(invoke(command, *target.args), f"{target.state}: {LINK}")
        assert snapshot(outside) == before_outside, command
        assert snapshot(target.package) == before, command


@pytest.mark.parametrize("name", STATE_ENTRIES)
def test_a_symlink_inside_the_state_dir_is_refused(tmp_path, sglang_venv, release_checkout, outside, name: str) -> None:
    """After a real apply, one entry of the state dir becomes a link to a copy outside (the
    objects folder: prune would delete what is there): revert and apply refuse it, the
    patched files stay exactly the post-image, and the outside copy is untouched.  (An apply
    with nothing to write takes no lock and reads no set-aside state: it answers as before.)"""
    t = _make("wheel", tmp_path, sglang_venv, release_checkout)
    assert invoke("apply", *t.args).returncode == 0
    entry = t.state / name
    copy = outside / name
    if entry.is_dir():
        shutil.copytree(entry, copy)
        (copy / "unrelated").write_bytes(b"not patchkit's\n")
        shutil.rmtree(entry)
    elif entry.exists():
        shutil.copy2(entry, copy)
        entry.unlink()
    else:
        copy.mkdir()
    entry.symlink_to(copy)
    before, before_outside = snapshot(t.package), snapshot(outside)
    for command in INSIDE_COMMANDS:
        done = invoke(*command.split(), *t.args)
        if command == "apply" and name == "aside":  # nothing to write: no lock taken, nothing read there
            assert (done.returncode, done.stderr) == (0, b"")
            assert done.stdout.decode().splitlines()[-1].startswith("already applied (shipped patch ")
        else:
            _one_line(done, f"{entry}: {LINK}")
        assert snapshot(outside) == before_outside, command
        assert snapshot(t.package) == before, command
    posts = _posts()
    assert all(_sha(t.file(rel)) == posts[f"python/{rel}"] for rel in FILES)


# -- every file opened for writing, by path as the kernel resolved it ---------------------------

# Runs patchkit's command line with every way of opening, creating, renaming or removing a file
# recorded (os.open by the file its descriptor names once open, so a followed link shows where it
# led; open(), rename, remove, mkdir and rmdir through audit events), one path a line.
RECORD_WRITES = r"""
import os, sys
log = open(sys.argv.pop(1), "a", buffering=1)
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
def where(path, dir_fd=None):
    path = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(path):
        path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    return os.path.realpath(path)
real_open = os.open
def recorded_open(path, flags, mode=0o777, *, dir_fd=None):
    fd = real_open(path, flags, mode, dir_fd=dir_fd)
    if flags & WRITE:
        log.write(f"open {os.readlink(f'/proc/self/fd/{fd}')}\n")
    return fd
os.open = recorded_open
def hook(event, args):
    if event == "open" and isinstance(args[1], str) and any(c in args[1] for c in "wax+") and isinstance(args[0], (str, bytes, os.PathLike)):
        log.write(f"open {where(args[0])}\n")
    elif event == "os.rename":
        log.write(f"rename {where(args[0], args[2])}\n" f"rename {where(args[1], args[3])}\n")
    elif event in ("os.remove", "os.rmdir"):
        log.write(f"remove {where(args[0], args[1])}\n")
    elif event == "os.mkdir":
        log.write(f"mkdir {where(args[0], args[2])}\n")
sys.addaudithook(hook)
from patchkit.__main__ import main
main()
"""


def _recorded(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / f"writes-{len(list(tmp_path.glob('writes-*')))}.log"
    env = dict(os.environ, **GIT_ENV, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPYCACHEPREFIX", None)
    done = subprocess.run([sys.executable, "-c", RECORD_WRITES, str(log), *args], env=env, capture_output=True)
    return done, log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("kind", KINDS[:2])
def test_nothing_outside_the_target_and_its_state_dir_is_opened_for_writing(kind, tmp_path, sglang_venv, release_checkout, outside):
    """apply (every fix), status, verify, apply of the default fix, revert, with links at the old
    temp names: every path opened for writing, created, renamed or removed lies in a folder of a
    patched file or in the state dir, or the environment's (``--python``), or is /dev/null."""
    t = _make(kind, tmp_path, sglang_venv, release_checkout)
    for rel in FILES:
        t.file(rel).with_name(f".{Path(rel).name}.patchkit-tmp").symlink_to(outside / "precious")
    folders = {str(t.file(rel).parent) for rel in (*FILES, "sglang/srt/layers/communicator.py")}
    home = [str(t.root / ".patchkit-environment")] if kind == "wheel" else []  # --python: the environment's state dir
    allowed = (*folders, str(t.state), *home)
    seen: list[str] = []
    for command in RECORDED_COMMANDS:
        done, writes = _recorded(tmp_path, *command.split(), *t.args)
        assert (done.returncode, done.stderr) == (0, b""), (command, done.stderr.decode())
        seen += writes
        stray = [w for w in writes if w.split(" ", 1)[1] != os.devnull and not any(
            w.split(" ", 1)[1] == a or w.split(" ", 1)[1].startswith(a + "/") for a in allowed)]
        assert stray == [], command
    assert any(w.startswith("rename ") and w.endswith("/torch_symm_mem.py") for w in seen)  # the recorder saw the writes
    assert (outside / "precious").read_bytes() == b"the user's file\n"


def test_generate_refuses_a_symlinked_version_folder(tmp_path, release_checkout, outside) -> None:
    """``--out`` holding ``0.5.9 -> /elsewhere`` with files named as generate's (series, a .patch):
    generate would delete the stale ones there and write its own; it refuses, exit 3, and the
    folder it points to keeps every byte."""
    out = tmp_path / "patches"
    out.mkdir()
    (outside / "dir" / "series").write_bytes(b"someone's series\n")
    (outside / "dir" / "0001-theirs.patch").write_bytes(b"someone's patch\n")
    (out / "0.5.9").symlink_to(outside / "dir")
    before = snapshot(outside)
    done = invoke("generate", "--repo", str(release_checkout), "--tag", "v0.5.9", "--out", str(out))
    assert done.returncode == 3, done.stderr.decode()
    assert done.stderr.decode() == f"patchkit: {out / '0.5.9'}: refused: is a symlink; patchkit never writes through one\n"
    assert snapshot(outside) == before
