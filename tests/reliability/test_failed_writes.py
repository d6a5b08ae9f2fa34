"""A write that fails in the middle of apply or revert (a full disk, an I/O error) is said as it is.

Before the journal is written nothing in the target changed: exit 3, the file named, "nothing
changed".  After it, the target is part-way: exit 4, the file named, the journal pending and what
finishes it; verify fails until the next apply or revert finishes the transaction, and that run
ends exactly where the interrupted one would have.  Never "refused, nothing changed" (exit 3) over
a half-patched target.

On the real SGLang 0.5.9 wheel installed by pip.  The disk fills for real in a small tmpfs
mounted in a private mount namespace (``unshare --map-root-user --mount``, which needs no root),
at every page count between "no room for the first object" and "room for everything" (``make
test``: every other one, and the last); and the ``PATCHKIT_FAULT=enospc@<point>`` hook fails the
write at each step of the transaction.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import invoke
from support.crash import FULL_SIZE, HANG_GUARD
from support.forked import Forks
from support.venvs import copy_venv

DC = "sglang/srt/distributed/device_communicators"
FILES = (f"{DC}/all_reduce_utils.py", f"{DC}/torch_symm_mem.py")
POINTS = ("objects", "journal", "file:1", "file:2", "state")
PAGES = 16  # the disk is filled up to its last 0, 1, ..., PAGES - 1 free pages
# make test: every other page count and the last; make test-reliability (FULL_SIZE): each.  Each outcome
# spans two page counts or more (apply: exit 3 up to 7 free pages, 4 at 8 and 9, 0 from 10; revert: 3, 4
# from 2, 0 from 4), so every other one still meets all three.
SAMPLED_PAGES = sorted({*range(0, PAGES, 2), PAGES - 1})


def _pending_line(path: str, op: str, state: Path) -> str:
    return (f"patchkit: {path}: No space left on device; the {op} stopped part-way and its journal {state}/journal.json "
            "is pending: the next `patchkit apply` or `patchkit revert` of this target finishes it first (`patchkit verify` "
            "fails until then)\n")


def _site(tmp_path: Path, sglang_venv: Path) -> Path:
    venv = copy_venv(sglang_venv, tmp_path / "V")
    return next((venv / "lib").glob("python3*/site-packages"))


def _files(site: Path) -> dict[str, bytes]:
    return {rel: (site / rel).read_bytes() for rel in FILES}


@pytest.fixture(scope="module")
def images(sglang_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """The release's files, and the same files once apply has patched them."""
    site = _site(tmp_path_factory.mktemp("images"), sglang_venv)
    original = _files(site)
    assert invoke("apply", str(site / "sglang")).returncode == 0
    return {"original": original, "patched": _files(site)}


@pytest.fixture(scope="module")
def forks():
    """What the runs whose write fails are forked from (support.forked)."""
    from support.crash import env

    runner = Forks(env(), HANG_GUARD, ("apply", "revert"))
    yield runner
    runner.close()


@pytest.mark.parametrize("op", ["apply", "revert"])
@pytest.mark.parametrize("point", POINTS)
def test_a_write_that_fails_at_each_step(tmp_path: Path, sglang_venv: Path, images, forks, op: str, point: str) -> None:
    """The run whose write fails is a process of its own (forked from one that has imported patchkit:
    support.forked); the commands before and after it (the apply it reverts, verify, the run that
    finishes it) run in this one."""
    site = _site(tmp_path, sglang_venv)
    state = site / ".patchkit-sglang"
    if op == "revert":
        assert invoke("apply", str(site / "sglang")).returncode == 0
    start, end = ("original", "patched") if op == "apply" else ("patched", "original")
    done = forks.run([op, str(site / "sglang")], {"PATCHKIT_FAULT": f"enospc@{point}"})
    assert done.stdout == b""
    if point == "objects":
        assert (done.returncode, done.stderr.decode()) == (3, (
            f"patchkit: {state}/objects: No space left on device; the {op} stopped before its first change: nothing changed\n"))
        assert _files(site) == images[start] and not (state / "journal.json").exists()
        return
    named = {"journal": state / "journal.json", "file:1": site / FILES[0], "file:2": site / FILES[1], "state": state / "state.json"}
    assert (done.returncode, done.stderr.decode()) == (4, _pending_line(str(named[point]), op, state))
    assert (state / "journal.json").is_file()
    verify = invoke("verify", str(site / "sglang"))
    assert verify.returncode == 1
    assert f"{state}/journal.json: an interrupted transaction is pending" in verify.stdout.decode()
    again = invoke(op, str(site / "sglang"))
    assert (again.returncode, again.stderr) == (0, b""), again.stderr.decode()
    # Three files: the DeepGEMM fix (on by default) patches configurer.py beside the two tables.
    assert f"finished an interrupted {op} (3 files)" in again.stdout.decode().splitlines()
    assert _files(site) == images[end] and not (state / "journal.json").exists()
    assert invoke("verify", str(site / "sglang")).returncode == (0 if end == "patched" else 1)


