"""The reader on the CUDA wheels people install, held out against NVIDIA's cuobjdump: sparse copies of
real libraries (``fixtures.py``: the bytes patchkit reads, every other byte zero) of nvidia-cufft
12.0.0.61, nvidia-nccl-cu13 2.28.9, cupy-cuda13x 14.2.0, vllm 0.20.2 and 0.34.0, sglang-kernel 0.4.10 and
torch 2.11.0 (aarch64: libtorch_cuda.so), beside what cuobjdump 13.4
printed for the real files.  Entry by entry: the executable fat binary as ``cuobjdump FILE`` lists
it, every section as ``cuobjdump -all FILE`` does.  Where the names differ, the documented rule says
why (``listed``: ``--list-elf`` names an ``sm_100f`` cubin's file ``x.sm_100.cubin``).
``make check-kernels`` does the same on the whole wheels, with cuobjdump run on them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fixtures import SOURCES, listing, materialize
from oracle import parse_headers, parse_lists
from test_fatbin import as_cuobjdump

from patchkit.cc import CC
from patchkit.judge.kernels import judge
from patchkit.kernels.compat import NONE, NOT_REGISTERED, SASS, UNKNOWN
from patchkit.kernels.fatbin import EXECUTABLE, RELOCATABLE, read_binary
from support.cli import invoke

NAMES = [name for name, *_ in SOURCES]


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("wheels")
    return {name: materialize(name, folder / name.replace("/", "_")) for name in NAMES}


def as_listed(names: list[str]) -> set[str]:
    """Our names as --list-elf / --list-ptx spell them (``FatbinEntry.listed``): the f dropped, compute_ as sm_."""
    return {n.replace("compute_", "sm_").removesuffix("f") for n in names}


@pytest.mark.parametrize("name", NAMES)
def test_entry_by_entry_as_cuobjdump(copies: dict[str, Path], name: str) -> None:
    b = read_binary(str(copies[name]))
    said = listing(name)
    assert b.problem is None
    executable = [e for e in b.entries if e.section == EXECUTABLE]
    # cuobjdump FILE: the executable fat binary (.nv_fatbin), in order, every entry.
    assert as_cuobjdump(executable) == parse_headers(said["cuobjdump"])
    # cuobjdump -all FILE: every fat binary section; the same entries, however the sections are ordered.
    assert sorted(as_cuobjdump(b.entries)) == sorted(parse_headers(said["cuobjdump -all"]))
    # -lelf -lptx: what the runtime is handed; with -all the relocatable code too.
    assert (as_listed(b.sass()), as_listed(b.ptx())) == parse_lists(said["cuobjdump -lelf -lptx"])
    relocatable = {e.listed for e in b.entries if e.section == RELOCATABLE}
    elf, ptx = parse_lists(said["cuobjdump -all -lelf -lptx"])
    assert elf | ptx == as_listed(b.sass()) | as_listed(b.ptx()) | relocatable


def test_family_names_differ_from_cuobjdump_by_the_documented_rule(copies: dict[str, Path]) -> None:
    """NCCL, CuPy and vLLM carry family cubins: cuobjdump's own header says ``arch = sm_100f``, its
    --list-elf file name ``x.sm_100.cubin``; the JSON keeps both names."""
    nccl = read_binary(str(copies["libnccl.so.2"]))
    assert "sm_100f" in nccl.sass() and "sm_100f" not in parse_lists(listing("libnccl.so.2")["cuobjdump -lelf -lptx"])[0]
    assert ("elf", "sm_100f", (1, 8), True) in parse_headers(listing("libnccl.so.2")["cuobjdump"])
    cub = read_binary(str(copies["cupy-cub.so"]))
    assert cub.sass() == ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100f", "sm_120f"] and cub.ptx() == ["compute_120"]
    doc = json.loads(invoke("kernels", str(copies["cupy-cub.so"]), "--to-cc", "12.1", "--json").stdout)
    names = {(n["name"], n["cuobjdump"], n["kind"], n["section"], n["loads"]) for n in doc["files"][0]["names"]}
    assert {("sm_120f", "sm_120", "sass", ".nv_fatbin", True), ("compute_120", "sm_120", "ptx", ".nv_fatbin", True),
            ("sm_90", "sm_90", "sass", ".nv_fatbin", True)} <= names


def test_nccl_keeps_relocatable_code_beside_what_it_loads(copies: dict[str, Path]) -> None:
    b = read_binary(str(copies["libnccl.so.2"]))
    assert b.control and b.sections == ("__nv_relfatbin", ".nv_fatbin")
    assert b.sass() == ["sm_75", "sm_80", "sm_90", "sm_100", "sm_100f", "sm_110", "sm_120"] and b.ptx() == ["compute_120"]
    assert b.relocatable() == ["sm_75", "sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"]
    assert len(b.entries) == 976 and sum(e.section == EXECUTABLE for e in b.entries) == 87


def test_cufft_is_not_none_anywhere(copies: dict[str, Path]) -> None:
    """cuFFT 12.0's one registered-looking cubin is sm_75, but no .nvFatBinSegment hands it to the
    runtime, and 23,983 fat binaries sit in .ldata: cuFFT ran on an H200 (shared fixtures)."""
    for name in ("libcufft.so.12", "libcufftw.so.12"):
        f = judge(str(copies[name]), name, [CC(9, 0), CC(12, 0), CC(12, 1)])
        assert (f.binary.sass(), f.binary.control) == (["sm_75"], False)
        assert [(x.runs, x.why) for x in f.fits] == [(UNKNOWN, NOT_REGISTERED)] * 3 and f.missing == ()
    cufft = judge(str(copies["libcufft.so.12"]), "libcufft.so.12", [CC(9, 0)])
    assert (cufft.elsewhere.section, cufft.elsewhere.offset, cufft.elsewhere.kind, cufft.elsewhere.arch) == (".ldata", 8515616, 1, 75)
    assert judge(str(copies["libcufftw.so.12"]), "libcufftw.so.12", [CC(9, 0)]).elsewhere is None


def test_a_healthy_cuda_13_environment_exits_0(copies: dict[str, Path], tmp_path: Path) -> None:
    files = [str(copies[n]) for n in ("libcufft.so.12", "libcufftw.so.12", "libnccl.so.2", "cupy-cub.so")]
    done = invoke("kernels", *files, "--to-cc", "9.0")
    assert done.returncode == 0, done.stdout
    cufft = ("sm_75: cannot tell for 9.0: kernels loaded another way (no .nvFatBinSegment: the CUDA runtime is never "
             "handed its .nv_fatbin")
    assert done.stdout.decode().splitlines() == [
        "4 files for 9.0 (--to-cc)",
        f"{files[0]}: {cufft}; it keeps fat binaries in .ldata)",
        f"{files[1]}: {cufft})",
        f"{files[2]}: sm_75, sm_80, sm_90, sm_100, sm_100f, sm_110, sm_120, PTX compute_120; relocatable sm_75, sm_80, sm_90, "
        "sm_100, sm_110, sm_120, compute_120: runs on 9.0 (sm_90)",
        f"{files[3]}: sm_75, sm_80, sm_86, sm_89, sm_90, sm_100f, sm_120f, PTX compute_120: runs on 9.0 (sm_90)",
    ]
    doc = json.loads(invoke("kernels", *files[:1], "--to-cc", "12.1", "--json").stdout)
    (f,) = doc["files"]
    assert (doc["ok"], doc["exit_code"], f["verdict"], f["registered"], f["elsewhere"]) == (True, 0, "unknown", False,
                                                                                          {"section": ".ldata", "offset": 8515616})
    assert f["gpus"] == [{"cc": "12.1", "runs": "unknown", "by": [], "why": "not-registered"}]


def test_vllm_020_for_a_gb10(copies: dict[str, Path]) -> None:
    by = {Path(n).name: judge(str(copies[n]), n, [CC(12, 1)]) for n in NAMES if n.startswith("vllm-0.20.2/")}
    assert [(x.runs, x.by) for x in by["_C.abi3.so"].fits] == [(SASS, ("sm_120", "sm_120f"))]
    assert [n for n, f in sorted(by.items()) if f.missing] == ["_flashmla_C.abi3.so", "_flashmla_extension_C.abi3.so",
                                                               "_vllm_fa3_C.abi3.so"]
    assert not by["cumem_allocator.abi3.so"].binary.cuda and not by["_C.cpython-312-x86_64-linux-gnu.so"].binary.cuda


def test_sglang_kernels_wheels_are_judged_by_the_common_ops_they_install(copies: dict[str, Path], tmp_path: Path) -> None:
    """sglang-kernel 0.4.10's x86_64 wheel carries sm_120a in its common ops, its aarch64 wheel (a GB10's) sm_121a
    too: prebuilt-no-sm12x is exposed where the common ops installed have no code for the GPU, and only there; the
    release alone (0.4.10 in the mode's range) once made doctor fail on every GB10 and on every RTX PRO 6000."""
    from patchkit.judge.modes import Exposed, modes_here

    rel = "sgl_kernel/sm100/common_ops.abi3.so"
    sites = {}
    for arch, folder in (("x86_64", "sglang-kernel-0.4.10"), ("aarch64", "sglang-kernel-0.4.10-aarch64")):
        site = tmp_path / arch
        (site / "sgl_kernel/sm100").mkdir(parents=True)
        (site / rel).write_bytes(copies[f"{folder}/{rel}"].read_bytes())
        sites[arch] = site
    assert [f.runs for f in judge(str(sites["x86_64"] / rel), rel, [CC(12, 0), CC(12, 1)]).fits] == [SASS, NONE]
    assert [f.runs for f in judge(str(sites["aarch64"] / rel), rel, [CC(12, 0), CC(12, 1)]).fits] == [SASS, SASS]

    def judged(arch: str, cc: CC) -> list[tuple[str, Exposed, tuple[CC, ...]]]:
        found = modes_here({"sglang-kernel": "0.4.10"}, [cc], [sites[arch]])
        return [(h.mode.name, h.verdict, h.gpus) for h in found if h.mode.name == "prebuilt-no-sm12x"]

    assert judged("x86_64", CC(12, 1)) == [("prebuilt-no-sm12x", Exposed.EXPOSED, (CC(12, 1),))]
    assert judged("x86_64", CC(12, 0)) == judged("aarch64", CC(12, 1)) == judged("aarch64", CC(12, 0)) == []
    # Without the file (another layout), the release decides, as the data's range says.
    assert modes_here({"sglang-kernel": "0.4.10"}, [CC(12, 1)], [tmp_path / "none"])[0].mode.name == "prebuilt-no-sm12x"


def test_a_torch_of_an_exposed_release_is_judged_by_its_libtorch_cuda(tmp_path: Path) -> None:
    """torch 2.7.x from PyPI (CUDA 12.6) has no code for 12.x; the same release from PyTorch's cu128 index, the
    way out's caveat, carries sm_120: prebuilt-no-sm12x is judged on the libtorch_cuda.so installed (real nvcc
    builds stand for it: sm_90a and sm_100a, then sm_120f), and on the release where there is none (a CPU build,
    what PyPI's aarch64 wheels are through 2.10.0)."""
    from fixtures import DATA

    from patchkit.judge.modes import Exposed, modes_here

    def judged(built: str | None, version: str, cc: CC) -> list[tuple[Exposed, tuple[CC, ...]]]:
        site = tmp_path / f"{built}-{version}-{cc}"
        if built is not None:
            (site / "torch/lib").mkdir(parents=True)
            (site / "torch/lib/libtorch_cuda.so").write_bytes((DATA.parents[0] / f"{built}.so").read_bytes())
        return [(h.verdict, h.gpus) for h in modes_here({"torch": version}, [cc], [site]) if h.mode.name == "prebuilt-no-sm12x"]

    assert judged("hopper-blackwell-dc", "2.7.1", CC(12, 0)) == [(Exposed.EXPOSED, (CC(12, 0),))]
    assert judged("sm120f", "2.7.1+cu128", CC(12, 0)) == judged("sm120f", "2.7.1+cu128", CC(12, 1)) == []
    assert judged(None, "2.7.1", CC(12, 1)) == [(Exposed.EXPOSED, (CC(12, 1),))]
    # PyPI's aarch64 torch (a GB10's) is a CPU build through 2.10.0 (no libtorch_cuda.so): exposed, and only
    # the upgrade to 2.11.0, its first aarch64 build with CUDA, is offered; x86_64's 2.9.0 carries sm_120.
    assert judged(None, "2.9.0", CC(12, 1)) == judged(None, "2.10.0", CC(12, 1)) == [(Exposed.EXPOSED, (CC(12, 1),))]
    assert judged("sm120f", "2.9.0", CC(12, 0)) == judged("sm120f", "2.9.0", CC(12, 1)) == []
    assert judged("hopper-blackwell-dc", "2.9.0", CC(12, 0)) == [(Exposed.EXPOSED, (CC(12, 0),))]  # no code for 12.x
    cpu = [h for h in modes_here({"torch": "2.9.0"}, [CC(12, 1)], [tmp_path / "none"]) if h.mode.name == "prebuilt-no-sm12x"]
    assert [(w.project, w.what) for w in cpu[0].ways] == [("torch", "2.11.0")]
    old = [h for h in modes_here({"torch": "2.7.1"}, [CC(12, 1)], [tmp_path / "none"]) if h.mode.name == "prebuilt-no-sm12x"]
    assert [(w.project, w.what) for w in old[0].ways] == [("torch", "2.8.0"), ("torch", "2.11.0")]
    assert judged(None, "2.11.0", CC(12, 1)) == []
    assert judged("hopper-blackwell-dc", "2.11.0", CC(12, 0)) == []  # a release past the range: not judged on its file


def test_torch_2110_aarch64_runs_on_12x_and_a_cuda_build_in_the_range_is_judged_by_it(copies: dict[str, Path],
                                                                                      tmp_path: Path) -> None:
    """torch 2.11.0's aarch64 wheel, PyPI's first aarch64 torch built with CUDA (its libtorch_cuda.so, a sparse copy):
    sm_120 and sm_121a, so it runs on 12.0 and 12.1.  A GB10 whose torch of the range (2.7.0 to 2.10.0) is a CUDA build
    (not PyPI's CPU one: its file stands here for that build's) is judged on that file, and not exposed."""
    from patchkit.judge.modes import modes_here

    lib = copies["torch-2.11.0-aarch64/torch/lib/libtorch_cuda.so"]
    here = judge(str(lib), "torch/lib/libtorch_cuda.so", [CC(12, 0), CC(12, 1)])
    assert [(f.cc, f.runs, f.by) for f in here.fits] == [(CC(12, 0), SASS, ("sm_120", "sm_120a")),
                                                         (CC(12, 1), SASS, ("sm_120", "sm_121a"))]
    site = tmp_path / "site-packages"
    (site / "torch/lib").mkdir(parents=True)
    os.link(lib, site / "torch/lib/libtorch_cuda.so")
    assert [h for h in modes_here({"torch": "2.10.0"}, [CC(12, 1)], [site]) if h.mode.name == "prebuilt-no-sm12x"] == []
    cpu = [h.gpus for h in modes_here({"torch": "2.10.0"}, [CC(12, 1)], [tmp_path / "cpu"]) if h.mode.name == "prebuilt-no-sm12x"]
    assert cpu == [(CC(12, 1),)]


def test_a_shared_object_judged_already_is_not_read_again(tmp_path: Path) -> None:
    """doctor's compiled-code section judges every shared object installed; the failure modes take that judgement
    (``compiled``, by path) instead of reading a 500 MB libtorch_cuda.so again: given the judgement of an sm_120f
    build for a file whose own bytes have no code for 12.x, the mode follows the judgement given."""
    from fixtures import DATA

    from patchkit.judge.kernels import FileHere, judge
    from patchkit.judge.modes import Exposed, modes_here

    site = tmp_path / "site-packages"
    (site / "torch/lib").mkdir(parents=True)
    lib = site / "torch/lib/libtorch_cuda.so"
    lib.write_bytes((DATA.parents[0] / "hopper-blackwell-dc.so").read_bytes())
    runs = judge(str(DATA.parents[0] / "sm120f.so"), "torch/lib/libtorch_cuda.so", [CC(12, 0)])

    def exposed(compiled: dict[Path, FileHere] | None) -> list[Exposed]:
        return [h.verdict for h in modes_here({"torch": "2.7.1"}, [CC(12, 0)], [site], compiled=compiled)
                if h.mode.name == "prebuilt-no-sm12x"]

    assert exposed(None) == exposed({}) == [Exposed.EXPOSED]
    assert exposed({lib: runs}) == []


def test_doctor_and_diagnose_on_an_installed_cufft(copies: dict[str, Path], tmp_path: Path) -> None:
    """nvidia-cufft 12.0.0.61 as pip installs it (its RECORD's rows for its shared objects, data/wheels/): doctor's
    compiled-code lines and diagnose's code behind a missing kernel image say "cannot tell", never "no code"."""
    from patchkit.commands.diagnose import CodeBehind, Gpus
    from patchkit.judge.kernels import installed_code
    from patchkit.render.diagnose import code_lines
    from patchkit.render.kernels import distribution_lines

    site = tmp_path / "site-packages"
    info = site / "nvidia_cufft-12.0.0.61.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_bytes((Path(__file__).parent / "data" / "wheels" / "nvidia-cufft-12.0.0.61" / "RECORD").read_bytes())
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    for name in ("libcufft.so.12", "libcufftw.so.12"):
        (site / "nvidia" / "cu13" / "lib" / name).write_bytes(copies[name].read_bytes())
    (d,) = installed_code([site], [CC(9, 0)])
    assert d.failing() == []
    lines = distribution_lines(d, [CC(9, 0)], listing=False)
    assert lines[0] == "  nvidia-cufft 12.0.0.61: cannot tell whether its 2 files with CUDA code run on 9.0 (below)"
    assert lines[1].startswith("    nvidia/cu13/lib/libcufft.so.12: sm_75: cannot tell for 9.0: kernels loaded another way")
    said = code_lines(CodeBehind("nvidia", (d,), Gpus((CC(9, 0),), True)))
    assert said == ["files: no shared object of nvidia-cufft 12.0.0.61 lacks code for this machine's GPUs (9.0, nvidia-smi); "
                    "cannot tell for libcufft.so.12, libcufftw.so.12 (kernels loaded another way)"]


@pytest.mark.network
def test_doctor_says_one_thing_of_a_distribution_it_does_not_know(sglang_venv: Path, tmp_path: Path) -> None:
    """A distribution patchkit knows nothing of (not in known-kernels.toml) with a file that has no code for
    the GPUs: doctor says it once, what to do if the server loads it, and its last line agrees (exit 0);
    before, it said "N of M files ... cannot run here", "do: install a build ..." and then "nothing GPUs
    of cc 9.0 need is missing"."""
    from support.venvs import copy_venv

    venv = copy_venv(sglang_venv, tmp_path / "V")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "some_ext").mkdir()
    (site / "some_ext" / "_C.so").write_bytes((Path(__file__).parent / "data" / "rdc" / "sm80-only.so").read_bytes())
    (site / "some_ext-1.0.dist-info").mkdir()
    (site / "some_ext-1.0.dist-info" / "RECORD").write_text("some_ext/_C.so,,\n")
    python = str(venv / "bin" / "python")
    done = invoke("doctor", "--python", python, "--to-cc", "9.0")
    assert done.returncode == 0, done.stdout.decode()
    lines = done.stdout.decode().splitlines()
    start = lines.index(f"compiled CUDA code for 9.0 (1 distribution of {python} carries it):")
    assert lines[start + 1:start + 4] == [
        "  some-ext 1.0: its 1 file with CUDA code cannot run on 9.0: a start fails only if the server loads one "
        "(patchkit does not know when it does)",
        "    some_ext/_C.so: sm_80: no code for 9.0",
        "    do (if the server loads them): install a build of it that carries sm_90 (patchkit kernels shows what a build "
        "carries), or build it from source for these GPUs: for a PyTorch extension, TORCH_CUDA_ARCH_LIST=\"9.0\" "
        "(torch.utils.cpp_extension reads it)",
    ]
    assert lines[-1] == ("nothing GPUs of cc 9.0 need is missing; some-ext 1.0 (_C.so) cannot run on them, which matters "
                         "only if the server loads them (above)")
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", "9.0", "--json").stdout)
    assert (doc["exit_code"], doc["compiled_code"]["no_code"], doc["compiled_code"]["no_code_if_loaded"]) == (
        0, [], ["some-ext 1.0 (_C.so)"])
