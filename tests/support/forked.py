"""``python -m patchkit`` commands, each in a process of its own, forked from one Python that has
imported patchkit's command line, the commands' modules and libcst once (``Forks``).

A command is a child process: a crash is that child's death by a signal (the fault hook's SIGKILL
too), a hang is killed at the hang guard, and its exit code, stdout and stderr are what ``python -m
patchkit`` gives.  No command pays Python's start-up and those imports again (about 0.3 s of CPU,
libcst's alone 0.24 s): for the commands that must run apart from the test's own process, many times
over, and are not about the start-up (the reliability suite's kills at a fault point or before a
step of upstream, its failed writes, the sources that could crash or hang the interpreter).  A run killed at a random instant,
start-up included, or raced, is ``python -m patchkit`` itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

# Reads one command a line (its arguments, the changes to the environment and whether it gets a
# session of its own, as JSON), forks, runs it in the child as ``python -m patchkit`` runs it
# (patchkit.__main__.main; stdin /dev/null, stdout and stderr to files of its own) and writes back one
# line: the exit code (negative: the signal it died of; null: still running at the guard, killed),
# stdout and stderr.  A command in a session of its own that was killed is answered once no process
# of its session is left (the git children of a killed upstream run on).
RUNNER = r"""
import json, os, signal, sys, tempfile, time
def members(pgid):
    out = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except (OSError, ValueError):
            continue
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(name)
    return out
import patchkit.__main__ as entry
import patchkit.rewrite.evaluate
from patchkit.cli import preload
guard, commands = float(sys.argv[1]), sys.argv[2]
for name in commands.split(","):
    preload([name])
for line in sys.stdin:
    args, env, session = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if session:
                    os.setsid()
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0), os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
                for key, value in env.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
                sys.argv = ["patchkit", *args]
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
        deadline, code = time.monotonic() + guard, None
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.002)
        while session and code is not None and code < 0 and members(pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        out.seek(0), err.seek(0)
        print(json.dumps({"rc": code, "out": out.read().hex(), "err": err.read().hex()}), flush=True)
"""


class Forks:
    """``run(args)``: ``python -m patchkit ARGS`` as a child of one runner (``RUNNER``), started with
    ``env``; ``commands`` names the commands whose modules it imports before the first fork.  One
    command at a time (threads take turns)."""

    def __init__(self, env: dict[str, str], guard: float, commands: tuple[str, ...], preamble: str = "") -> None:
        """``preamble``: code the runner runs first, before it imports patchkit (hooks its runs share)."""
        self.proc = subprocess.Popen([sys.executable, "-c", preamble + RUNNER, str(guard), ",".join(commands)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()

    def run(self, args: list[str], env: dict[str, str | None] | None = None, session: bool = False) -> subprocess.CompletedProcess:
        """The command's exit code (None: killed at the guard), stdout and stderr; ``env``: what the
        command's environment has besides the runner's (None removes a variable); ``session``: a
        session of its own (``start_new_session``), waited for to its last process if it was killed."""
        with self.lock:
            self.proc.stdin.write(json.dumps([args, env or {}, session]) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        assert line, f"the runner of forked commands ended (exit {self.proc.wait()})"
        got = json.loads(line)
        return subprocess.CompletedProcess([sys.executable, "-m", "patchkit", *args], got["rc"],
                                           bytes.fromhex(got["out"]), bytes.fromhex(got["err"]))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc.wait(timeout=60)
