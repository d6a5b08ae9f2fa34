"""The GB10 settings of vLLM and SGLang (issue 42) judged on the releases' own files, and the facts
each one rests on read from those files: vLLM's source archives (the 0.15.0 and 0.34.0 wheels, where
no archive is cached), SGLang's and flashinfer-python's wheels, sgl-deep-gemm 0.1.4.post1's wheel.

- ``vllm-fp4-moe-gb10`` (VLLM_USE_FLASHINFER_MOE_FP4=0): a crash, not wrong output; said for vLLM
  0.16.0 - 0.23.0 only: up to 0.14.1 FlashInfer's FP4 MoE is opt-in (0 does nothing), 0.15.x's
  FlashInfer CUTLASS MoE does not admit 12.x, and 0.24.0 has no such variable.
- ``vllm-moe-marlin-gb10`` (--moe-backend marlin): a crash too; from 0.17.0, the first with the flag.
- ``vllm-memory-gb10``: 0.80, under the 0.82-0.83 that GB10s pass.
- ``sglang-deepgemm-off``: its caveat (sglang#29738), said where doctor and verify say the setting."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from patchkit.cc import CC
from patchkit.commands.settings import SettingsVerified
from patchkit.fixes.settings import read_settings
from patchkit.gpus.smi import given
from patchkit.judge.settings import Need, missing, settings_here
from patchkit.render.settings import lines, setting_json, to_text
from support.mirror import default_cache, fetch_sdist, fetch_wheel, wheel_zip

pytestmark = pytest.mark.network  # a cold cache fetches the archives and wheels

ORACLE = "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py"
CUTLASS_MOE = ("vllm/model_executor/layers/fused_moe/flashinfer_cutlass_moe.py",  # to 0.21.x
               "vllm/model_executor/layers/fused_moe/experts/flashinfer_cutlass_moe.py")  # from 0.22.0
VLLM_READ = ("vllm/envs.py", "vllm/engine/arg_utils.py", "vllm/config/kernel.py", ORACLE, *CUTLASS_MOE)
WHEELS = {"0.15.0": "manylinux_2_31_x86_64", "0.34.0": "manylinux_2_28_x86_64"}  # no source archive cached
VLLM = ("vllm-fp4-moe-gb10", "vllm-moe-marlin-gb10", "vllm-memory-gb10")
SAFE = "which MoE backend is safe depends on the release and the model: "


def vllm_files(version: str) -> dict[str, bytes]:
    """VLLM_READ's files of vLLM ``version`` that it has, from its source archive (or its wheel)."""
    if version in WHEELS:
        whl = wheel_zip(version, "vllm", WHEELS[version])
        names = set(whl.namelist())
        return {rel: whl.read(rel) for rel in VLLM_READ if rel in names}
    found = {}
    with tarfile.open(fetch_sdist("vllm", version, default_cache())) as tar:
        for member in tar:
            rel = member.name.partition("/")[2]
            if rel in VLLM_READ and member.isfile():
                found[rel] = tar.extractfile(member).read()
    return found


def site_with(tmp_path: Path, project: str, version: str, files: dict[str, bytes]) -> Path:
    """site-packages holding ``files`` and ``project``'s dist-info of ``version``."""
    site = tmp_path / "site"
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    info = site / f"{project}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
    return site


def judged(site: Path, env: dict, names=VLLM) -> dict:
    return {h.setting.name: h for h in settings_here([site], env, given(CC(12, 1))) if h.setting.name in names}


def holds(files: dict[str, bytes], rel: str, text: str) -> bool:
    return rel in files and text.encode() in files[rel]


