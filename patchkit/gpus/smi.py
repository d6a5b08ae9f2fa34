"""Ask ``nvidia-smi`` (found on PATH) for this machine's GPUs and how they are linked.

It runs twice: ``--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader``
and ``topo -m`` (the interfaces NVIDIA documents for scripts), each with a time limit:
a hung driver must not hang patchkit.  The limit is ``PATCHKIT_NVIDIA_SMI_TIMEOUT``
seconds (default 15) for each run, start, output and exit together; past it the process
and everything it started are killed, and a process it started in a session of its own
that keeps the pipe open does not keep patchkit waiting.  The output is capped
(MAX_OUTPUT): a program that prints without end is stopped there.  Every
way it can go wrong (missing, a non-zero exit, no GPU, a time-out, output patchkit
cannot read) is one BadInput line.  Nothing of CUDA or NVML is loaded here.

``given`` is the machine of a compute capability given on the command line (``doctor
--to-cc 12``) instead of measured: its ccs, no GPU listed, and links not known.
"""

from __future__ import annotations

import math
import os
import shutil

from patchkit import bounded
from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.gpus.parse import GPU, NO_DEVICES, QUERY, Link, gpus, links
from patchkit.values import Value

TIMEOUT_ENV = "PATCHKIT_NVIDIA_SMI_TIMEOUT"
DEFAULT_TIMEOUT = 15.0
MAX_OUTPUT = 16 << 20  # `topo -m` of MAX_GPUS GPUs is about 6 MiB


class Machine(Value):
    nvidia_smi: str | None  # the program that answered; None for a machine given, not measured
    gpus: tuple[GPU, ...]
    links: tuple[Link, ...] | None  # each pair a < b; None: not known (a machine given, not measured)
    given: tuple[CC, ...] = ()  # the ccs given instead of measured (``given``)

    def no_multicast_known(self) -> tuple[CC, ...] | None:
        """For GPUs given, not measured: their ccs (lowest first) when no product of them has
        multicast (``products``), or None."""
        from patchkit.gpus.products import without_multicast

        ccs = tuple(self.ccs())
        return ccs if self.links is None and without_multicast(ccs) else None

    def ccs(self) -> list[CC]:
        """The distinct compute capabilities, lowest first."""
        return sorted(set(self.given) if self.given else {g.cc for g in self.gpus}, key=CC.pair)

    def nvlink(self) -> bool:
        return any(link.nvlink for link in self.links or ())

    def pcie_only(self) -> bool:
        """Two or more GPUs and every pair linked through PCIe only (False when not known)."""
        return bool(self.links) and not self.nvlink()


def timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        raise BadInput(None, f"{TIMEOUT_ENV}={text!r} is not a number of seconds above 0")
    return value


def run(exe: str, args: list[str], limit: float) -> str:
    """``exe args``' stdout, or BadInput.  The limit covers the whole exchange: the start, the
    output (at most MAX_OUTPUT bytes) and the exit; past it, or past the cap, the process and
    everything it started in its session are killed."""
    what = f"nvidia-smi {' '.join(args)}"
    try:
        ran = bounded.run([exe, *args], limit, MAX_OUTPUT)
    except OSError as exc:
        raise BadInput(exe, f"cannot run it ({exc.strerror or exc})") from None
    killed = "killed it" if ran.ended else "sent it SIGKILL, and it has not ended yet (stuck in the driver?)"
    if ran.stopped == bounded.BYTES:
        raise BadInput(exe, f"`{what}` printed more than {bounded.size_words(MAX_OUTPUT)}, which no GPU list or matrix "
                            f"needs; stopped reading and {killed}")
    if ran.stopped == bounded.TIME and ran.exited:
        raise BadInput(exe, f"`{what}` exited, but a process it started still held its output open after {limit:g} s; "
                            "stopped reading (its output is not used)")
    if ran.stopped == bounded.TIME:
        raise BadInput(exe, f"`{what}` did not answer within {limit:g} s (a hung driver?); {killed}")
    said = (ran.out + b"\n" + ran.err).decode("utf-8", "replace")
    if NO_DEVICES in said:
        raise BadInput(exe, f"`{what}`: {NO_DEVICES} (the driver sees no NVIDIA GPU)")
    if ran.returncode != 0:
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        last = lines[-1][:160] if lines else "no output"
        raise BadInput(exe, f"`{what}` failed (exit {ran.returncode}): {last}")
    return ran.out.decode("utf-8", "replace")


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


def given(*ccs: CC) -> Machine:
    """The machine of GPUs of ``ccs`` (``CC(12, 0)``; ``sm_121a`` and ``12`` as 12.1 and 12.0), given
    instead of measured: how they are linked is not known."""
    return Machine(None, (), None, tuple(sorted({cc.gpu() for cc in ccs}, key=CC.pair)))
