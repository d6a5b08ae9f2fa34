"""An environment (``--python``) is one transaction: on a venv with the real sglang 0.5.9 and
flashinfer-python 0.6.4 wheels, four apply/revert runs raced, a kill at each fault point, Ctrl-C at
each millisecond of a run, and the state the previous patchkit (main at 14d9666) wrote.

After each: SGLang and FlashInfer are both as released, both applied, or the environment's
journal is pending and the next command finishes it; never the "original bytes are missing"
advice (false: nothing was missing), never a traceback.  ``make test`` runs a sample of each;
``make test-reliability`` (PATCHKIT_KILLS=400) the whole sweep: Ctrl-C at every millisecond from
0 to 300 ms after the start.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import PROCESS_ENV, invoke
from support.crash import FULL_SIZE
from support.mirror import default_cache, fetch_wheel
from support.venvs import copy_venv

FULL = FULL_SIZE  # make test-reliability
RACE_ROUNDS = (5, 24)  # make test, make test-reliability
SIGINT_SAMPLE = 11  # make test: 0, 5, 10, 15, 20 ms and six more drawn from 20-300; make test-reliability: every ms, 0-300
KILL_POINTS = ["objects", "journal", "file:1", "file:4", "file:7", "state", "bytecode"]
# docs/RELIABILITY.md's rows (tests/reliability/test_reliability_doc.py): (make test, make test-reliability)
ROWS = {
    "four apply/revert runs at once, rounds": RACE_ROUNDS,
    "SIGKILL at a fault point of apply and of revert, then the other": (2 * len(KILL_POINTS), 2 * len(KILL_POINTS)),
    "SIGINT at a millisecond after the start, then the next command": (SIGINT_SAMPLE, 301),
    "the previous patchkit's state (applied; killed mid-apply), reverted": (2, 2),
}
SGLANG = ["sglang/srt/distributed/device_communicators/all_reduce_utils.py",
          "sglang/srt/distributed/device_communicators/torch_symm_mem.py", "sglang/srt/layers/communicator.py"]
FLASHINFER = ["flashinfer/jit/comm.py", "flashinfer/aot.py", "flashinfer/data/include/flashinfer/utils.cuh",
              "flashinfer/data/csrc/trtllm_allreduce.cu"]
FILES = SGLANG + FLASHINFER
ENV_JOURNAL = ".patchkit-environment/journal.json"
MISSING = b"original bytes are missing"
PREVIOUS = "14d9666"  # main before environments were one transaction: a journal and a state per project


class Env:
    """A copy of the session's venv: its python, site-packages, and the bytes as released and as patched."""

    def __init__(self, template: Path, dest: Path) -> None:
        self.venv = copy_venv(template, dest)
        self.python = str(self.venv / "bin" / "python")
        self.site = next((self.venv / "lib").glob("python3*/site-packages"))
        self.original = self.read()
        done = invoke("apply", "--python", self.python, "--all-fixes")
        assert done.returncode == 0, done.stderr
        self.patched = self.read()
        assert all(self.patched[f] != self.original[f] for f in FILES)
        assert invoke("revert", "--python", self.python).returncode == 0
        assert self.read() == self.original

    def read(self) -> dict[str, bytes]:
        return {f: (self.site / f).read_bytes() for f in FILES}

    def files(self) -> str:
        """One letter a file: o as released, p patched, ? neither."""
        now = self.read()
        return "".join("o" if now[f] == self.original[f] else "p" if now[f] == self.patched[f] else "?" for f in FILES)

    def pending(self) -> bool:
        return (self.site / ENV_JOURNAL).exists()

    def settled(self, what: str) -> str:
        """The environment is in one state (or its journal pending); returns "o", "p" or "pending"."""
        files = self.files()
        if self.pending():
            return "pending"
        assert files in ("o" * len(FILES), "p" * len(FILES)), f"{what}: half an environment, no journal: {files}"
        verify = invoke("verify", "--python", self.python, "--all-fixes")
        assert verify.returncode == (0 if files[0] == "p" else 1), (what, verify.stdout.decode())
        return files[0]