# Per release: what the files hold that the verdict rests on, and the verdicts on a GB10 (None: not said).
IS_SET = 'if envs.is_set("VLLM_USE_FLASHINFER_MOE_FP4"):'
RELEASES = [
    # 0.14.1: the variable exists, default "0", and FlashInfer is taken only when it is 1 (opt-in)
    ("0.14.1", [("vllm/envs.py", '"VLLM_USE_FLASHINFER_MOE_FP4"', True), (ORACLE, IS_SET, False),
                (ORACLE, "if allow_flashinfer and envs.VLLM_USE_FLASHINFER_MOE_FP4:", True)], None, None),
    # 0.15.0: 0 would drop FlashInfer, but its CUTLASS MoE admits 9.0 and 10.x only: nothing to keep 12.1 off
    ("0.15.0", [(ORACLE, IS_SET, True), (CUTLASS_MOE[0], "is_device_capability_family(100)", True),
                (CUTLASS_MOE[0], "is_device_capability_family(120)", False),
                ("vllm/engine/arg_utils.py", '"--moe-backend"', False)], None, None),
    # 0.16.0: FlashInfer's CUTLASS MoE admits 12.x and is tried first; no --moe-backend yet
    ("0.16.0", [(ORACLE, IS_SET, True), (CUTLASS_MOE[0], "is_device_capability_family(120)", True),
                ("vllm/engine/arg_utils.py", '"--moe-backend"', False)], Need.NEEDED, None),
    ("0.17.0", [(ORACLE, IS_SET, True), ("vllm/engine/arg_utils.py", '"--moe-backend"', True),
                ("vllm/config/kernel.py", '"marlin"', True), (ORACLE, "runner_backend = config.moe_backend", True)],
     Need.NEEDED, Need.NEEDED),
    # 0.23.0: deprecated for --moe-backend, still read; the CUTLASS MoE moved to experts/
    ("0.23.0", [("vllm/envs.py", 'deprecated_env(\n        "VLLM_USE_FLASHINFER_MOE_FP4",\n        "v0.23"', True),
                (ORACLE, IS_SET, True), (CUTLASS_MOE[1], "is_device_capability_family(120)", True)],
     Need.NEEDED, Need.NEEDED),
    ("0.24.0", [("vllm/envs.py", "VLLM_USE_FLASHINFER_MOE_FP4", False), (ORACLE, "VLLM_USE_FLASHINFER_MOE_FP4", False),
                ("vllm/engine/arg_utils.py", '"--moe-backend"', True)], None, Need.NEEDED),
    ("0.34.0", [("vllm/envs.py", "VLLM_USE_FLASHINFER_MOE_FP4", False), ("vllm/engine/arg_utils.py", '"--moe-backend"', True),
                ("vllm/engine/arg_utils.py", '"--gpu-memory-utilization"', True)], None, Need.NEEDED),
]


@pytest.mark.parametrize(("version", "facts", "fp4", "marlin"), RELEASES, ids=[r[0] for r in RELEASES])
def test_each_vllm_release_is_judged_as_its_files_read(tmp_path: Path, version: str, facts, fp4, marlin) -> None:
    files = vllm_files(version)
    assert [(rel, text, holds(files, rel, text)) for rel, text, _ in facts] == facts
    found = judged(site_with(tmp_path, "vllm", version, files), {})
    assert {name: h.need for name, h in found.items()} == {
        name: need for name, need in zip(VLLM, (fp4, marlin, Need.NEEDED), strict=True) if need is not None}
    memory = found["vllm-memory-gb10"]
    assert (memory.spelling.name, memory.value, memory.setting.rank) == ("--gpu-memory-utilization", "0.80", 2)


def test_doctor_and_verify_say_the_fp4_moe_settings_as_a_crash_with_their_caveat(tmp_path: Path) -> None:
    """vLLM 0.23.0: no "wrong output" any more; each MoE setting's line is followed by its caveat, in
    doctor and in verify, needed or set."""
    site = site_with(tmp_path, "vllm", "0.23.0", vllm_files("0.23.0"))
    [fp4, marlin, memory] = [read_settings_by_name()[n] for n in VLLM]
    said = lines(list(judged(site, {}).values()))
    assert not any("wrong output" in line for line in said)
    assert said[1:4] == [f"  vllm-fp4-moe-gb10: needed for 12.1 (vllm 0.23.0 has VLLM_USE_FLASHINFER_MOE_FP4): {fp4.does}",
                         "    export VLLM_USE_FLASHINFER_MOE_FP4=0", f"    caveat: {fp4.caveat}"]
    assert said[4:7] == [f"  vllm-moe-marlin-gb10: needed for 12.1 (vllm 0.23.0 has --moe-backend): {marlin.does}",
                         "    --moe-backend marlin", f"    caveat: {marlin.caveat}"]
    assert said[7:] == [f"  vllm-memory-gb10: needed for 12.1 (vllm 0.23.0 has --gpu-memory-utilization): {memory.does}",
                        "    --gpu-memory-utilization 0.80"]
    # verify: the variable missing, with its caveat; set, the caveat still said and no problem.
    found = list(judged(site, {}).values())
    text = to_text(SettingsVerified("/v/bin/python", (CC(12, 1),), tuple(found), tuple(missing(found))), False)
    assert text[1:] == ["setting vllm-fp4-moe-gb10: missing for 12.1 (vllm 0.23.0 has VLLM_USE_FLASHINFER_MOE_FP4); set it: "
                        f"export VLLM_USE_FLASHINFER_MOE_FP4=0; caveat: {fp4.caveat}", "verify: 1 setting missing"]
    found = list(judged(site, {"VLLM_USE_FLASHINFER_MOE_FP4": "0"}).values())
    assert lines(found)[1:3] == ["  vllm-fp4-moe-gb10: set for 12.1 (VLLM_USE_FLASHINFER_MOE_FP4=0)", f"    caveat: {fp4.caveat}"]
    text = to_text(SettingsVerified("/v/bin/python", (CC(12, 1),), tuple(found), tuple(missing(found))), False)
    assert text[1:] == [f"setting vllm-fp4-moe-gb10: set for 12.1 (VLLM_USE_FLASHINFER_MOE_FP4=0); caveat: {fp4.caveat}",
                        "verify: ok (1 setting judged, none missing)"]
    assert setting_json(found[0])["caveat"] == fp4.caveat and memory.caveat is None