def test_a_file_size_limit_before_the_journal_changes_nothing(tmp_path: Path, sglang_venv: Path, images) -> None:
    """RLIMIT_FSIZE below the size of torch_symm_mem.py: its original cannot be stored, a real
    EFBIG before anything in the target is written: exit 3, the object named, nothing changed."""
    site = _site(tmp_path, sglang_venv)
    state = site / ".patchkit-sglang"
    limit = len(images["original"][FILES[1]]) - 1
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "patchkit", "apply", str(site / "sglang")], env=env, capture_output=True,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (3, b""), err
    assert err.startswith(f"patchkit: {state}/objects/") and err.endswith(
        ": File too large; the apply stopped before its first change: nothing changed\n") and err.count("\n") == 1, err
    assert _files(site) == images["original"] and not (state / "journal.json").exists()
    assert list((state / "objects").glob(".*.patchkit-tmp")) == []  # the temp file of the failed write is gone
    assert invoke("apply", str(site / "sglang")).returncode == 0
    assert _files(site) == images["patched"]


# -- a disk that is really full ----------------------------------------------------------------

# Runs in a private mount namespace: for each k, a fresh tmpfs holding a copy of the installed
# package, filled up to its last k free pages; then the command, verify, and (with the filler
# gone) the next command.  One JSON line per k.  Each command is ``python -m patchkit`` in a
# process of its own, forked from this one once it has imported patchkit's command line (the
# 80-odd commands would spend most of their time starting Python and importing libcst).
FULL_DISK = r"""
import json, os, subprocess, sys, tempfile
mount, template, op, pages, out = sys.argv[1:]
site = os.path.join(mount, "site")
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
sys.dont_write_bytecode = True
import importlib
import patchkit.__main__ as entry
import patchkit.cli, patchkit.commands.apply, patchkit.commands.revert, patchkit.commands.verify, patchkit.rewrite.evaluate
for name in PRELOAD:  # what the commands import when they run: imported once, not in each fork
    try:
        importlib.import_module(name)
    except ImportError:
        pass
def pk(*args):
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:  # in $TMPDIR, not on the full disk
        sys.stdout.flush(), sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # as python -m patchkit ARGS exits: 0, its SystemExit code, or 1 and the message
            code = 1
            try:
                os.dup2(stdout.fileno(), 1), os.dup2(stderr.fileno(), 2)
                sys.argv = ["patchkit", *args, os.path.join(site, "sglang")]
                entry.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if not isinstance(exc.code, (int, type(None))):
                    print(exc.code, file=sys.stderr)
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        stdout.seek(0), stderr.seek(0)
        return {"rc": os.waitstatus_to_exitcode(status), "out": stdout.read().decode(), "err": stderr.read().decode()}
def files():
    return {rel: open(os.path.join(site, rel), "rb").read().hex() for rel in FILES}
FILES = json.loads(os.environ["FILES"])
with open(out, "w") as log:
    for k in map(int, pages.split(",")):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mount], check=True)
        try:
            os.mkdir(site)
            names = [n for n in os.listdir(template) if n == "sglang" or n.startswith("sglang-")]
            subprocess.run(["cp", "-a", *(os.path.join(template, n) for n in names), site], check=True)  # copytree, 3x faster
            if op == "revert":
                assert pk("apply")["rc"] == 0
            filler = os.path.join(mount, "filler")
            with open(filler, "wb", buffering=0) as f:
                for size in (1 << 20, 4096, 1):
                    while True:
                        try:
                            if f.write(b"\0" * size) < size:
                                break
                        except OSError:
                            break
            os.truncate(filler, max(0, os.path.getsize(filler) - 4096 * k))
            row = {"k": k, "run": pk(op), "files": files(),
                   "journal": os.path.exists(os.path.join(site, ".patchkit-sglang", "journal.json"))}
            row["verify"] = pk("verify")
            os.unlink(filler)
            row["next"] = pk(op)
            row["after"] = files()
            row["verify_after"] = pk("verify")
            log.write(json.dumps(row) + "\n")
        finally:
            subprocess.run(["umount", mount], check=True)
"""


