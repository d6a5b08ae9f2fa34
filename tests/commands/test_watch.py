"""patchkit watch: follows a log as a server writes it and ends at the ready line, a crash or the
time-out.  The end-to-end tests append lines from a thread while watch runs in its own process
(generous time-outs: they pass on a loaded machine); the in-process ones drive its clock and
sleep, so a log that appears late or starts over is met at a known point."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from logs import real_text as r

from patchkit.commands.watch import POLL, watch
from patchkit.errors import OK, PROBLEMS, TIMED_OUT
from patchkit.render import text
from patchkit.render.watch import progress_line
from support.cli import PROCESS_ENV

ENV = dict(os.environ, **{k: v for k, v in PROCESS_ENV.items() if v})
HEALTHY = (r.START, r.LOAD, r.MULTICAST, r.CAPTURE, r.CAPTURED, r.READY)
READY_AT = sum(map(len, HEALTHY))
MULTICAST_AT = len(r.START) + len(r.LOAD) + 1
KEYERROR_AT = len(r.START) + len(r.LOAD) + 1 + r.KEYERROR.index("KeyError: 12")  # the exception's line
SYMM_MEM = "/root/sglang/python/sglang/srt/distributed/device_communicators/torch_symm_mem.py"


def writer(path: Path, parts, delay: float = 0.05, first: float = 0.3) -> threading.Thread:
    """A thread that creates ``path`` after ``first`` seconds and appends each part, one write each."""

    def run() -> None:
        time.sleep(first)
        with open(path, "ab") as f:
            for part in parts:
                f.write(r.log(part))
                f.flush()
                time.sleep(delay)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_watch(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchkit", "watch", str(path), *args], capture_output=True, env=ENV, timeout=120)


def test_ready(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    thread = writer(log, HEALTHY)
    done = run_watch(log, "--timeout", "60")
    thread.join()
    assert done.returncode == OK, done.stdout.decode() + done.stderr.decode()
    *findings, last = done.stdout.decode().splitlines()
    assert findings[0] == f"{log}:{MULTICAST_AT}: TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."
    assert findings[2] == f"{log}:{MULTICAST_AT}: seen 2 times: lines {MULTICAST_AT}, {MULTICAST_AT + 1}"
    assert re.fullmatch(rf"ready after \d+ s: {re.escape(str(log))} line {READY_AT}", last), last
    assert done.stderr == b""  # piped: no progress


def test_crash_with_the_diagnosis(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    thread = writer(log, (r.START, r.LOAD, r.KEYERROR, r.CHILD_FAILED, r.LOGGING_TAIL))
    done = run_watch(log, "--timeout", "60")
    thread.join()
    assert done.returncode == PROBLEMS, done.stdout.decode() + done.stderr.decode()
    *diagnosis, last = done.stdout.decode().splitlines()
    assert diagnosis == [
        f"{log}:{KEYERROR_AT}: KeyError: 12 raised at {SYMM_MEM}:83 (SGLang)",
        f"{log}:{KEYERROR_AT}: cause: TorchSymmMemCommunicator looks compute capability 12 up in its tables, which know 9 and 10"
        " (SGLang 0.5.4.post3 - 0.5.13.post1)",
        f"{log}:{KEYERROR_AT}: fix: torch-symm-mem: Add SM120 to the torch symm-mem all-reduce tables",
        f"{log}:{KEYERROR_AT}: run: patchkit apply /root/sglang",
        f"{log}:{KEYERROR_AT}: mode: torch-symm-mem-keyerror: SGLang's torch symmetric-memory all-reduce dies with KeyError: 12"
        " (crash; 12.0 and 12.1)",
    ]
    assert re.fullmatch(rf"crashed after \d+ s: KeyError: 12 \(line {KEYERROR_AT}\); 1 known SM120 failure above", last), last


def test_time_out_with_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(r.log(r.START, r.LOAD, r.CAPTURE))
    done = run_watch(log, "--timeout", "2")
    assert done.returncode == TIMED_OUT
    lines = (r.START + r.LOAD + r.CAPTURE)
    n = len(lines)
    out = done.stdout.decode().splitlines()
    assert out[:6] == [
        f"timed out after 2 s: no ready line in {log}; the start reached: CUDA graph capture (line {n - 1})",
        *(f"{log}:{i}: {lines[i - 1]}" for i in range(n - 4, n + 1)),
    ]
    # A hang prints nothing: the modes that stop a start in CUDA graph capture (patchkit/fixes/modes/, hangs_in).
    assert out[6] == "a hang prints nothing: the failure modes that stop a start there (--python EXE: only those its releases are exposed to):"
    assert [line for line in out[7:] if line.startswith("  mode: ")] == [
        "  mode: pcie-p2p-hang: Multi-GPU SM12x over PCIe hangs at the first all-reduce (hang; 12.0)",
        "  mode: flashinfer-autotune: FlashInfer autotuning at startup hangs or fails on SM12x (crash; 12.0 and 12.1)"]
    assert "  way out: setting: nccl-p2p-disable: NCCL goes through host memory instead of peer-to-peer (`patchkit doctor " \
           "--python EXE` prints it for the release installed) (any nvidia-nccl-cu12 release); caveat: costs bandwidth; " \
           "turning ACS off (BIOS, pci=noacs, setpci) cured the same hang on Ada GPUs without the cost (NVIDIA/nccl#2079)" in out


def test_time_out_names_the_hangs_the_releases_installed_are_exposed_to(tmp_path: Path, prebuilt) -> None:
    """With --python: FlashInfer 0.6.4 alone (no NCCL of its own there): the autotuner's hang, not NCCL's."""
    from support.mirror import default_cache, fetch_wheel

    venv = prebuilt.venv(fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))
    log = tmp_path / "server.log"
    log.write_bytes(r.log(r.START, r.LOAD, r.CAPTURE))
    done = run_watch(log, "--timeout", "1", "--python", str(venv / "bin/python"), "--json")
    doc = json.loads(done.stdout)
    assert (done.returncode, doc["phase"], doc["hangs"], doc["hangs_judged"]) == (
        TIMED_OUT, "CUDA graph capture", ["flashinfer-autotune"], True)


def test_time_out_before_the_log_exists(tmp_path: Path) -> None:
    done = run_watch(tmp_path / "never.log", "--timeout", "1", "--json")
    assert done.returncode == TIMED_OUT
    doc = json.loads(done.stdout)
    assert (doc["command"], doc["outcome"], doc["findings"], doc["last_lines"]) == ("watch", "timed out", [], [])


# -- in process: a clock and a sleep the test drives ----------------------------------------------


class Driven:
    """watch's clock and sleep: each sleep advances the clock and runs the next step (writes to the log)."""

    def __init__(self, steps) -> None:
        self.now, self.steps, self.sleeps = 0.0, list(steps), 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds == POLL
        self.sleeps += 1
        self.now += seconds
        if self.steps:
            self.steps.pop(0)()