def read_settings_by_name() -> dict:
    return {s.name: s for s in read_settings()}


def test_the_words_say_what_is_proven() -> None:
    s = read_settings_by_name()
    fp4, marlin, memory = s["vllm-fp4-moe-gb10"], s["vllm-moe-marlin-gb10"], s["vllm-memory-gb10"]
    assert [x.rank for x in s.values() if x.rank == 1] == [] and (fp4.rank, marlin.rank) == (2, 2)
    for x in (fp4, marlin):
        assert "wrong output" not in x.does and x.caveat.startswith(SAFE)
        assert all(t in x.caveat for t in ("vllm#37030", "recipes PR#632", "flashinfer-python 0.6.8 adds Relu2"))
        assert '"Invalid activation type." for Relu2 MoE' in x.does and "flashinfer-python 0.6.7 and earlier" in x.does
        assert "no report shows FlashInfer's CUTLASS FP4 MoE giving wrong output on 12.1 with an unmodified release" in x.does_not
    assert [(sp.since, sp.before) for sp in fp4.spellings] == [("0.16.0", "0.24.0")]
    assert [(sp.since, sp.before) for sp in marlin.spellings] == [("0.17.0", None)]
    assert "0.10.2 - 0.15.1 do not need it on 12.1 and 0.24.0 on have no such variable" in fp4.does_not
    assert memory.spellings[0].value == "0.80" and "a fifth" in memory.does
    assert all(t in memory.does_not for t in ("cudaMemGetInfo", "page cache is held after a load",
                                              "vllm#48140: dropping the caches did", "NV_ERR_NO_MEMORY",
                                              "vllm#56824 fails at 0.70"))


@pytest.mark.parametrize(("version", "relu2"), [("0.6.5", False), ("0.6.7.post3", False), ("0.6.8", True)])
def test_flashinfer_gains_relu2_in_its_cutlass_moe_dispatch_in_0_6_8(version: str, relu2: bool) -> None:
    """The crash the MoE settings keep a GB10 from: the dispatch's default throws "Invalid activation type."."""
    rel = "flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_template_dispatch.h"
    text = wheel_zip(version, "flashinfer-python").read(rel).decode()
    assert 'TLLM_THROW("Invalid activation type.");' in text and ("case ActivationType::Relu2:" in text) is relu2


def sglang_file(version: str, rel: str) -> str:
    return wheel_zip(version).read(rel).decode()


ENTRYPOINT = "sglang/srt/layers/deep_gemm_wrapper/entrypoint.py"


