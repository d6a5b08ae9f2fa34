"""What diagnose and watch print of a log is safe to print and to paste: the log's control
characters escaped as ``cat -v`` shows them, on a terminal and piped (an OSC 52 in an exception
would write the user's clipboard), ``--json`` keeping the text (JSON escapes it); and every
``run:`` command shell-quoted (a checkout at ``/home/me/my sglang`` or ``/x/a;id``)."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import subprocess
import sys
from pathlib import Path

from logs import real_text as r

from patchkit.errors import PROBLEMS, TIMED_OUT
from support.cli import PROCESS_ENV, invoke, run_cli

ENV = dict(os.environ, **{k: v for k, v in PROCESS_ENV.items() if v})
OSC52 = "\x1b]52;c;aGVsbG8=\x07"  # "set the clipboard to 'hello'", as a terminal reads it
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")  # what may never reach the terminal (\t and \n may)
TRACEBACK_AT = len(r.START) + len(r.LOAD) + 1
SYMM_MEM = "python/sglang/srt/distributed/device_communicators/torch_symm_mem.py"


def keyerror(checkout: str = "/root/sglang", exception: str = "KeyError: 12") -> list[str]:
    """SGLang 0.5.9's KeyError: 12, its frames in ``checkout`` and its exception line ``exception``."""
    return [line.replace("/root/sglang", checkout) if line != "KeyError: 12" else exception for line in r.KEYERROR]


def write(tmp_path: Path, *parts) -> Path:
    log = tmp_path / "server.log"
    log.write_bytes(r.log(*parts))
    return log


def on_a_terminal(*args: str) -> tuple[int, bytes]:
    """patchkit's exit code and what it wrote to a terminal (a pty) as its stdout."""
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "patchkit", *args], stdout=child, stderr=subprocess.DEVNULL, env=ENV)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal closed: the process is done writing
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(timeout=60), out.replace(b"\r\n", b"\n")


# -- escapes ---------------------------------------------------------------------------------


