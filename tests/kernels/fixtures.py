"""Small fixtures derived from large real files, and the tool that makes them.

A real library of a wheel (cuFFT's ``libcufft.so.12`` is 286 MB) is kept as a sparse copy: its
size, and the byte ranges patchkit's reader reads from it (the ELF header, the section header
table and names, every fat binary and entry header, each cubin's own headers where
``kernels.evidence`` reads them, and the first fat binary header ``fat_binaries_elsewhere``
finds), every other byte zero.  ``NAME.extents.gz`` holds them, gzip-compressed:

    PKEXT1\\n
    {"size": N, "source": "...", "extents": [[offset, length], ...]}\\n
    <the bytes of each extent, one after the other>

``materialize`` writes the sparse file back (a file system with holes stores only the extents).
Beside it, ``NAME.cuobjdump.txt.gz`` (gzip-compressed text) holds what NVIDIA's cuobjdump (the nvidia-cuda-cuobjdump wheel,
``oracle.CUOBJDUMP``) printed for the real file: ``cuobjdump FILE`` and ``cuobjdump -all FILE``
(every entry's header) and the ``-lelf -lptx`` listings of both; the tests compare patchkit's
reading of the sparse copy with them.  The copy is checked when it is made: patchkit reads the
same entries and gives the same verdicts from it as from the real file.

    PYTHONPATH=tests:tests/kernels python tests/kernels/fixtures.py [NAME...]   # fetches the wheels (cached), rewrites data/wheels/

A release of ``RELEASES`` keeps, beside its shared objects, ``RECORD`` (its wheel's rows that name
them) and the Python files patchkit reads there (``python_files``: the start ``known-kernels.toml``
names and what it leads to, and the importers of each other file with CUDA code), whole.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from patchkit.cc import CC

DATA = Path(__file__).resolve().parent / "data" / "wheels"
MAGIC = b"PKEXT1\n"

# (fixture name, distribution, version, platform, member of the wheel)
SOURCES = (
    ("libcufft.so.12", "nvidia-cufft", "12.0.0.61", "manylinux2014_x86_64", "nvidia/cu13/lib/libcufft.so.12"),
    ("libcufftw.so.12", "nvidia-cufft", "12.0.0.61", "manylinux2014_x86_64", "nvidia/cu13/lib/libcufftw.so.12"),
    ("libnccl.so.2", "nvidia-nccl-cu13", "2.28.9", "manylinux_2_18_x86_64", "nvidia/nccl/lib/libnccl.so.2"),
    ("cupy-cub.so", "cupy-cuda13x", "14.2.0", "manylinux2014_x86_64", "cupy/cuda/cub.cpython-311-x86_64-linux-gnu.so"),
) + tuple((f"vllm-0.20.2/{member}", "vllm", "0.20.2", "manylinux_2_35_x86_64", member) for member in (
    # every shared object of the vllm 0.20.2 wheel (its RECORD lists them)
    "vllm/_C.abi3.so", "vllm/_C_stable_libtorch.abi3.so", "vllm/_flashmla_C.abi3.so", "vllm/_flashmla_extension_C.abi3.so",
    "vllm/_moe_C.abi3.so", "vllm/cumem_allocator.abi3.so", "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so",
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so")) + tuple(
    (f"{folder}/{member}", "vllm", "0.34.0", platform, member)
    # the x86_64 wheel, and the aarch64 wheel a GB10 (DGX Spark) installs: the same twelve shared objects, built apart
    for folder, platform in (("vllm-0.34.0", "manylinux_2_28_x86_64"), ("vllm-0.34.0-aarch64", "manylinux_2_28_aarch64"))
    for member in (
        # every shared object of the vllm 0.34.0 wheel (its RECORD lists them)
        "vllm/_C_stable_libtorch.abi3.so", "vllm/_deepselect_C.abi3.so", "vllm/_flashkda_C.abi3.so", "vllm/_flashmla_C.abi3.so",
        "vllm/_flashmla_extension_C.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "vllm/cumem_allocator.abi3.so",
        "vllm/fs_io_C.abi3.so", "vllm/spinloop.abi3.so", "vllm/third_party/deep_gemm/_C_extension.abi3.so",
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"))
# sglang-kernel 0.4.10's common ops (what `import sgl_kernel` loads on every GPU but 9.0), from its x86_64 wheel
# (sm_120a) and from the aarch64 wheel a GB10 installs (sm_121a too): the failure modes are judged on them.
SOURCES += tuple((f"{folder}/sgl_kernel/sm100/common_ops.abi3.so", "sglang-kernel", "0.4.10", platform,
                  "sgl_kernel/sm100/common_ops.abi3.so")
                 for folder, platform in (("sglang-kernel-0.4.10", "manylinux2014_x86_64"),
                                          ("sglang-kernel-0.4.10-aarch64", "manylinux2014_aarch64")))
# torch 2.11.0's libtorch_cuda.so from the aarch64 wheel a GB10 installs: PyPI's first aarch64 torch built with
# CUDA (13.0); those before it are CPU builds, without the file (failure mode prebuilt-no-sm12x).
SOURCES += (("torch-2.11.0-aarch64/torch/lib/libtorch_cuda.so", "torch", "2.11.0", "manylinux_2_28_aarch64",
             "torch/lib/libtorch_cuda.so"),)
# (fixture folder, distribution, version, platform): beside its shared objects, the RECORD rows that name
# them and the Python files patchkit reads in that release (``python_files``), kept whole.
RELEASES = (("vllm-0.34.0", "vllm", "0.34.0", "manylinux_2_28_x86_64"),
            ("vllm-0.34.0-aarch64", "vllm", "0.34.0", "manylinux_2_28_aarch64"))
# A release whose Python files are another's, byte for byte (checked when its fixture is made): kept once, there.
PYTHON_OF = {"vllm-0.34.0-aarch64": "vllm-0.34.0"}
# More Python files of a release that the tests read (the settings' marks, the attention priorities, the
# PCIe-IPC all-reduce of known-speedups.toml).
MORE = {"vllm-0.34.0": ("vllm/__init__.py", "vllm/engine/arg_utils.py", "vllm/v1/attention/backends/registry.py",
                        "vllm/envs.py", "vllm/distributed/device_communicators/cuda_communicator.py",
                        "vllm/distributed/device_communicators/flashinfer_pcie_ipc_all_reduce.py")}


def materialize(name: str, dest: Path) -> Path:
    """The sparse copy of fixture ``name`` at ``dest``."""
    with gzip.open(DATA / f"{name}.extents.gz", "rb") as f:
        blob = f.read()
    assert blob.startswith(MAGIC), name
    head, _, body = blob[len(MAGIC):].partition(b"\n")
    meta = json.loads(head)
    with open(dest, "wb") as out:
        out.truncate(meta["size"])
        at = 0
        for offset, length in meta["extents"]:
            out.seek(offset)
            out.write(body[at:at + length])
            at += length
    return dest


def install_release(folder: str, site: Path) -> None:
    """Release ``folder`` of ``RELEASES`` in ``site`` as pip installs it, with what the fixtures keep of
    it: its shared objects (sparse copies), the Python files kept, RECORD's rows for them, and METADATA."""
    dist, version = next((d, v) for f, d, v, _ in RELEASES if f == folder)
    for name, *_ in SOURCES:
        if name.startswith(f"{folder}/"):
            rel = name.split("/", 1)[1]
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            materialize(name, site / rel)
    python = DATA / PYTHON_OF.get(folder, folder)
    for py in python.rglob("*.py"):
        rel = py.relative_to(python)
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(py.read_bytes())
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text((DATA / folder / "RECORD").read_text() + f"{dist}-{version}.dist-info/METADATA,,\n")


