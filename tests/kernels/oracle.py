"""NVIDIA's cuobjdump as the oracle of the fat binary reader, and the real sglang-kernel wheel.

Both come from PyPI through pip (``support.mirror.fetch_wheel``) and are cached under the
tests' cache folder (``$PATCHKIT_CACHE`` or ``~/.cache/patchkit``): the ``nvidia-cuda-cuobjdump``
wheel's ``cuobjdump`` is unpacked once beside its wheel.  ``cuobjdump FILE`` (no option) prints
every entry's header (``Fatbin elf code:`` / ``Fatbin ptx code:``, ``arch = sm_120f``, ``code
version = [1,8]``, ``compressed``); ``--list-elf`` / ``--list-ptx`` name one file per entry.
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

from support.venvs import make_venv, pip_install

CUOBJDUMP = "13.4.92"
SGLANG_KERNEL = "0.4.10"
SGLANG = "0.5.23"  # requires sglang-kernel==0.4.10
# Built by a real nvcc 13.0, with cuobjdump's listings (its README.md): copied from the team's shared fixtures
# (shared/fixtures/fatbin/) so that a clone tests on its own.
FIXTURES = Path(__file__).resolve().parent / "data"
FIXTURE_NAMES = ("hopper-blackwell-dc", "sm120a-only", "sm120-plus-ptx", "sm120f", "fat-compressed", "ptx-only-80")
WHEEL_SO = ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/flashmla_ops.abi3.so", "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so",
            "sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so")


def _cache() -> Path:
    from support.mirror import default_cache

    return default_cache()


def wheel(distribution: str, version: str, platform: str = "manylinux2014_x86_64") -> Path:
    """NVIDIA's and sglang-kernel's wheels are manylinux2014_x86_64."""
    from support.mirror import fetch_wheel

    return fetch_wheel(version, _cache(), distribution, platform=platform)


def cuobjdump() -> Path:
    """The cuobjdump of the nvidia-cuda-cuobjdump wheel, unpacked once beside it."""
    whl = wheel("nvidia-cuda-cuobjdump", CUOBJDUMP)
    exe = whl.parent / "bin" / "cuobjdump"
    if not exe.is_file():
        exe.parent.mkdir(exist_ok=True)
        with zipfile.ZipFile(whl) as zf:
            data = zf.read("nvidia/cu13/bin/cuobjdump")
        tmp = exe.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.replace(exe)
    return exe


def headers(path: Path, *options: str) -> list[tuple[str, str, tuple[int, int], bool]]:
    """(kind, arch, code version, compressed) of every entry, as ``cuobjdump FILE`` prints them
    (``-all``: of every fat binary section, ``__nv_relfatbin`` too)."""
    done = subprocess.run([str(cuobjdump()), *options, str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return parse_headers(done.stdout)


def parse_headers(text: str) -> list[tuple[str, str, tuple[int, int], bool]]:
    """The same, from cuobjdump's output ``text``."""
    found = []
    for block in re.split(r"\n(?=Fatbin (?:elf|ptx) code:)", text):
        kind = re.match(r"\s*Fatbin (elf|ptx) code:", block)
        if kind is None:
            continue
        arch = re.search(r"^arch = (\S+)$", block, re.M).group(1)
        major, minor = re.search(r"^code version = \[(\d+),(\d+)\]$", block, re.M).groups()
        found.append((kind.group(1), arch, (int(major), int(minor)), re.search(r"^compressed$", block, re.M) is not None))
    return found


def lists(path: Path, *options: str) -> tuple[set[str], set[str]]:
    """The architectures ``cuobjdump --list-elf`` and ``--list-ptx`` name (``sm_120`` from ``x.1.sm_120.cubin``)."""
    out = []
    for option, ext in (("--list-elf", "cubin"), ("--list-ptx", "ptx")):
        done = subprocess.run([str(cuobjdump()), *options, option, str(path)], capture_output=True, text=True, timeout=600)
        out.append(set(re.findall(rf"\.(sm_\w+?)\.{ext}$", done.stdout, re.M)))
    return out[0], out[1]


def parse_lists(text: str) -> tuple[set[str], set[str]]:
    """The same from the output of ``cuobjdump -lelf -lptx``."""
    return set(re.findall(r"\.(sm_\w+?)\.cubin$", text, re.M)), set(re.findall(r"\.(sm_\w+?)\.ptx$", text, re.M))


def recorded_lists(name: str) -> tuple[set[str], set[str]]:
    """The same, from the listing recorded beside the fixture when it was built (``NAME.cuobjdump.txt``)."""
    text = (FIXTURES / f"{name}.cuobjdump.txt").read_text()
    elf, ptx = text.split("## cuobjdump --list-ptx")
    return set(re.findall(r"\.(sm_\w+?)\.cubin$", elf, re.M)), set(re.findall(r"\.(sm_\w+?)\.ptx$", ptx, re.M))


def extract(member: str, dest: Path) -> Path:
    """One file of the real sglang-kernel wheel, unzipped alone."""
    with zipfile.ZipFile(wheel("sglang-kernel", SGLANG_KERNEL)) as zf:
        target = dest / member
        target.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(member) as src, open(target, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    return target


_VENVS: dict[str, Path] = {}


def installed_venv(factory) -> Path:
    """A virtualenv with SGLang 0.5.23 and sglang-kernel 0.4.10 (the real wheels) installed by pip,
    once per session; read only: no test changes it."""
    if "venv" not in _VENVS:
        venv = make_venv(factory.mktemp("kernels-venv") / "V")
        sglang = wheel("sglang", SGLANG, "manylinux_2_34_x86_64")  # as the other tests fetch it
        pip_install(venv / "bin" / "python", str(sglang), str(wheel("sglang-kernel", SGLANG_KERNEL)))
        _VENVS["venv"] = venv
    return _VENVS["venv"]