def test_diagnose_escapes_what_the_log_says_piped(tmp_path: Path) -> None:
    checkout = "/root/a\x1b[2Jb"  # a frame's path with an escape sequence (clear the screen)
    log = write(tmp_path, r.START, r.LOAD, keyerror(checkout, "KeyError: 12" + OSC52 + "\x00"))
    at = TRACEBACK_AT + r.KEYERROR.index("KeyError: 12")
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS, done.stderr
    assert not CONTROL.search(done.stdout), done.stdout
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{log}:{at}: KeyError: 12^[]52;c;aGVsbG8=^G^@ raised at /root/a^[[2Jb/{SYMM_MEM}:83 (SGLang)"
    assert lines[3] == f"{log}:{at}: run: patchkit apply '/root/a^[[2Jb'"


def test_diagnose_escapes_what_the_log_says_on_a_terminal(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, r.LOAD, keyerror(exception="KeyError: 12" + OSC52), r.MULTICAST[0] + "\x1b[31m\x9b2J")
    code, out = on_a_terminal("diagnose", str(log))
    assert code == PROBLEMS
    assert not CONTROL.search(out) and "\x9b" not in out.decode(), out
    lines = out.decode().splitlines()
    assert lines[1] == f"  {TRACEBACK_AT + r.KEYERROR.index('KeyError: 12')}: KeyError: 12^[]52;c;aGVsbG8=^G raised at" \
                       f" /root/sglang/{SYMM_MEM}:83 (SGLang)"
    assert lines[5] == "      mode: torch-symm-mem-keyerror: SGLang's torch symmetric-memory all-reduce dies with KeyError: 12" \
                       " (crash; 12.0 and 12.1)"
    assert lines[6] == f"  {TRACEBACK_AT + len(r.KEYERROR)}: TorchSymmMemCommunicator: torch symmetric memory multicast" \
                       " operations are not supported.^[[31mM-^[2J"


def test_diagnose_json_keeps_the_text(tmp_path: Path) -> None:
    """JSON escapes control characters itself: the document holds the log's own text."""
    log = write(tmp_path, r.START, r.LOAD, keyerror(exception="KeyError: 12" + OSC52))
    done = invoke("diagnose", str(log), "--json")
    assert not CONTROL.search(done.stdout) and b"\\u001b]52;c;aGVsbG8=\\u0007" in done.stdout
    [finding] = json.loads(done.stdout)["logs"][0]["findings"]
    assert finding["what"] == "KeyError: 12" + OSC52


HANGS = "a hang prints nothing: the failure modes that stop a start there (--python EXE: only those its releases are exposed to):"


def test_watch_escapes_the_last_lines_and_the_crash(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, [r.LOAD[0] + OSC52])
    done = run_cli("watch", str(log), "--timeout", "1")
    assert done.returncode == TIMED_OUT
    assert not CONTROL.search(done.stdout), done.stdout
    lines = done.stdout.decode().splitlines()
    hangs = lines.index(HANGS)  # the hang modes of the phase reached follow the last lines
    assert lines[hangs - 1] == f"{log}:{len(r.START) + 1}: {r.LOAD[0]}^[]52;c;aGVsbG8=^G"

    log = write(tmp_path, r.START, r.LOAD, keyerror(exception="KeyError: 12" + OSC52), r.CHILD_FAILED)
    done = run_cli("watch", str(log), "--timeout", "60")
    assert done.returncode == PROBLEMS
    assert not CONTROL.search(done.stdout), done.stdout
    at = TRACEBACK_AT + r.KEYERROR.index("KeyError: 12")
    assert re.fullmatch(rf"crashed after \d+ s: KeyError: 12\^\[\]52;c;aGVsbG8=\^G \(line {at}\); 1 known SM120 failure above",
                        done.stdout.decode().splitlines()[-1])


def test_watch_escapes_on_a_terminal(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, [r.LOAD[0] + OSC52])
    code, out = on_a_terminal("watch", str(log), "--timeout", "1")
    assert code == TIMED_OUT
    assert not CONTROL.search(out), out
    lines = out.decode().splitlines()
    assert lines[lines.index(HANGS) - 1] == f"  {len(r.START) + 1}: {r.LOAD[0]}^[]52;c;aGVsbG8=^G"


# -- commands to run ---------------------------------------------------------------------------


def test_run_commands_are_shell_quoted(tmp_path: Path) -> None:
    for checkout, quoted in (("/home/me/my sglang", "'/home/me/my sglang'"), ("/x/a;id", "'/x/a;id'"),
                             ("/x/$(id)", "'/x/$(id)'"), ("/x/it's", "'/x/it'\"'\"'s'")):
        log = write(tmp_path, r.START, r.LOAD, keyerror(checkout))
        done = invoke("diagnose", str(log), "--json")
        [finding] = json.loads(done.stdout)["logs"][0]["findings"]
        assert finding["commands"] == [f"patchkit apply {quoted}"]
        assert shlex.split(finding["commands"][0]) == ["patchkit", "apply", checkout]  # the shell gives back the path
        out = invoke("diagnose", str(log)).stdout.decode().splitlines()
        assert out[3].endswith(f": run: patchkit apply {quoted}")


def test_python_commands_are_shell_quoted(tmp_path: Path) -> None:
    """An environment at a path with a space: ``--python`` and the interpreter are two words."""
    fusion = [line.replace("/usr/local/lib/python3.12/dist-packages", "/opt/my env/lib/python3.12/site-packages")
              for line in r.FUSION]
    log = write(tmp_path, r.START, r.LOAD, r.CAPTURE, fusion)
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS
    [run] = [line for line in done.stdout.decode().splitlines() if ": run: " in line]
    command = run.split(": run: ", 1)[1]
    assert command == "patchkit apply --python '/opt/my env/bin/python' --fix allreduce-fusion"
    assert shlex.split(command) == ["patchkit", "apply", "--python", "/opt/my env/bin/python", "--fix", "allreduce-fusion"]