def listing(name: str) -> dict[str, str]:
    """The recorded cuobjdump output of fixture ``name``, by command (``cuobjdump``, ``cuobjdump -all``,
    ``cuobjdump -lelf -lptx``, ``cuobjdump -all -lelf -lptx``)."""
    with gzip.open(DATA / f"{name}.cuobjdump.txt.gz", "rt") as f:
        text = f.read()
    parts = text.split("\n## ")
    return {p.split("\n", 1)[0].removeprefix("## ").removesuffix(" FILE"): p.split("\n", 1)[1] if "\n" in p else ""
            for p in parts if p.strip() and not p.startswith("#!")}


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e - s) for s, e in out]


def extents_of(path: str) -> list[tuple[int, int]]:
    """The (offset, length) ranges patchkit reads to judge ``path`` for every GPU it could be judged for."""
    from patchkit.kernels import evidence
    from patchkit.kernels.fatbin import _ENTRY, read_binary

    read: list[tuple[int, int]] = []
    real = os.pread

    def tracing(fd: int, n: int, at: int) -> bytes:
        data = real(fd, n, at)
        read.append((at, at + len(data)))
        return data

    os.pread = tracing
    try:
        binary = read_binary(path)
        evidence.kernels_in(path, binary.entries)
    finally:
        os.pread = real
    # fat_binaries_elsewhere reads a window of each data section: only the header it finds is kept,
    # the rest of each window is zero in the copy, as nothing there is a fat binary header.
    found = evidence.fat_binaries_elsewhere(path)
    if found is not None:
        read.append((found.offset, found.offset + 16 + _ENTRY.size))
    return _merged(read)