# The modules apply, revert and verify import as they run (a missing one is skipped: only time is at stake).
PRELOAD = (
    "patchkit.cli.apply", "patchkit.cli.revert", "patchkit.cli.verify", "patchkit.cli.options", "patchkit.judge.reasons",
    "patchkit.render.apply", "patchkit.render.revert", "patchkit.render.verify", "patchkit.render.servers",
    "patchkit.render.where", "patchkit.render.reasons", "patchkit.targets.dist_info", "patchkit.targets.evidence",
    "patchkit.targets.processes", "patchkit.targets.import_path", "patchkit.patch.read", "patchkit.patch.write",
    "patchkit.rewrite.diff", "patchkit.rewrite.backport", "patchkit.rewrite.comparison", "patchkit.rewrite.cut",
    "patchkit.rewrite.dict_key", "patchkit.rewrite.list_member", "patchkit.rewrite.output",
    "csv", "difflib", "email.parser", "random", "socket", "unidiff", "zipfile",
)
FULL_DISK = f"PRELOAD = {PRELOAD!r}\n" + FULL_DISK


def _namespace_ok(tmp_path: Path) -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run([unshare, "--map-root-user", "--mount", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                          capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_disk_that_fills_up_at_every_page(tmp_path: Path, sglang_venv: Path, images, op: str) -> None:
    if not _namespace_ok(tmp_path):
        pytest.skip("needs `unshare --map-root-user --mount` to mount a small tmpfs (the enospc@ hook test covers each step)")
    template = next((sglang_venv / "lib").glob("python3*/site-packages"))
    mount = tmp_path / "disk"
    mount.mkdir()
    log = tmp_path / "rows.jsonl"
    env = {**os.environ, "FILES": json.dumps(FILES)}
    pages = list(range(PAGES)) if FULL_SIZE else SAMPLED_PAGES
    done = subprocess.run(["unshare", "--map-root-user", "--mount", sys.executable, "-c", FULL_DISK, str(mount), str(template),
                           op, ",".join(map(str, pages)), str(log)], env=env, capture_output=True, timeout=900)
    assert done.returncode == 0, done.stderr.decode()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    start, end = ("original", "patched") if op == "apply" else ("patched", "original")
    want = {name: {rel: data.hex() for rel, data in image.items()} for name, image in images.items()}
    state = f"{mount}/site/.patchkit-sglang"
    seen = set()
    for row in rows:
        run, k = row["run"], row["k"]
        assert run["out"] == "" or run["rc"] == 0, (k, run)
        if run["rc"] == 3:  # no room for what the transaction stores before the journal
            assert run["err"] in (f"patchkit: {state}/lock: No space left on device; patchkit could not take the lock: nothing changed\n",
                                  f"patchkit: {state}/journal.json: No space left on device; the {op} stopped before its first change: nothing changed\n") \
                or run["err"].startswith(f"patchkit: {state}/objects/") and run["err"].endswith(
                f": No space left on device; the {op} stopped before its first change: nothing changed\n"), (k, run)
            assert row["files"] == want[start] and not row["journal"], k
        elif run["rc"] == 4:  # part-way: the file named, the journal pending
            path = run["err"][len("patchkit: "):].split(": No space left on device; ", 1)[0]
            assert run["err"] == _pending_line(path, op, Path(state)), (k, run)
            assert path.startswith(f"{mount}/site/"), (k, path)
            assert row["journal"] and row["verify"]["rc"] == 1 and "an interrupted transaction is pending" in row["verify"]["out"], k
            assert f"finished an interrupted {op} (3 files)" in row["next"]["out"].splitlines(), (k, row["next"])
        else:
            assert (run["rc"], run["err"]) == (0, ""), (k, run)
            assert row["files"] == want[end], k
        seen.add(run["rc"])
        assert (row["next"]["rc"], row["next"]["err"]) == (0, ""), (k, row["next"])
        assert row["after"] == want[end], k
        assert row["verify_after"]["rc"] == (0 if end == "patched" else 1), k
    assert [row["k"] for row in rows] == pages
    assert seen == {3, 4, 0}, [(r["k"], r["run"]["rc"]) for r in rows]
