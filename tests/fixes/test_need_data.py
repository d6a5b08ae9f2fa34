"""What decides whether a fix is needed here, and the all-reduce that helps on PCIe SM12x, are
data: the need's ``helps_without`` / ``adds_without`` (effects.py) and known-speedups.toml
(speedups.py).  The shipped values are checked against the real wheels and source archives they
quote (read as zip and tar files, never installed or imported; vLLM 0.34.0's files from the sparse
copy of its wheel that tests/kernels/data keeps); a wrong table is one BadInput line."""

from __future__ import annotations

import ast
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.fixes.effects import read_effect, read_effects
from patchkit.fixes.load import HERE, read_fixes
from patchkit.fixes.speedups import SPEEDUPS, read_speedups
from patchkit.render.fixes import needs_json

PCIE_IPC_AR = "sglang/srt/distributed/device_communicators/pcie_ipc_ar.py"
VLLM_PCIE_IPC = "vllm/distributed/device_communicators/flashinfer_pcie_ipc_all_reduce.py"
V034 = Path(__file__).resolve().parents[1] / "kernels" / "data" / "wheels" / "vllm-0.34.0"
SPEEDUPS_BY_NAME = {sp.name: sp for sp in read_speedups()}
SGLANG_SP, VLLM_SP = SPEEDUPS_BY_NAME["pcie-ipc-allreduce"], SPEEDUPS_BY_NAME["vllm-pcie-ipc-allreduce"]


def wheel(distribution: str, version: str) -> zipfile.ZipFile:
    from support.mirror import wheel_zip

    return wheel_zip(version, distribution)


def test_torch_symm_mem_helps_without_multicast_only_where_it_crashes() -> None:
    (need,) = read_effects()["torch-symm-mem"].needs
    assert (need.machine, need.helps_without, need.decides_need()) == ("multicast", ("crash",), True)
    assert need.adds_without.startswith("with the key the communicator would go on to torch_symm_mem.rendezvous")
    (fusion,) = read_effects()["allreduce-fusion"].needs
    assert (fusion.helps_without, fusion.adds_without, fusion.decides_need()) == ((), "", False)


