"""The last-resort boundary: Ctrl-C at any moment is ``patchkit: interrupted`` and exit 130, with
every child process patchkit started ended first; an exception patchkit did not expect is one line
asking for a report and exit 70 (EX_SOFTWARE).  Never click's ``Aborted!``, never a traceback.

Ctrl-C is a real SIGINT to the process group of a ``patchkit`` started in a session of its own,
as a terminal sends it to its foreground job: while the command line is being imported, while a
stand-in nvidia-smi hangs (in a session of its own, so it gets no SIGINT), while the interpreter
probe of ``--python`` hangs, while apply waits for another run's lock, and while watch follows a log.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.cli import PROCESS_ENV
from support.repos import GIT_ENV, make_repo
from support.venvs import copy_venv

PATCHKIT = [sys.executable, "-m", "patchkit"]


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ, **GIT_ENV)
    for key, value in {**PROCESS_ENV, **(extra or {})}.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _start(args: list[str], env: dict | None = None, prefix: list[str] = PATCHKIT) -> subprocess.Popen:
    # Unbuffered pipes (bufsize=0): a readline takes its one line and leaves the rest in the pipe
    # for communicate(); a buffered reader could keep bytes it read ahead, which communicate()
    # never sees (on a busy machine the child has written more by the time the test reads).
    return subprocess.Popen([*prefix, *args], env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, bufsize=0)


def _wait_for(condition, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def _interrupt(proc: subprocess.Popen) -> tuple[int, bytes, bytes]:
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def _gone(pid: int) -> bool:
    """The process ``pid`` has ended (a zombie waiting for its reaper counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


@contextmanager
def _opened(path: Path):
    """Yields ``wait(limit)``, which returns once someone opens ``path`` (inotify IN_OPEN): the
    lock a waiting run opens, tries and closes again every 50 ms."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        assert libc.inotify_add_watch(fd, os.fsencode(path), 0x20) >= 0, os.strerror(ctypes.get_errno())  # IN_OPEN

        def wait(limit: float) -> None:
            ready, _, _ = select.select([fd], [], [], limit)
            assert ready, f"nobody opened {path} within {limit} s"
            os.read(fd, 4096)

        yield wait
    finally:
        os.close(fd)


def _open_files(pid: int) -> set[str]:
    """The files process ``pid`` has open now."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            continue
    return found


INTERRUPTED = (130, b"", b"patchkit: interrupted\n")


def test_ctrl_c_while_the_command_line_is_imported(tmp_path: Path) -> None:
    """SIGINT once ``-X importtime`` shows click being imported (patchkit's command line, after
    patchkit.__main__ installed its handler): the one line, exit 130."""
    repo = make_repo(tmp_path / "sglang")
    proc = _start(["apply", str(repo)], prefix=[sys.executable, "-X", "importtime", "-m", "patchkit"])
    seen = []
    while True:
        line = proc.stderr.readline()
        assert line, b"".join(seen).decode()
        seen.append(line)
        if line.startswith(b"import time:") and b"click" in line:
            break
    code, out, err = _interrupt(proc)
    rest = [line for line in err.splitlines(keepends=True) if not line.startswith(b"import time:")]
    assert (code, out, b"".join(rest)) == INTERRUPTED
    assert not (repo / ".git" / "patchkit").exists()


def _hung_smi(folder: Path) -> tuple[dict, Path]:
    """A stand-in nvidia-smi that writes its pid, then hangs in a child (as standin.py's "hung")."""
    pid = folder / "smi.pid"
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho $$ > '{pid}.tmp' && mv '{pid}.tmp' '{pid}'\nsleep 1000; exit 0\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return {"PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]])}, pid


@pytest.mark.parametrize("command", ["doctor", "apply --to-cc auto"])
def test_ctrl_c_while_nvidia_smi_hangs(tmp_path: Path, sglang_venv: Path, command: str) -> None:
    """nvidia-smi runs in its own session: the terminal's SIGINT never reaches it, so patchkit
    ends its whole session (the shell and its sleep) before it exits 130."""
    venv = copy_venv(sglang_venv, tmp_path / "V")
    env, pid_file = _hung_smi(tmp_path / "smi")
    proc = _start([*command.split(), "--python", str(venv / "bin" / "python")], env)
    _wait_for(pid_file.exists, "the stand-in nvidia-smi to start")
    smi = int(pid_file.read_text())
    children = [int(p) for p in Path(f"/proc/{smi}/task/{smi}/children").read_text().split()]
    assert (code := _interrupt(proc)) == INTERRUPTED, code
    for pid in (smi, *children):
        _wait_for(lambda pid=pid: _gone(pid), f"pid {pid} of the stand-in's session to end", 5.0)


def test_ctrl_c_while_the_interpreter_probe_hangs(tmp_path: Path) -> None:
    """``--python`` names an interpreter that never answers: SIGINT ends it and patchkit, exit 130."""
    pid_file = tmp_path / "probe.pid"
    exe = tmp_path / "python3"
    exe.write_text(f"#!/bin/sh\necho $$ > '{pid_file}.tmp' && mv '{pid_file}.tmp' '{pid_file}'\nsleep 1000\n")
    exe.chmod(0o755)
    proc = _start(["verify", "--python", str(exe)])
    _wait_for(pid_file.exists, "the interpreter probe to start")
    probe = int(pid_file.read_text())
    assert _interrupt(proc) == INTERRUPTED
    _wait_for(lambda: _gone(probe), "the probe to end", 5.0)


def test_ctrl_c_while_waiting_for_the_lock(tmp_path: Path) -> None:
    """Another run holds the lock: apply waits (it has opened the lock file), Ctrl-C ends the
    wait, nothing is written."""
    repo = make_repo(tmp_path / "sglang")
    state = repo / ".git" / "patchkit"
    state.mkdir()
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242\n")
    before = {p: p.read_bytes() for p in repo.rglob("*.py")}
    try:
        with _opened(state / "lock") as opened:
            proc = _start(["apply", str(repo)], {"PATCHKIT_LOCK_TIMEOUT": "60"})
            opened(30.0)
        assert _interrupt(proc) == INTERRUPTED
    finally:
        os.close(fd)
    assert {p: p.read_bytes() for p in repo.rglob("*.py")} == before
    assert sorted(os.listdir(state)) == ["lock"]


def test_ctrl_c_while_watch_follows_a_log(tmp_path: Path) -> None:
    """watch's exit 1 means "the server crashed": an interrupt is 130, never 1."""
    log = tmp_path / "server.log"
    log.write_bytes(b"[2026-02-11 10:02:41] server_args=ServerArgs(model_path='Qwen/Qwen3-8B')\n")
    proc = _start(["watch", str(log)])
    _wait_for(lambda: str(log) in _open_files(proc.pid), "watch to open the log")
    assert _interrupt(proc) == INTERRUPTED


# -- exceptions patchkit did not expect -------------------------------------------------------

# Runs patchkit's command line with one of its functions made to raise, as a bug or an exhausted
# machine would: ``where`` is module:function, ``what`` the exception.
RAISING = r"""
import importlib, sys
where, what = sys.argv.pop(1), sys.argv.pop(1)
module, name = where.split(":")
owner = importlib.import_module(module)
cls, _, attr = name.rpartition(".")
target = getattr(owner, cls) if cls else owner
def broken(*args, **kwargs):
    if what == "RecursionError":
        def down(n):
            return down(n + 1)
        down(0)
    if what == "Ctrl-C while a class is made":  # as a SIGINT during an import's class statement (platform's uname_result)
        from patchkit.errors import Interrupted
        class Stop:
            def __set_name__(self, owner, name):
                raise Interrupted()
        class Made:  # Python 3.11 wraps what __set_name__ raises: RuntimeError("Error calling __set_name__ ...")
            field = Stop()
    raise {"MemoryError": MemoryError(), "ZeroDivisionError": ZeroDivisionError("division by zero")}[what]
setattr(target, attr, broken)
from patchkit.__main__ import main
main()
"""

REPORT = "; this is a bug in patchkit: please report it with the command that gave it\n"
# Where verify calls Session.open (the call the test makes raise): the line the message names.
_VERIFY = Path(__file__).resolve().parents[2] / "patchkit" / "commands" / "verify.py"
OPEN_LINE = next(i for i, line in enumerate(_VERIFY.read_text().splitlines(), 1) if "s = Session.open(" in line)


@pytest.mark.parametrize("what,said", [
    ("MemoryError", "MemoryError"),
    ("RecursionError", "RecursionError: maximum recursion depth exceeded"),
    ("ZeroDivisionError", "ZeroDivisionError: division by zero"),
])
def test_an_unexpected_exception_is_one_line_and_exit_70(tmp_path: Path, what: str, said: str) -> None:
    repo = make_repo(tmp_path / "sglang")
    done = subprocess.run([sys.executable, "-c", RAISING, "patchkit.targets.session:Session.open", what, "verify", str(repo)],
                          env=_env(), capture_output=True)
    assert (done.returncode, done.stdout) == (70, b""), done.stderr.decode()
    assert done.stderr.decode() == f"patchkit: internal error ({said} at patchkit/commands/verify.py:{OPEN_LINE}){REPORT}"
    json_done = subprocess.run([sys.executable, "-c", RAISING, "patchkit.targets.session:Session.open", what, "verify",
                                str(repo), "--json"], env=_env(), capture_output=True)
    import json

    doc = json.loads(json_done.stdout)
    assert (json_done.returncode, doc["exit_code"], doc["ok"]) == (70, 70, False)
    assert doc["error"] == f"internal error ({said} at patchkit/commands/verify.py:{OPEN_LINE}){REPORT.rstrip()}"


def test_an_unexpected_exception_outside_a_command_is_exit_70(tmp_path: Path) -> None:
    """In click's parsing, before any command runs (a cc option's parser): the same line."""
    done = subprocess.run([sys.executable, "-c", RAISING, "patchkit.cc:CC.parse", "MemoryError",
                           "apply", str(tmp_path), "--to-cc", "12"], env=_env(), capture_output=True)
    assert (done.returncode, done.stdout) == (70, b""), done.stderr.decode()
    options = Path(__file__).resolve().parents[2] / "patchkit" / "cli" / "options.py"
    line = next(i for i, text in enumerate(options.read_text().splitlines(), 1) if "return CC.parse(" in text)
    assert done.stderr.decode() == f"patchkit: internal error (MemoryError at patchkit/cli/options.py:{line}){REPORT}"


@pytest.mark.parametrize("where, args", [
    ("patchkit.targets.session:Session.open", ["verify"]),  # inside a command: the command's boundary
    ("patchkit.cc:CC.parse", ["apply", "--to-cc", "12"]),  # while click parses: the last resort
])
def test_a_ctrl_c_python_wrapped_while_a_class_was_made_is_an_interrupt(tmp_path: Path, where: str, args: list[str]) -> None:
    """A SIGINT that lands while a class statement runs (an import's) comes out of Python 3.11 as a
    RuntimeError raised from it ("Error calling __set_name__ ..."): still the one line and exit 130,
    never an internal error (the Ctrl-C-at-each-millisecond sweep met one at 10 ms of an apply)."""
    repo = make_repo(tmp_path / "sglang")
    done = subprocess.run([sys.executable, "-c", RAISING, where, "Ctrl-C while a class is made", args[0], str(repo),
                           *args[1:]], env=_env(), capture_output=True)
    assert (done.returncode, done.stdout, done.stderr) == INTERRUPTED


def test_interrupt_in_finds_the_ctrl_c_behind_a_wrapped_error() -> None:
    from patchkit.errors import Interrupted, interrupt_in

    stop = Interrupted()
    try:
        try:
            raise stop
        except Interrupted as exc:
            raise RuntimeError("Error calling __set_name__ on 'cached_property' instance 'processor'") from exc
    except RuntimeError as wrapped:
        assert interrupt_in(wrapped) is stop
    assert interrupt_in(ZeroDivisionError("division by zero")) is None
    loop = ValueError("a cycle of contexts")
    loop.__context__ = loop
    assert interrupt_in(loop) is None


CALLBACK = """
import os, signal, sys, time, weakref
from patchkit.errors import Interrupted
from patchkit.signals import catch_sigint
catch_sigint()
class Held: pass
held = Held()
# Ctrl-C lands while Python runs a weak reference's callback (as importlib's module locks have one):
# raised there, Python could only print "Exception ignored in ..." and go on.
ref = weakref.ref(held, lambda r: os.kill(os.getpid(), signal.SIGINT))
try:
    del held
    for _ in range(100):  # patchkit's own work after the callback: a second at most
        time.sleep(0.01)
    print("went on as if nothing was pressed")
except Interrupted:
    print("interrupted in patchkit's code")
"""


def test_ctrl_c_in_a_callback_python_runs_is_raised_in_patchkits_code() -> None:
    """A run of the environment test (SIGINT 20 ms after start) printed "Exception ignored in: <function
    _get_module_lock.<locals>.cb ...>" with patchkit's handler in the traceback, and the apply went on to
    exit 0: the Interrupted raised in the callback was dropped by Python."""
    done = subprocess.run([sys.executable, "-c", CALLBACK], capture_output=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"interrupted in patchkit's code\n", b"")


AT_START = """
import weakref
class Held: pass
held = Held()
def ctrl_c(ref):  # Python's own handler raises KeyboardInterrupt inside the callback it runs
    raise KeyboardInterrupt
ref = weakref.ref(held, ctrl_c)
import patchkit  # its first statement: the command's handlers
del held
print("went on as if nothing was pressed")
"""


def test_ctrl_c_in_a_callback_while_patchkit_starts_ends_it(tmp_path: Path) -> None:
    """Beside three busy loops, a SIGINT 5 ms after the start of `python -m patchkit apply` landed in
    importlib's module-lock callback as a KeyboardInterrupt (before patchkit's handler): Python printed
    "Exception ignored in: <function _get_module_lock.<locals>.cb ...>" and the apply went on to exit 0."""
    script = tmp_path / "patchkit"  # the command's name: patchkit/__init__.py handles Ctrl-C for it alone
    script.write_text(AT_START)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (130, b"", b"patchkit: interrupted\n")
    other = tmp_path / "other.py"  # a program that imports patchkit keeps Python's own way
    other.write_text(AT_START)
    done = subprocess.run([sys.executable, str(other)], capture_output=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == b"went on as if nothing was pressed\n" and b"KeyboardInterrupt" in done.stderr
