"""Stand-in ``nvidia-smi`` programs: small shell scripts put first on PATH, printing what a
real one prints for the two commands patchkit runs (``data/README.md`` says where each
output comes from).  Any other arguments are an error, so a change in what patchkit asks
fails the tests.

Stand-in CUDA tools (nvcc, ptxas): ``tool`` writes one that prints what the real one printed for
``--version`` and ``--help`` (tests/kernels/data/tools/) and fails on anything else."""

from __future__ import annotations

import os
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TOOLS = Path(__file__).resolve().parent.parent / "kernels" / "data" / "tools"
QUERY_ARGS = "--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader"

_SCRIPT = """#!/bin/sh
case "$*" in
  "{query}") {query_action} ;;
  "topo -m") {topo_action} ;;
  *) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""

# What the broken machines do, for both commands.
BROKEN = {
    "none": 'echo "No devices were found"; exit 6',
    # Not exec: the shell waits on its child, which holds the pipes too; patchkit must kill both.
    "hung": "sleep 1000; exit 0",
    "garbled": "printf '\\033[1m%s\\n' 'GPU 0: ??? 0x1f' 'Unable to determine the device handle'; exit 0",
    "failing": 'echo "Failed to initialize NVML: Driver/library version mismatch" >&2; echo "NVML library version: 580.95" >&2; exit 18',
}


def _path_without(*names: str) -> list[str]:
    """The folders of PATH that hold none of ``names`` (this machine's own nvidia-smi or nvcc)."""
    return [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not any((Path(p) / n).exists() for n in names)]


def standin(folder: Path, machine: str, nvcc: bool = False) -> dict:
    """Write ``folder/bin/nvidia-smi`` for ``machine`` (a folder of ``data/`` or a key of
    BROKEN), and with ``nvcc`` a file named nvcc beside it (doctor only looks for it); the
    environment that puts them first on PATH, with no other nvidia-smi or nvcc on it."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if nvcc:
        (bin_dir / "nvcc").write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / "nvcc").chmod(0o755)
    if machine in BROKEN:
        query_action = topo_action = BROKEN[machine]
    else:
        query_action = f"exec cat '{DATA / machine / 'query.csv'}'"
        topo_action = f"exec cat '{DATA / machine / 'topo-m.txt'}'"
    return scripted(folder, query_action, topo_action)


def scripted(folder: Path, query_action: str, topo_action: str) -> dict:
    """``folder/bin/nvidia-smi`` doing ``query_action`` for the query and ``topo_action`` for
    ``topo -m`` (shell commands); the environment that puts it first on PATH."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text(_SCRIPT.format(query=QUERY_ARGS, query_action=query_action, topo_action=topo_action))
    exe.chmod(0o755)
    return {"PATH": os.pathsep.join([str(bin_dir), *_path_without("nvidia-smi", "nvcc")])}


def no_nvidia_smi(folder: Path) -> dict:
    """A PATH with the usual tools (sh, python) and no nvidia-smi."""
    import shutil
    import sys

    keep = _path_without("nvidia-smi", "nvcc")
    assert shutil.which("nvidia-smi", path=os.pathsep.join(keep)) is None
    return {"PATH": os.pathsep.join(keep or [str(Path(sys.executable).parent)])}


_TOOL = """#!/bin/sh
case "$*" in
  --version) exec cat '{version}' ;;
  --help) exec cat '{help}' ;;
  *) echo "stand-in {name}: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def tool(path: Path, recorded: str) -> Path:
    """``path``: a stand-in for the tool whose answers ``TOOLS`` keeps as ``recorded`` (``nvcc-13.0.88``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_TOOL.format(version=TOOLS / f"{recorded}.version.txt", help=TOOLS / f"{recorded}.help.txt", name=recorded))
    path.chmod(0o755)
    return path