@pytest.fixture(scope="session")
def two_projects(prebuilt) -> Path:
    """A venv with the real sglang 0.5.9 and flashinfer-python 0.6.4 wheels (a template)."""
    return prebuilt.venv(fetch_wheel("0.5.9", default_cache()), fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))


def _popen(*args: str, env: dict | None = None) -> subprocess.Popen:
    full = dict(os.environ)
    for key, value in {**PROCESS_ENV, **(env or {})}.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return subprocess.Popen([sys.executable, "-m", "patchkit", *args], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def _args(e: Env, op: str) -> list[str]:
    return [op, "--python", e.python, *(["--all-fixes"] if op == "apply" else [])]


def _finish(e: Env, what: str) -> None:
    """The next command finishes a pending journal; the environment then is in one state."""
    if e.pending():
        op = random.choice(["apply", "revert"])
        done = invoke(*_args(e, op))
        assert done.returncode == 0, (what, done.stderr.decode())
        assert not e.pending()
        assert e.files() == ("p" if op == "apply" else "o") * len(FILES), what
    e.settled(what)


def test_four_apply_and_revert_runs_raced_leave_one_state(two_projects: Path, tmp_path: Path) -> None:
    """Four runs at once, apply and revert mixed, on one environment: each exits 0, or 3 with the
    lock's one line; never the "original bytes are missing" advice; SGLang and FlashInfer end in
    one state, the last writer's, verify agreeing."""
    e = Env(two_projects, tmp_path / "V")
    rng = random.Random(41)
    rounds = RACE_ROUNDS[FULL]
    deadline = time.monotonic() + (240 if FULL else 60)
    for rnd in range(rounds):
        ops = [rng.choice(["apply", "revert"]) for _ in range(4)]
        if len(set(ops)) == 1:
            ops[rnd % 4] = "revert" if ops[0] == "apply" else "apply"
        procs = [_popen(*_args(e, op), env={"PATCHKIT_LOCK_TIMEOUT": "60"}) for op in ops]
        for op, proc in zip(ops, procs, strict=True):
            out, err = proc.communicate(timeout=120)
            assert MISSING not in err, err.decode()
            assert (proc.returncode, err) == (0, b""), (rnd, op, err.decode())
        assert not e.pending()
        assert e.settled(f"round {rnd} {ops}") in ("o", "p")
        assert time.monotonic() < deadline, f"{rnd + 1} rounds took too long"


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_killed_at_each_step_of_an_environment(two_projects: Path, tmp_path: Path, op: str) -> None:
    """SIGKILL at each fault point (PATCHKIT_FAULT) of an environment's transaction: before the
    journal, both projects as before; after it, the one journal is pending, and the next apply or
    revert finishes it for both."""
    e = Env(two_projects, tmp_path / "V")
    for i, point in enumerate(KILL_POINTS):
        start = "o" if op == "apply" else "p"
        if e.files()[0] != start:
            assert invoke(*_args(e, "revert" if start == "o" else "apply")).returncode == 0
        proc = _popen(*_args(e, op), env={"PATCHKIT_FAULT": point})
        proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, point
        if point == "objects":
            assert (e.files(), e.pending()) == (start * len(FILES), False), point
        else:
            assert e.pending(), point
            verify = invoke("verify", "--python", e.python, "--all-fixes")
            assert verify.returncode == 1 and b"pending" in verify.stdout + verify.stderr, (point, verify.stdout.decode())
        nxt = ["apply", "revert"][i % 2]
        done = invoke(*_args(e, nxt))
        assert done.returncode == 0, (point, done.stderr.decode())
        assert (e.files(), e.pending()) == (("p" if nxt == "apply" else "o") * len(FILES), False), point
        e.settled(point)


def _offsets() -> list[int]:
    if FULL:
        return list(range(301))
    return [0, 5, 10, 15, 20, *sorted(random.Random().sample(range(21, 301), SIGINT_SAMPLE - 5))]


def test_ctrl_c_at_each_millisecond(two_projects: Path, tmp_path: Path) -> None:
    """SIGINT to the process group of an apply or revert of the environment, at each offset after
    its start: a run that reached patchkit's first statement exits 130 with "patchkit:
    interrupted" (and what was left pending, if anything) and no traceback, or had ended (0); one
    that had not is ended by the signal, with nothing of patchkit's in what it printed.  The
    environment is all as released, all applied, or its journal pending; the next command finishes it."""
    e = Env(two_projects, tmp_path / "V")
    seen: dict[str, int] = {}
    for ms in _offsets():
        op = "revert" if e.files()[0] == "p" else "apply"
        proc = _popen(*_args(e, op))
        time.sleep(ms / 1000)
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        out, err = proc.communicate(timeout=120)
        what = f"{op} at {ms} ms: rc {proc.returncode}: {err.decode()!r}"
        assert b"Traceback" not in err or b"/patchkit/" not in err, what
        assert b"KeyboardInterrupt" not in err or b"/patchkit/" not in err, what
        if proc.returncode == 130:
            assert err == b"patchkit: interrupted\n" or err.startswith(b"patchkit: interrupted: the "), what
        elif proc.returncode == 0:
            assert err == b"", what
        else:  # the signal came before patchkit's first statement (CPython's own start-up, runpy's search for
            # the module): Python's own words, which may name the module, but no frame of patchkit's files
            assert proc.returncode in (-signal.SIGINT, 1) and b"/patchkit/" not in err and b"patchkit:" not in err, what
        state = e.settled(what)
        seen[f"{proc.returncode} {state}"] = seen.get(f"{proc.returncode} {state}", 0) + 1
        _finish(e, what)
    assert any(k.startswith("130 ") for k in seen), seen
    assert sum(seen.values()) == ROWS["SIGINT at a millisecond after the start, then the next command"][FULL]


def test_state_of_the_previous_patchkit_is_reverted_exactly(two_projects: Path, tmp_path: Path) -> None:
    """What main at 14d9666 wrote (a state dir per project, and a journal per project: it is run from
    the repository's history, killed in the middle of its apply) is finished and reverted by this
    patchkit: every file its wheel's bytes."""
    repo = Path(__file__).resolve().parents[2]
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(repo), "archive", PREVIOUS, "patchkit", "patches", "templates"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    e = Env(two_projects, tmp_path / "V")
    env = {"PYTHONPATH": str(old), "PYTHONPYCACHEPREFIX": None, "PYTHONDONTWRITEBYTECODE": "1"}

    def run_old(*args: str, fault: str | None = None) -> subprocess.CompletedProcess:
        full = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
        full.update({k: v for k, v in env.items() if v is not None}, **({"PATCHKIT_FAULT": fault} if fault else {}))
        return subprocess.run([sys.executable, "-m", "patchkit", *args], env=full, capture_output=True, cwd=old)

    done = run_old(*_args(e, "apply"))
    assert done.returncode == 0, done.stderr.decode()
    assert e.files() == "p" * len(FILES)
    assert (e.site / ".patchkit-sglang/state.json").is_file() and (e.site / ".patchkit-flashinfer/state.json").is_file()
    back = invoke("revert", "--python", e.python)
    assert back.returncode == 0, back.stderr.decode()
    assert e.read() == e.original

    # Killed in the middle of FlashInfer's part: SGLang applied, FlashInfer's own journal pending.
    killed = run_old(*_args(e, "apply"), fault="file:2")
    assert killed.returncode == -signal.SIGKILL
    assert (e.site / ".patchkit-flashinfer/journal.json").is_file() or (e.site / ".patchkit-sglang/journal.json").is_file()
    back = invoke("revert", "--python", e.python)
    assert back.returncode == 0, back.stderr.decode()
    assert b"finished an interrupted apply (" in back.stdout, back.stdout.decode()
    assert e.read() == e.original
    assert not list(e.site.glob(".patchkit-*/journal.json"))
