"""nvidia-smi's answers are bounded before they are parsed: in bytes (a program printing
without end is stopped at the cap), in time for the whole exchange (a process it started in a
session of its own that keeps the pipe open does not hold patchkit past the limit, and the
line says what happened), in GPUs (1024) and in compute capabilities NVIDIA has (1.0 to 15.x);
``topo -m`` is read in time linear in its size.

The 1024-GPU outputs are the real 8-GPU PCIe machine's (data/rtxpro6000-8pcie) and the real
H200's query line, widened: the same columns and cells, more of them, bus ids in nvidia-smi's
format."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from standin import DATA, scripted

from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.gpus import parse
from patchkit.gpus.smi import machine
from patchkit.render.machine import link_summary
from support.cli import invoke
from support.venvs import copy_venv

QUERY = "--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader"
H200_QUERY = f"cat '{DATA / 'h200-1gpu/query.csv'}'"
H200_TOPO = f"cat '{DATA / 'h200-1gpu/topo-m.txt'}'"


def wide(folder: Path, n: int) -> tuple[Path, Path]:
    """A query and a ``topo -m`` of ``n`` GPUs, laid out as the real ones."""
    (line,) = (DATA / "h200-1gpu/query.csv").read_text().splitlines()
    _, name, cc, _ = [f.strip() for f in line.split(",")]
    query = folder / "query.csv"
    query.write_text("".join(f"{i}, {name}, {cc}, 00000000:{i // 256 + 1:02X}:{i % 256:02X}.0\n" for i in range(n)))
    real = (DATA / "rtxpro6000-8pcie/topo-m.txt").read_text().splitlines()
    tail = real[real.index(""):]  # the blank line and the legend
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [f"GPU{a}\t" + "\t".join(" X " if a == b else "PIX" if a // 2 == b // 2 else "SYS" for b in range(n))
            + "\t0-31,64-95\t0\t\tN/A" for a in range(n)]
    topo = folder / "topo-m.txt"
    topo.write_text("\n".join([header, *rows, *tail]) + "\n")
    return query, topo


def test_a_program_printing_without_end_is_stopped_at_the_cap(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", scripted(tmp_path, "exec yes", "exec yes")["PATH"])
    started = time.monotonic()
    with pytest.raises(BadInput) as caught:
        machine(limit=30)
    assert time.monotonic() - started < 10
    assert str(caught.value) == (f"{tmp_path}/bin/nvidia-smi: `nvidia-smi {QUERY}` printed more than 16 MiB, which no GPU "
                                 "list or matrix needs; stopped reading and killed it")


def test_a_detached_grandchild_holding_the_pipe_does_not_hold_patchkit(tmp_path: Path, monkeypatch) -> None:
    pid_file = tmp_path / "grandchild.pid"
    detach = f"{H200_QUERY}; setsid sh -c 'echo $$ > {pid_file}; exec sleep 30' & exit 0"
    monkeypatch.setenv("PATH", scripted(tmp_path, detach, H200_TOPO)["PATH"])
    started = time.monotonic()
    try:
        with pytest.raises(BadInput) as caught:
            machine(limit=2)
        elapsed = time.monotonic() - started
    finally:
        for _ in range(100):
            if pid_file.exists() and pid_file.read_text().strip():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                break
            time.sleep(0.05)
    assert 2 <= elapsed < 4
    assert str(caught.value) == (f"{tmp_path}/bin/nvidia-smi: `nvidia-smi {QUERY}` exited, but a process it started still "
                                 "held its output open after 2 s; stopped reading (its output is not used)")


def test_1024_gpus_are_read_in_linear_time(tmp_path: Path, monkeypatch) -> None:
    query, topo = wide(tmp_path, 1024)
    monkeypatch.setenv("PATH", scripted(tmp_path, f"exec cat '{query}'", f"exec cat '{topo}'")["PATH"])
    started = time.process_time()  # this process's CPU time: what other processes on a busy machine take is not counted
    m = machine(limit=30)
    assert time.process_time() - started < 10  # the cubic reading took 22 s
    assert len(m.gpus) == 1024 and len(m.links) == 1024 * 1023 // 2
    assert link_summary(m) == "every pair through PCIe (PIX 512, SYS 523264): no NVLink, so no multicast between these GPUs"


def test_more_gpus_than_any_machine_holds(tmp_path: Path) -> None:
    query, _ = wide(tmp_path, 1025)
    with pytest.raises(ValueError, match=r"^it listed more than 1024 GPUs, more than any machine holds$"):
        parse.gpus(query.read_text())


@pytest.mark.parametrize("cc", ["9999.0", "16.0", "0.5", "12.10"])
def test_a_compute_capability_nvidia_does_not_have(cc: str) -> None:
    with pytest.raises(ValueError, match=rf"^line 1: compute_cap '{cc}' is not one NVIDIA has \(1\.0 to 15\.x\)$"):
        parse.gpus(f"0, NVIDIA H200, {cc}, 00000000:00:06.0\n")


@pytest.mark.parametrize("cc, value", [("1.0", CC(1, 0)), ("12.1", CC(12, 1)), ("15.9", CC(15, 9))])
def test_the_compute_capabilities_nvidia_has_are_read(cc: str, value: tuple) -> None:
    (gpu,) = parse.gpus(f"0, NVIDIA H200, {cc}, 00000000:00:06.0\n")
    assert gpu.cc == value


def test_apply_to_cc_auto_never_writes_key_9999(tmp_path: Path, sglang_venv: Path) -> None:
    venv = copy_venv(sglang_venv, tmp_path / "V")
    site = next((venv / "lib").glob("python3*/site-packages"))
    env = scripted(tmp_path, "echo '0, NVIDIA H200, 9999.0, 00000000:00:06.0'", H200_TOPO)
    before = {p: p.read_bytes() for p in (site / "sglang/srt/distributed/device_communicators").glob("*.py")}
    why = (f"{tmp_path}/bin/nvidia-smi: `nvidia-smi {QUERY}` printed what patchkit cannot read: line 1: compute_cap '9999.0' "
           "is not one NVIDIA has (1.0 to 15.x)")
    for command in (("apply", "--to-cc", "auto"), ("verify", "--to-cc", "auto")):
        done = invoke(*command, "--python", str(venv), env=env)
        assert (done.returncode, done.stdout) == (2, b""), done.stdout.decode()
        assert done.stderr.decode() == f"patchkit: {why}\n"
    # doctor sees no GPU it can read: it says why, reports the projects for cc 12.0, and cannot judge this machine.
    done = invoke("doctor", "--python", str(venv), env=env)
    assert done.returncode == 2 and done.stdout.decode().splitlines()[0] == f"no GPU seen: {why}"
    assert "9999" not in done.stdout.decode().replace(why, "")
    assert done.stderr.decode().startswith("patchkit: no GPU seen, so doctor cannot say what this machine needs")
    assert {p: p.read_bytes() for p in (site / "sglang/srt/distributed/device_communicators").glob("*.py")} == before
    assert not (site / ".patchkit-sglang").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0"])
def test_a_time_limit_that_is_no_limit(monkeypatch, value: str) -> None:
    from patchkit.gpus.smi import timeout

    monkeypatch.setenv("PATCHKIT_NVIDIA_SMI_TIMEOUT", value)
    with pytest.raises(BadInput, match=rf"^PATCHKIT_NVIDIA_SMI_TIMEOUT='{value}' is not a number of seconds above 0$"):
        timeout()