@pytest.mark.parametrize(("version", "mhc", "gate"), [
    ("0.5.13", "sglang/srt/layers/mhc.py", "    if envs.SGLANG_OPT_DEEPGEMM_HC_PRENORM.get():\n        n_splits"),
    ("0.5.20", "sglang/kernels/ops/layernorm/mhc.py", "    if envs.SGLANG_OPT_DEEPGEMM_HC_PRENORM.get():\n        n_splits"),
    ("0.5.21", "sglang/kernels/ops/layernorm/mhc.py", "    if _use_deep_gemm_hc_prenorm():\n        n_splits"),
])
def test_the_sglang_caveat_holds_in_the_wheels(version: str, mhc: str, gate: str) -> None:
    """deep_gemm is imported only with JIT DeepGEMM on, and tf32_hc_prenorm_gemm uses it: mhc_pre reaches
    it by default until 0.5.21, which asks ENABLE_JIT_DEEPGEMM; 0.5.21's _flashinfer_hc_pre calls it always."""
    entry = sglang_file(version, ENTRYPOINT)
    assert "\nif ENABLE_JIT_DEEPGEMM:\n    import deep_gemm\n" in entry
    assert "def tf32_hc_prenorm_gemm(" in entry and "deep_gemm.tf32_hc_prenorm_gemm(x, fn, out, sqrsum, num_splits=num_splits)" in entry
    text = sglang_file(version, mhc)
    pre = text[text.index("\ndef mhc_pre("):]
    pre = pre[:pre.index("\ndef ", 1)]
    assert gate in pre and "tf32_hc_prenorm_gemm(" in pre
    assert "SGLANG_OPT_DEEPGEMM_HC_PRENORM = EnvBool(True)" in sglang_file(version, "sglang/srt/environ.py")
    if version == "0.5.21":
        assert ("def _use_deep_gemm_hc_prenorm() -> bool:\n    if is_hip() or not envs.SGLANG_OPT_DEEPGEMM_HC_PRENORM.get():\n"
                "        return False\n\n    from sglang.srt.layers.deep_gemm_wrapper.configurer import ENABLE_JIT_DEEPGEMM\n\n"
                "    return ENABLE_JIT_DEEPGEMM\n") in text
        model = sglang_file(version, "sglang/srt/models/deepseek_v4.py")
        flashinfer = model[model.index("\ndef _flashinfer_hc_pre("):]
        flashinfer = flashinfer[:flashinfer.index("\ndef ", 1)]
        assert "    tf32_hc_prenorm_gemm(\n" in flashinfer and "ENABLE_JIT_DEEPGEMM" not in flashinfer
        assert "        if envs.SGLANG_OPT_USE_FLASHINFER_MHC.get():\n            y, post, comb = _flashinfer_hc_pre(" in model


def sglang_site(tmp_path: Path) -> Path:
    """SGLang 0.5.21's dist-info beside sgl-deep-gemm 0.1.4.post1's deep_gemm: its __init__.py (the three
    APIs SGLang's probe asks) and the names of its kernel templates (none sm120_*)."""
    with zipfile.ZipFile(fetch_wheel("0.1.4.post1", default_cache(), "sgl-deep-gemm", platform="manylinux2014_x86_64")) as whl:
        files = {"deep_gemm/__init__.py": whl.read("deep_gemm/__init__.py")}
        files |= {n: b"" for n in whl.namelist() if n.startswith("deep_gemm/include/deep_gemm/impls/") and n.endswith(".cuh")}
    assert not any("/sm120_" in n for n in files) and any("/sm100_" in n for n in files)
    return site_with(tmp_path, "sglang", "0.5.21", files)


def test_doctor_and_verify_say_the_sglang_caveat(tmp_path: Path) -> None:
    site = sglang_site(tmp_path)
    [s] = [x for x in read_settings() if x.name == "sglang-deepgemm-off"]
    assert s.caveat.startswith("with DeepGEMM off, DeepSeek-V4 and GLM-5.3 can die with NameError: name 'deep_gemm' is not "
                               "defined in tf32_hc_prenorm_gemm (sglang#29738, open): on SGLang 0.5.13 - 0.5.20 mhc_pre")
    assert "from 0.5.21 mhc_pre asks _use_deep_gemm_hc_prenorm()" in s.caveat
    assert s.caveat.endswith("only DeepSeek-V4 with SGLANG_OPT_USE_FLASHINFER_MHC=1 (off by default), or with "
                             "SGLANG_OPT_USE_TILELANG_MHC_PRE=0 and 1024 tokens or more, still reaches it")
    [h] = judged(site, {}, ("sglang-deepgemm-off",)).values()
    said = lines([h])
    assert h.need == Need.NEEDED and said[2:] == ["    export SGLANG_ENABLE_JIT_DEEPGEMM=0", f"    caveat: {s.caveat}"]
    text = to_text(SettingsVerified("/v/bin/python", (CC(12, 1),), (h,), (h,)), False)
    assert text[1].startswith("setting sglang-deepgemm-off: missing for 12.1 (the DeepGEMM it loads (")
    assert text[1].endswith(f"); set it: export SGLANG_ENABLE_JIT_DEEPGEMM=0; caveat: {s.caveat}")
    [h] = judged(site, {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}, ("sglang-deepgemm-off",)).values()
    assert h.need == Need.SET and lines([h])[1:] == ["  sglang-deepgemm-off: set for 12.1 (SGLANG_ENABLE_JIT_DEEPGEMM=0)",
                                                     f"    caveat: {s.caveat}"]
    text = to_text(SettingsVerified("/v/bin/python", (CC(12, 1),), (h,), ()), False)
    assert text[1:] == [f"setting sglang-deepgemm-off: set for 12.1 (SGLANG_ENABLE_JIT_DEEPGEMM=0); caveat: {s.caveat}",
                        "verify: ok (1 setting judged, none missing)"]