def test_the_shipped_speedups() -> None:
    assert [sp.name for sp in read_speedups()] == ["pcie-ipc-allreduce", "vllm-pcie-ipc-allreduce"]
    sp = SGLANG_SP
    assert (sp.name, sp.major, sp.links, sp.turn_on, sp.source, sp.server) == (
        "pcie-ipc-allreduce", 12, "pcie", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1", PCIE_IPC_AR, "sglang")
    assert [(r.project, r.since) for r in sp.requires] == [("sglang", "0.5.21"), ("flashinfer", "0.7.0")]
    assert [r.met(v) for r, v in zip(sp.requires, ("0.5.20", "0.7.0"), strict=True)] == [False, True]
    sp = VLLM_SP
    assert (sp.major, sp.links, sp.turn_on, sp.source, sp.server) == (
        12, "pcie", "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1", VLLM_PCIE_IPC, "vllm")
    assert (sp.measured, sp.measured_by) == ((), "")  # vLLM's files quote no measurement
    assert [(r.project, r.since) for r in sp.requires] == [("vllm", "0.30.0"), ("flashinfer", "0.7.0")]
    assert "known-speedups" not in read_fixes()  # not a fix


def test_the_vllm_speedup_is_what_vllm_0340_says() -> None:
    """The variable, its default and why it is opt-in (envs.py), the sizes and types it serves and the
    warning with an older FlashInfer (flashinfer_pcie_ipc_all_reduce.py), its gates (cuda_communicator.py)."""
    envs = (V034 / "vllm/envs.py").read_text()
    variable = VLLM_SP.turn_on.removesuffix("=1")
    assert f'int(os.getenv("{variable}", "0"))' in envs
    assert "# This backend has a strict single-stream contract and is opt-in while its\n    # integration is being qualified." in envs
    assert "opt-in \"while its integration is being qualified\", vllm/envs.py; off under VLLM_BATCH_INVARIANT" in VLLM_SP.serves
    module = ast.parse((V034 / VLLM_SP.source).read_bytes())
    assigned = {n.targets[0].id: ast.unparse(n.value) for n in module.body if isinstance(n, ast.Assign)}
    assert (assigned["_SUPPORTED_WORLD_SIZES"], assigned["_SUPPORTED_DTYPES"]) == ("(2, 4, 8)", "(torch.bfloat16, torch.float16)")
    assert VLLM_SP.serves.startswith("tensor-parallel groups of 2, 4 or 8 GPUs on one node, bf16 or fp16 reductions")
    strings = {n.value for n in ast.walk(module) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert VLLM_SP.requires[1].otherwise in strings  # FlashInferPcieIpcAllReduce's warning with an older FlashInfer
    communicator = (V034 / "vllm/distributed/device_communicators/cuda_communicator.py").read_text()
    assert ("use_flashinfer_pcie_ipc_allreduce = (\n                envs.VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC\n"
            "                and not envs.VLLM_BATCH_INVARIANT\n            )") in communicator
    assert "measured" not in (V034 / VLLM_SP.source).read_text().lower()  # nothing to quote


@pytest.mark.parametrize("version", ["0.5.21", "0.5.23"])
@pytest.mark.network
def test_the_measurement_is_quoted_from_the_real_sglang_wheel(version: str) -> None:
    sp = SGLANG_SP
    whl = wheel("sglang", version)
    module = ast.parse(whl.read(sp.source))
    environ = whl.read("sglang/srt/environ.py").decode()
    docstring = ast.get_docstring(module, clean=False)
    sentence, *table = sp.measured
    assert " ".join(sentence.split()) in " ".join(docstring.split())  # wrapped over two lines there
    assert all(row in docstring.splitlines() for row in table)
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE = EnvBool(False)" in environ
    strings = {n.value for n in ast.walk(module) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert sp.requires[1].otherwise in strings  # PcieIpcCommunicator's warning with an older FlashInfer


@pytest.mark.parametrize(("distribution", "version", "path", "has"), [
    ("sglang", "0.5.20", PCIE_IPC_AR, False),
    ("sglang", "0.5.21", PCIE_IPC_AR, True),
    ("flashinfer-python", "0.6.18.post1", "flashinfer/comm/pcie_ipc_ar.py", False),
    ("flashinfer-python", "0.7.0", "flashinfer/comm/pcie_ipc_ar.py", True),
])
@pytest.mark.network
def test_the_first_releases_that_have_it(distribution: str, version: str, path: str, has: bool) -> None:
    whl = wheel(distribution, version)
    assert (path in whl.namelist()) is has
    if has and distribution == "flashinfer-python":
        assert re.search(rb"^class PcieIpcAllReduceWorkspace\b", whl.read(path), re.M)
    project = "sglang" if distribution == "sglang" else "flashinfer"
    for sp in read_speedups():  # both use FlashInfer's PcieIpcAllReduceWorkspace
        assert [r.met(version) for r in sp.requires if r.project == project] in ([has], [])


@pytest.mark.parametrize(("version", "has"), [("0.29.0", False), ("0.30.0", True)])
@pytest.mark.network
def test_the_first_vllm_that_has_it(version: str, has: bool) -> None:
    """vllm 0.30.0's source archive is the first with the module and the variable (the wheels are 239 MB)."""
    import tarfile

    from support.mirror import default_cache, fetch_sdist

    with tarfile.open(fetch_sdist("vllm", version, default_cache())) as tar:
        assert (f"vllm-{version}/{VLLM_PCIE_IPC}" in tar.getnames()) is has
        envs = tar.extractfile(f"vllm-{version}/vllm/envs.py").read().decode()
    assert ('"VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC"' in envs) is has
    assert VLLM_SP.requires[0].met(version) is has


GOOD = (HERE / SPEEDUPS).read_text()


@pytest.mark.parametrize(("old", "new", "reason"), [
    ('links = "pcie"', 'links = "nvlink"', "speedup pcie-ipc-allreduce: links 'nvlink' is not one of pcie"),
    ("major = 12", 'major = "12"', "speedup pcie-ipc-allreduce: 'major' is missing or not int"),
    ('turn_on = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"\n', "", "speedup pcie-ipc-allreduce: 'turn_on' is missing or not str"),
    ('project = "flashinfer"', 'project = "flashinfer-python"',
     "speedup pcie-ipc-allreduce, requires 2: project 'flashinfer-python' is not a project of projects.toml"),
    ('since = "0.7.0"', 'since = "seven"', "speedup pcie-ipc-allreduce, requires 2: since 'seven' is not a release version"),
    ("[[speedups.requires]]", "[[speedups.required]]", "speedup pcie-ipc-allreduce: 'requires' must be a list of tables ([[speedups.requires]])"),
    ('name = "pcie-ipc-allreduce"\n', "", "speedup 1: 'name' is missing or not str"),
    ('measured_by = "the SGLang authors"\n', "",
     "speedup pcie-ipc-allreduce: 'measured' and 'measured_by' go together (a measurement says who made it)"),
    ('# No measurement: neither', 'measured_by = "someone"\n# No measurement: neither',
     "speedup vllm-pcie-ipc-allreduce: 'measured' and 'measured_by' go together (a measurement says who made it)"),
])
def test_a_wrong_speedup_is_one_line(tmp_path: Path, old: str, new: str, reason: str) -> None:
    shutil.copy(HERE / "projects.toml", tmp_path / "projects.toml")
    assert old in GOOD
    (tmp_path / SPEEDUPS).write_text(GOOD.replace(old, new))
    with pytest.raises(BadInput) as exc:
        read_speedups(tmp_path)
    assert str(exc.value) == f"{tmp_path / SPEEDUPS}: {reason}"


def test_an_unreadable_speedups_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / SPEEDUPS).write_text("[[speedups]\n")
    with pytest.raises(BadInput) as exc:
        read_speedups(tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / SPEEDUPS}: not a readable TOML file (")


NEED = '''[effect]
asked_with = "--x"
changes = "c"
upstream = "u"
[[effect.needs]]
machine = "multicast"
says = "s"
otherwise = "o"
then = "t"
'''


@pytest.mark.parametrize(("more", "reason"), [
    ('helps_without = ["crash"]\n', "torch-symm-mem, effect, needs 1: 'adds_without' is missing or not str"),
    ('helps_without = ["boom"]\nadds_without = "a"\n', "torch-symm-mem, effect, needs 1: helps_without 'boom' is not one of crash, warning, off"),
    ('helps_without = "crash"\nadds_without = "a"\n', "torch-symm-mem, effect, needs 1: 'helps_without' is missing or not list"),
    ("adds_without = 3\n", "torch-symm-mem, effect, needs 1: 'adds_without' is missing or not str"),
])
def test_a_wrong_need_is_one_line(tmp_path: Path, more: str, reason: str) -> None:
    path = tmp_path / "torch-symm-mem.toml"
    path.write_text(NEED + more)
    with pytest.raises(BadInput) as exc:
        read_effect(path)
    assert str(exc.value) == f"{path}: {reason}"


def test_a_need_without_the_keys_decides_nothing(tmp_path: Path) -> None:
    path = tmp_path / "torch-symm-mem.toml"
    path.write_text(NEED)
    (need,) = read_effect(path).needs
    assert (need.helps_without, need.adds_without, need.decides_need()) == ((), "", False)


DEFAULT_ON = '''[effect]
asked_with = "--x"
changes = "c"
upstream = "u"
[[effect.default_on]]
project = "sglang"
since = "0.5.7"
until = "0.5.7"
models = ["M"]
with_project = "flashinfer"
fixed_in = "0.6.17"
'''


def test_the_fusion_sglang_turns_on_by_itself_names_the_fix_that_stops_it() -> None:
    """SGLang 0.5.4.post2 - 0.5.7 turn the fusion on by themselves; fusion-self-enable (on by default)
    carries 0.5.8's narrowing to them, so allreduce-fusion's entries name it."""
    fusion = read_effects()["allreduce-fusion"]
    assert [(d.releases(), d.prevented_by) for d in fusion.default_on] == [
        ("0.5.4.post2 - 0.5.6.post2", "fusion-self-enable"), ("0.5.7", "fusion-self-enable")]
    assert read_fixes()["fusion-self-enable"].default


@pytest.mark.parametrize(("more", "reason"), [
    ('prevented_by = "no-such-fix"\n', "prevented_by 'no-such-fix' is not another fix"),
    ('prevented_by = "known-failures"\n', "prevented_by 'known-failures' is not another fix"),  # a data file, no fix
    ('prevented_by = "allreduce-fusion"\n', "prevented_by 'allreduce-fusion' is not another fix"),  # itself
    ("prevented_by = 3\n", "'prevented_by' is missing or not str"),
])
def test_a_wrong_prevented_by_is_one_line(tmp_path: Path, more: str, reason: str) -> None:
    for name in ("fusion-self-enable.toml", "known-failures.toml"):
        shutil.copy(HERE / name, tmp_path / name)
    path = tmp_path / "allreduce-fusion.toml"
    path.write_text(DEFAULT_ON + more)
    with pytest.raises(BadInput) as exc:
        read_effect(path)
    assert str(exc.value) == f"{path}: allreduce-fusion, effect, default_on 1: {reason}"
    path.write_text(DEFAULT_ON + 'prevented_by = "fusion-self-enable"\n')
    (d,) = read_effect(path).default_on
    assert d.prevented_by == "fusion-self-enable"
    path.write_text(DEFAULT_ON)
    assert read_effect(path).default_on[0].prevented_by == ""


# flashinfer/compilation_context.py as the wheels write it (whitespace collapsed), per form: its first and last
# release, the lines that make what it builds for 12.x, lines it must not hold, and what the fusion's need says
# then per cc (cuda, arch: for_cc's words).  12.1 in 0.5.0 - 0.6.6: no CUDA check there; the first ptxas that
# knows sm_121a is 12.9's (the data's comment).
CONTEXT_FORMS = [
    ("0.5.0", "0.6.6", ['if major >= 9: minor = str(minor) + "a"'], ["is_cuda_version_at_least", '"0f"'],
     {"12.0": ("12.8 or later", "sm_120a"), "12.1": ("12.9 or later", "sm_121a")}),
    ("0.6.7", "0.6.7.post3", ['elif major == 12: from flashinfer.jit.cpp_ext import is_cuda_version_at_least if '
                              'is_cuda_version_at_least("12.9"): return (major, "0f") else: raise RuntimeError("SM 12.x '
                              'requires CUDA >= 12.9")'], ["if minor == 0"],
     {"12.0": ("12.9 or later", "sm_120f"), "12.1": ("12.9 or later", "sm_120f")}),
    ("0.6.8", "0.7.0", ['if is_cuda_version_at_least("12.9"): if minor == 0: return (major, "0f") else: return (major, '
                        'str(minor) + "a") else: raise RuntimeError("SM 12.x requires CUDA >= 12.9")'], ['"0a"'],
     {"12.0": ("12.9 or later", "sm_120f"), "12.1": ("12.9 or later", "sm_121a")}),
    ("0.7.1", "0.7.4", ['if minor == 0: if is_cuda_version_at_least("12.9"): return (major, "0f") if '
                        'is_cuda_version_at_least("12.8"): return (major, "0a") raise RuntimeError("SM 120 requires CUDA >= 12.8")',
                        'if is_cuda_version_at_least("12.9"): return (major, str(minor) + "a") raise RuntimeError("SM 12.1+ '
                        'requires CUDA >= 12.9")'], ["SM 12.x requires"],
     {"12.0": ("12.8 or later", "sm_120f, or sm_120a with CUDA 12.8"), "12.1": ("12.9 or later", "sm_121a")}),
]
# The gencode each (major, minor) pair becomes, in every form.
GENCODE = 'f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"'


@pytest.mark.parametrize("version", ["0.5.0", "0.6.4", "0.6.6", "0.6.7", "0.6.7.post3", "0.6.8", "0.6.16.post4", "0.7.0",
                                     "0.7.1", "0.7.4"])
@pytest.mark.network
def test_the_fusion_needs_the_cuda_the_flashinfer_release_builds_with(version: str) -> None:
    """The JIT build the fusion's need names for each FlashInfer release, as its compilation_context.py builds."""
    (need,) = read_effects()["allreduce-fusion"].needs
    whl = wheel("flashinfer-python", version)
    source = " ".join(whl.read("flashinfer/compilation_context.py").decode().split())
    from patchkit.versions import in_range

    (form,) = [f for f in CONTEXT_FORMS if in_range(version, f[0], f[1])]
    _, _, holds, lacks, words = form
    assert all(line in source for line in holds) and not any(line in source for line in lacks)
    assert GENCODE in source
    assert need.project == "flashinfer"
    for cc, (cuda, arch) in words.items():
        said = need.words(CC.parse(cc), {"flashinfer": version})
        assert (said["cuda"], said["arch"]) == (cuda, arch)
        assert need.said_for(CC.parse(cc), {"flashinfer": version}) == (
            f"CUDA {cuda} and nvcc, for FlashInfer's JIT build of {arch} (trtllm_comm.so)")


def test_without_a_flashinfer_release_the_need_says_every_form() -> None:
    """An SGLang patch, or an SGLang without FlashInfer, knows no FlashInfer release: the words name both CUDAs;
    a release newer than the forms read (0.7.4) gets the same."""
    (need,) = read_effects()["allreduce-fusion"].needs
    anyone = ("CUDA 12.8 or later (12.9 or later with FlashInfer 0.6.7 to 0.7.0) and nvcc, for FlashInfer's JIT build "
              "of sm_120a or sm_120f (trtllm_comm.so)")
    assert need.says == need.said_for(CC(12, 0)) == need.said_for(CC(12, 0), {"flashinfer": "0.7.5"}) == anyone
    assert need.said_for(CC(12, 0), {"sglang": "0.6.7"}) == anyone  # another project's release says nothing of FlashInfer's
    assert need.said_for(CC(12, 1)) == ("CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_121a, or sm_120f "
                                      "with FlashInfer 0.6.7 to 0.6.7.post3 (trtllm_comm.so)")
    assert need.otherwise_for(CC(12, 1), {"flashinfer": "0.6.7"}) == "FlashInfer cannot build the comm module for SM121"
    assert need.of_release("flashinfer", "0.6.9").says == "CUDA 12.9 or later and nvcc, for FlashInfer's JIT build of sm_120f (trtllm_comm.so)"
    assert need.of_release("sglang", "0.5.9").says == anyone
    assert needs_json(need)["for_cc"]["12.0"][2] == {"since": "0.6.7", "until": "0.7.0", "arch": "sm_120f", "cuda": "12.9 or later"}


FOR_CC = NEED.replace('machine = "multicast"\nsays = "s"\notherwise = "o"', 'machine = "nvcc"\nsays = "{cuda}"\notherwise = "{gpu}"')


@pytest.mark.parametrize(("more", "reason"), [
    ('project = "flashinfer"\nfor_cc = { "12.0" = [{ cuda = "a", gpu = "g" }, { since = "0.6.7", until = "0.6.8", cuda = "b" }, '
     '{ since = "0.6.8", until = "0.7.0", cuda = "c" }] }\n', ", for_cc 12.0: releases 0.6.8 - 0.7.0 overlap another table's"),
    ('for_cc = { "12.0" = [{ cuda = "a", gpu = "g" }, { since = "0.6.7", until = "0.6.8", cuda = "b" }] }\n',
     ": 'project' must name the project whose releases for_cc's since/until are"),
    ('project = "flashinfer"\nfor_cc = { "12.0" = [{ since = "0.6.7", until = "0.6.8", cuda = "a", gpu = "g" }] }\n',
     ", for_cc 12.0: the first table holds the words for any release (no since, until)"),
    ('project = "flashinfer"\nfor_cc = { "12.0" = [{ cuda = "a", gpu = "g" }, { since = "0.7.0", until = "0.6.8" }] }\n',
     ", for_cc 12.0: since 0.7.0 is after until 0.6.8"),
    ('project = "flashinfer"\nfor_cc = { "12.0" = [{ cuda = "a", gpu = "g" }, { since = "0.6.7", cuda = "b" }] }\n',
     ", for_cc 12.0: 'until' is missing or not str"),
    ('project = "flashinfer"\nfor_cc = { "12.0" = [] }\n', ', for_cc 12.0: must be a table or a list of tables ([[effect.needs.for_cc."12.0"]])'),
    ('project = "flashinfer"\nfor_cc = { "12.0" = [{ cuda = "a" }] }\n', ": for_cc must give, for 12.0 and each cc, the words says and otherwise name"),
    ('project = "flashinfer"\nfor_cc = { "12.1" = [{ cuda = "a", gpu = "g" }] }\n', ": for_cc must give, for 12.0 and each cc, the words says and otherwise name"),
    ('project = "flashinfer-python"\nfor_cc = { "12.0" = { cuda = "a", gpu = "g" } }\n', ": project 'flashinfer-python' is not one of "),
])
def test_a_wrong_for_cc_is_one_line(tmp_path: Path, more: str, reason: str) -> None:
    path = tmp_path / "torch-symm-mem.toml"
    path.write_text(FOR_CC + more)
    with pytest.raises(BadInput) as exc:
        read_effect(path)
    assert str(exc.value).startswith(f"{path}: torch-symm-mem, effect, needs 1{reason}")
    path.write_text(FOR_CC + 'project = "flashinfer"\nfor_cc = { "12.0" = [{ cuda = "a", gpu = "g" }, '
                    '{ since = "0.6.7", until = "0.6.8", cuda = "b" }], "12.1" = { cuda = "c", gpu = "h" } }\n')
    (need,) = read_effect(path).needs
    assert (need.says, need.otherwise) == ("a", "g")
    assert [need.said_for(cc, {"flashinfer": v}) for cc, v in [(CC(12, 0), "0.6.6"), (CC(12, 0), "0.6.8"), (CC(12, 1), "0.6.8")]] == ["a", "b", "c"]
    assert need.otherwise_for(CC(12, 0), {"flashinfer": "0.6.7"}) == "g"  # the keys a range leaves out are the first table's
