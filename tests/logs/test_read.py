"""The streaming reader: the lines it hands on are exactly the ones a line-by-line reading gives,
whatever the chunk size; long lines are cut; a 200 MB log is read in bounded memory."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from logs import real_text as r

import patchkit.logs.read as read
from patchkit.errors import BadInput
from patchkit.logs.read import MAX_LINE, Scan, open_log
from patchkit.logs.tracebacks import HEADER


def reference(data: bytes, needles: tuple[bytes, ...], follow: int) -> list[tuple[int, str]]:
    """Every line holding a needle and the ``follow`` lines after it, read one line at a time."""
    out, left = [], 0
    for number, raw in enumerate(data.split(b"\n")[: data.count(b"\n") + (not data.endswith(b"\n"))], 1):
        if left or any(n in raw for n in needles):
            left = follow if any(n in raw for n in needles) else left - 1
            out.append((number, read.text(raw)))
    return out


def scanned(data: bytes, needles: tuple[bytes, ...], follow: int) -> tuple[list[tuple[int, str]], int]:
    state = {"left": 0}

    class Reader:  # as a TracebackReader: open while it wants the next line
        @property
        def open(self) -> bool:
            return state["left"] > 0

    out = []
    scan = Scan(io.BytesIO(data), needles, Reader())
    for number, text in scan:
        state["left"] = follow if any(n.decode() in text for n in needles) else state["left"] - 1
        out.append((number, text))
    return out, scan.lines


DATA = r.log(r.START, r.LOAD, r.KEYERROR, r.DECODE, r.MULTICAST, r.ACCESS, r.UNRELATED) + b"last line without an end"


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096, 1 << 20])
def test_the_same_lines_whatever_the_chunk(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(read, "CHUNK", chunk)
    needles = (HEADER.encode(), b"multicast", b"without an end")
    got, lines = scanned(DATA, needles, 3)
    assert got == reference(DATA, needles, 3)
    assert lines == DATA.count(b"\n") + 1  # as grep -c '' counts: the last line without an end too
    assert got[-1] == (lines, "last line without an end")


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_a_long_line_is_cut_and_the_next_line_kept(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(read, "CHUNK", chunk)
    data = b"multicast " + b"x" * (3 * MAX_LINE) + b"\nmulticast after\n"
    got, lines = scanned(data, (b"multicast",), 0)
    assert got == [(1, "multicast " + "x" * (MAX_LINE - 10)), (2, "multicast after")]
    assert lines == 2


def test_broken_utf8_and_progress_bars() -> None:
    data = b"\xff\xfe multicast \xc3\x28\r\nbar 10%\rbar 90%\rmulticast 100%\n"
    got, _ = scanned(data, (b"multicast",), 0)
    assert got == [(1, "\ufffd\ufffd multicast \ufffd("), (2, "multicast 100%")]


def test_open_log_refuses_what_is_no_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=f"^{tmp_path}/nope.log: no such file$"):
        open_log(tmp_path / "nope.log")
    with pytest.raises(BadInput, match=f"^{tmp_path}: is a directory, not a log file$"):
        open_log(tmp_path)


def test_a_200_mb_log_in_bounded_memory(tmp_path: Path) -> None:
    """diagnose of a 200 MB log (real noise repeated, the KeyError in its middle, the logging
    traceback at its end) stays under 150 MiB: the peak RSS of the process, from the kernel
    (``RUSAGE_CHILDREN`` of a parent that runs nothing else)."""
    log = tmp_path / "big.log"
    noise = r.log(*([r.DECODE, r.ACCESS] * 2000))
    size, at = 200 << 20, None
    with open(log, "wb") as f:
        written = lines = 0
        while written < size:
            if at is None and written >= size // 2:
                at = lines + 1 + r.KEYERROR.index("KeyError: 12")  # the exception's line
                f.write(r.log(r.KEYERROR))
                lines += len(r.KEYERROR)
            f.write(noise)
            written, lines = written + len(noise), lines + noise.count(b"\n")
        f.write(r.log(r.CHILD_FAILED, r.LOGGING_TAIL))
    assert log.stat().st_size > size
    probe = textwrap.dedent(f"""
        import resource, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "patchkit", "diagnose", {str(log)!r}], capture_output=True)
        sys.stdout.buffer.write(done.stdout)
        print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True)
    *out, status = done.stdout.decode().splitlines()
    code, peak_kib = map(int, status.split())
    assert code == 1
    assert out[0] == (f"{log}:{at}: KeyError: 12 raised at /root/sglang/python/sglang/srt/distributed/device_communicators/"
                      "torch_symm_mem.py:83 (SGLang)")
    assert out[-1] == f"1 known SM120 failure in {log}"
    assert peak_kib < 150 * 1024, f"peak RSS {peak_kib / 1024:.1f} MiB"
