"""How the ``patchkit`` process ends (``__main__._end``): with the command's exit code and every
byte it printed, as Python ends it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    code = f"import sys, threading, time\nfrom patchkit.__main__ import _end\n{body}\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=tmp_path, timeout=60)


def test_the_exit_code_and_every_byte_printed(tmp_path: Path) -> None:
    done = _run("_end(lambda: (sys.stdout.write('x' * 300000), sys.stderr.write('e'), sys.exit(3)))", tmp_path)
    assert (done.returncode, len(done.stdout), done.stderr) == (3, 300000, b"e")
    assert _run("_end(lambda: print('done'))", tmp_path).returncode == 0


def test_a_thread_still_running_is_waited_for(tmp_path: Path) -> None:
    body = ("t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread ended', flush=True)))\n"
            "t.start()\n_end(lambda: sys.exit(5))")
    done = _run(body, tmp_path)
    assert (done.returncode, done.stdout) == (5, b"thread ended\n")


def test_an_exit_with_words_ends_as_python_ends_it(tmp_path: Path) -> None:
    done = _run("_end(lambda: sys.exit('no good'))", tmp_path)
    assert (done.returncode, done.stderr) == (1, b"no good\n")