def append(path: Path, *parts):
    return lambda: path.open("ab").write(r.log(*parts))


def test_a_log_that_appears_late(tmp_path: Path) -> None:
    log = tmp_path / "late.log"
    nothing = lambda: None  # noqa: E731
    said: list[str] = []
    driven = Driven([nothing, nothing, append(log, *HEALTHY[:3]), append(log, *HEALTHY[3:])])
    report = watch(log, 60, lambda event: said.append(progress_line(event)), driven.clock, driven.sleep)
    assert report.exit_code == OK
    assert text(report, terminal=True)[-1] == f"ready after 1 s: {log} line {READY_AT}"
    assert said == [f"waiting for {log} to appear", "1 s: torch distributed (line 1)", "1 s: loading weights (line 3)",
                    "1 s: weights loaded (line 5)", "1 s: KV cache allocated (line 7)", "1 s: CUDA graph capture (line 11)",
                    "1 s: CUDA graph captured (line 13)"]


def test_a_log_that_a_restart_truncates(tmp_path: Path) -> None:
    """The server is started again with ``> server.log``: the log is read again from line 1."""
    log = tmp_path / "server.log"
    log.write_bytes(r.log(r.START, r.LOAD))
    later = [line.replace("2026-02-11 10:0", "2026-02-11 11:0") for line in r.START]  # the second start's own times
    driven = Driven([lambda: log.write_bytes(b""), append(log, later, r.LOAD, r.CAPTURE, r.CAPTURED, r.READY)])
    report = watch(log, 60, None, driven.clock, driven.sleep)
    assert report.exit_code == OK
    assert text(report, terminal=True) == [f"ready after 0 s: {log} line {len(later + r.LOAD + r.CAPTURE + r.CAPTURED) + 1} (the log started over 1 time)"]


def test_a_log_truncated_and_grown_past_where_it_was_read(tmp_path: Path) -> None:
    """Truncated and written again beyond the old length between two polls: its first bytes changed."""
    log = tmp_path / "server.log"
    log.write_bytes(r.log(r.START))
    later = [line.replace("2026-02-11 10:0", "2026-02-11 11:0") for line in r.START]
    driven = Driven([lambda: log.write_bytes(r.log(later, r.LOAD, r.CAPTURE, r.CAPTURED, r.READY))])
    report = watch(log, 60, None, driven.clock, driven.sleep)
    assert text(report, terminal=True) == [f"ready after 0 s: {log} line {len(later + r.LOAD + r.CAPTURE + r.CAPTURED) + 1} (the log started over 1 time)"]


def test_a_traceback_that_ends_the_log_is_a_crash_once_it_settles(tmp_path: Path) -> None:
    """Nothing follows the exception: the crash is called after SETTLE seconds without a line."""
    log = tmp_path / "server.log"
    log.write_bytes(r.log(r.START, r.LOAD, r.UNRELATED))
    at = len(r.START) + len(r.LOAD) + 1 + r.UNRELATED.index("KeyError: 'model.layers.55.mlp.gate_up_proj.input_scale'")
    driven = Driven([])
    report = watch(log, 60, None, driven.clock, driven.sleep)
    assert report.exit_code == PROBLEMS
    assert text(report, terminal=True) == [
        f"crashed after 1 s: KeyError: 'model.layers.55.mlp.gate_up_proj.input_scale' (line {at}); nothing patchkit knows was found"
    ]
    assert driven.sleeps == 4  # polls 0.25 s apart until one second passed without a line


def test_a_logging_error_is_no_crash(tmp_path: Path) -> None:
    """The logging module's own traceback ("--- Logging error ---", CPython's handleError) does not end the start."""
    log = tmp_path / "server.log"
    block = ["--- Logging error ---"] + r.LOGGING_TAIL[13:17]  # CPython's "Traceback ...", emit's frame, the RuntimeError
    log.write_bytes(r.log(r.START, block, r.LOAD, r.READY))
    driven = Driven([])
    report = watch(log, 60, None, driven.clock, driven.sleep)
    assert report.exit_code == OK
    assert text(report, terminal=True) == [f"ready after 0 s: {log} line {len(r.START) + len(block) + len(r.LOAD) + 1}"]