def make(name: str, real: Path, source: str, cuobjdump: Path) -> None:
    from patchkit.judge.kernels import judge

    extents = extents_of(str(real))
    with open(real, "rb") as f:
        body = b"".join(os.pread(f.fileno(), length, offset) for offset, length in extents)
    meta = {"size": real.stat().st_size, "source": source, "extents": extents}
    (DATA / name).parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(DATA / f"{name}.extents.gz", "wb", mtime=0) as out:
        out.write(MAGIC + json.dumps(meta).encode() + b"\n" + body)
    copy = materialize(name, Path(f"/tmp/{name.replace('/', '_')}.sparse"))
    ccs = [CC(7, 5), CC(8, 0), CC(9, 0), CC(10, 0), CC(12, 0), CC(12, 1)]
    a, b = judge(str(real), name, ccs), judge(str(copy), name, ccs)
    assert (a.binary.entries, a.binary.control, a.fits, a.elsewhere) == (b.binary.entries, b.binary.control, b.fits, b.elsewhere), name
    copy.unlink()
    lines = [f"#! {source}; cuobjdump {cuobjdump_version(cuobjdump)}"]
    for args in ([], ["-all"], ["-lelf", "-lptx"], ["-all", "-lelf", "-lptx"]):
        done = subprocess.run([str(cuobjdump), *args, str(real)], capture_output=True, text=True, timeout=600)
        out = (done.stdout + done.stderr).replace(str(real), name)
        lines.append(f"## {' '.join(['cuobjdump', *args])} FILE\n{out.rstrip()}")
    with gzip.GzipFile(DATA / f"{name}.cuobjdump.txt.gz", "wb", mtime=0) as out:
        out.write(("\n".join(lines) + "\n").encode())
    print(f"{name}: {len(extents)} extents, {len(body)} of {meta['size']} bytes")


def python_files(tree: Path, dist: str) -> list[str]:
    """The Python files of an unpacked release that patchkit reads for its compiled code: the start
    ``known-kernels.toml`` names (and the files it leads to), and the files that import each shared
    object with CUDA code that the start does not import (read where one has no code for a GPU)."""
    from patchkit.fixes.kernels import known_kernels
    from patchkit.judge.kernels import judge
    from patchkit.kernels.imports import importers, module_of, start_imports

    known = known_kernels().of(dist)
    start = start_imports(tree, known.start.module, known.start.method)
    assert start.problem is None, start.problem
    keep = list(start.read)
    for so in sorted(tree.rglob("*.so")):
        rel = so.relative_to(tree).as_posix()
        if module_of(rel) not in start.modules and judge(str(so), rel, [CC(12, 0)], known.file(rel)).binary.cuda:
            keep += importers(tree, module_of(rel))
    return sorted(set(keep))


def make_release(folder: str, dist: str, version: str, platform: str) -> None:
    """RECORD's rows of the shared objects, and the Python files patchkit reads, of a release."""
    import csv
    import io
    import tempfile

    from oracle import wheel

    whl = wheel(dist, version, platform)
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(whl) as zf:
        tree = Path(tmp)
        for name in zf.namelist():
            if name.endswith((".py", ".so")) and name.startswith(f"{dist}/"):
                zf.extract(name, tree)
        record = zf.read(f"{dist}-{version}.dist-info/RECORD").decode()
        rows = [row for row in csv.reader(io.StringIO(record)) if row and row[0].endswith(".so")]
        keep = python_files(tree, dist) + list(MORE.get(PYTHON_OF.get(folder, folder), ()))
        for rel in keep:
            if folder in PYTHON_OF:  # kept in the other release's folder: the same bytes
                assert (DATA / PYTHON_OF[folder] / rel).read_bytes() == (tree / rel).read_bytes(), rel
                continue
            (DATA / folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (DATA / folder / rel).write_bytes((tree / rel).read_bytes())
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    (DATA / folder / "RECORD").write_text(out.getvalue())
    print(f"{folder}: {len(rows)} RECORD rows, {len(keep)} Python files from {whl.name}")


def cuobjdump_version(exe: Path) -> str:
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def main(argv: list[str]) -> int:
    import tempfile

    from oracle import cuobjdump, wheel

    tool = cuobjdump()
    with tempfile.TemporaryDirectory() as tmp:
        for name, dist, version, platform, member in SOURCES:
            if argv and not any(name.startswith(a) for a in argv):
                continue
            whl = wheel(dist, version, platform)
            real = Path(tmp) / name.replace("/", "_")
            with zipfile.ZipFile(whl) as zf, zf.open(member) as src, open(real, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
            make(name, real, f"{whl.name}: {member}", tool)
            real.unlink()
    for folder, dist, version, platform in RELEASES:
        if not argv or any(folder.startswith(a) for a in argv):
            make_release(folder, dist, version, platform)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
