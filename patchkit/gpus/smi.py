"""Ask ``nvidia-smi`` (found on PATH) for this machine's GPUs and how they are linked.

It runs twice: ``--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader``
and ``topo -m`` (the interfaces NVIDIA documents for scripts), each with a time limit:
a hung driver must not hang patchkit.  The limit is ``PATCHKIT_NVIDIA_SMI_TIMEOUT``
seconds (default 15); past it the process and everything it started are killed.  Every
way it can go wrong (missing, a non-zero exit, no GPU, a time-out, output patchkit
cannot read) is one BadInput line.  Nothing of CUDA or NVML is loaded here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from typing import NamedTuple

from patchkit.errors import BadInput
from patchkit.gpus.parse import GPU, NO_DEVICES, QUERY, Link, gpus, links

TIMEOUT_ENV = "PATCHKIT_NVIDIA_SMI_TIMEOUT"
DEFAULT_TIMEOUT = 15.0


class Machine(NamedTuple):
    nvidia_smi: str  # the program that answered
    gpus: tuple[GPU, ...]
    links: tuple[Link, ...]  # each pair a < b

    def ccs(self) -> list[tuple[int, int]]:
        """The distinct compute capabilities, lowest first."""
        return sorted({g.cc for g in self.gpus})

    def nvlink(self) -> bool:
        return any(link.nvlink for link in self.links)

    def pcie_only(self) -> bool:
        """Two or more GPUs and every pair linked through PCIe only."""
        return bool(self.links) and not self.nvlink()

    def link_summary(self) -> str:
        """How the GPUs are linked, in one line."""
        if not self.links:
            return "one GPU: no peer to link to, no multicast"
        kinds: dict[str, int] = {}
        for link in self.links:
            kinds[link.kind] = kinds.get(link.kind, 0) + 1
        counted = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        if self.pcie_only():
            return f"every pair through PCIe ({counted}): no NVLink, so no multicast between these GPUs"
        if all(link.nvlink for link in self.links):
            return (f"every pair through NVLink ({counted}): multicast needs NVSwitch (or the NVLink fabric) as well; "
                    "topo -m does not say whether this machine has it")
        return (f"NVLink and PCIe pairs ({counted}): no multicast across the PCIe pairs; across NVLink it needs "
                "NVSwitch as well, which topo -m does not show")

    def to_json(self) -> dict:
        return {
            "nvidia_smi": self.nvidia_smi,
            "gpus": [{"index": g.index, "name": g.name, "cc": g.cc_text(), "bus_id": g.bus_id} for g in self.gpus],
            "links": [{"a": l.a, "b": l.b, "kind": l.kind, "nvlink": l.nvlink} for l in self.links],
            "nvlink": self.nvlink(),
            "pcie_only": self.pcie_only(),
            "links_summary": self.link_summary(),
        }


def timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise BadInput(None, f"{TIMEOUT_ENV}={text!r} is not a number of seconds above 0")
    return value


def run(exe: str, args: list[str], limit: float) -> str:
    """``exe args``' stdout, or BadInput; the process and its children are killed at ``limit`` s."""
    what = f"nvidia-smi {' '.join(args)}"
    try:
        proc = subprocess.Popen([exe, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise BadInput(exe, f"cannot run it ({exc.strerror or exc})") from None
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: a script's children hold the pipes too
        except OSError:
            proc.kill()
        proc.communicate()
        raise BadInput(exe, f"`{what}` did not answer within {limit:g} s (a hung driver?); killed it") from None
    except BaseException:  # Ctrl-C: its own session got no SIGINT, so it is ended here, before patchkit exits
        _end(proc)
        raise
    said = (out + b"\n" + err).decode("utf-8", "replace")
    if NO_DEVICES in said:
        raise BadInput(exe, f"`{what}`: {NO_DEVICES} (the driver sees no NVIDIA GPU)")
    if proc.returncode != 0:
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        last = lines[-1][:160] if lines else "no output"
        raise BadInput(exe, f"`{what}` failed (exit {proc.returncode}): {last}")
    return out.decode("utf-8", "replace")


def _end(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s whole session (it was started in its own) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()


def machine(limit: float | None = None) -> Machine:
    """This machine's GPUs and their links, from the ``nvidia-smi`` on PATH."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise BadInput(None, "nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH")
    limit = timeout() if limit is None else limit
    query = ["--query-gpu=" + QUERY, "--format=csv,noheader"]
    try:
        found = gpus(run(exe, query, limit))
    except ValueError as exc:
        raise BadInput(exe, f"`nvidia-smi {' '.join(query)}` printed what patchkit cannot read: {exc}") from None
    try:
        pairs = links(run(exe, ["topo", "-m"], limit), len(found))
    except ValueError as exc:
        raise BadInput(exe, f"`nvidia-smi topo -m` printed what patchkit cannot read: {exc}") from None
    return Machine(exe, tuple(found), tuple(pairs))
