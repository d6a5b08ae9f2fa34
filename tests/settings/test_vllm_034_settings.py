"""vLLM's settings judged on vllm 0.34.0's own files: ``vllm/platforms/cuda.py`` and
``vllm/v1/attention/backends/registry.py`` of its wheel (tests/kernels/data/wheels/vllm-0.34.0/) and
the names of its bundled DeepGEMM's kernel templates (tests/kernels/data/jit/, ``unzip -l`` of the
wheel: 11 ``sm120_*.cuh``).  doctor once said ``vllm-deepgemm-off``: "not needed for 12.1 (the
DeepGEMM it loads (...) has no include/deep_gemm/impls/sm120_*.cuh)": the verdict right, its reason
backwards."""

from __future__ import annotations

from pathlib import Path

from patchkit.cc import CC
from patchkit.gpus.smi import given
from patchkit.judge.settings import Need, settings_here
from patchkit.render.settings import lines

DATA = Path(__file__).resolve().parents[1] / "kernels" / "data"


def vllm_site(tmp_path: Path, impls: str | None, *files: str) -> Path:
    """site-packages with vllm 0.34.0's dist-info, ``files`` of its wheel, and its bundled DeepGEMM's
    template names (``impls``: the vLLM release whose list to take)."""
    site = tmp_path / "site"
    for rel in files:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes((DATA / "wheels" / "vllm-0.34.0" / rel).read_bytes())
    if impls:
        folder = site / "vllm" / "third_party" / "deep_gemm" / "include" / "deep_gemm" / "impls"
        folder.mkdir(parents=True)
        for name in (DATA / "jit" / f"vllm-{impls}-deep_gemm-impls.txt").read_text().split():
            (folder / name).touch()
    (site / "vllm-0.34.0.dist-info").mkdir(parents=True)
    (site / "vllm-0.34.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n")
    return site


def deepgemm_line(site: Path, cc: CC) -> str:
    found = [h for h in settings_here([site], {}, given(cc)) if h.setting.name == "vllm-deepgemm-off"]
    return [line for line in lines(found) if "vllm-deepgemm-off" in line][0]


def test_the_reason_says_what_the_bundled_deepgemm_has(tmp_path: Path) -> None:
    site = vllm_site(tmp_path, "0.34.0", "vllm/platforms/cuda.py")
    (h,) = [h for h in settings_here([site], {}, given(CC(12, 1))) if h.setting.name == "vllm-deepgemm-off"]
    assert (h.need, len(h.impls)) == (Need.NOT_NEEDED, 11)
    deep_gemm = site / "vllm" / "third_party" / "deep_gemm"
    assert deepgemm_line(site, CC(12, 1)) == (f"  vllm-deepgemm-off: not needed for 12.1 (the DeepGEMM it loads ({deep_gemm}) has "
                                            "include/deep_gemm/impls/sm120_*.cuh (11))")


def test_without_sm120_templates_it_is_needed_and_says_so(tmp_path: Path) -> None:
    """The same cuda.py (it admits the 12.x family) with 0.27.1's bundled DeepGEMM (sm90 and sm100 only)."""
    site = vllm_site(tmp_path, "0.27.1", "vllm/platforms/cuda.py")
    deep_gemm = site / "vllm" / "third_party" / "deep_gemm"
    assert deepgemm_line(site, CC(12, 0)) == (
        f"  vllm-deepgemm-off: needed for 12.0 (the DeepGEMM it loads ({deep_gemm}) has no include/deep_gemm/impls/sm120_*.cuh): "
        "turns vLLM's DeepGEMM off (is_deep_gemm_supported() is false), where the DeepGEMM it would load has no SM12x kernels")


def test_a_release_whose_support_deep_gemm_leaves_12_out_says_that(tmp_path: Path) -> None:
    """A cuda.py without is_device_capability_family(120) (here: none at all) is the reason, not the templates."""
    site = vllm_site(tmp_path, "0.27.1")
    assert deepgemm_line(site, CC(12, 1)) == ("  vllm-deepgemm-off: not needed for 12.1 (vllm 0.34.0's support_deep_gemm "
                                            "(vllm/platforms/cuda.py) does not admit 12.1)")


def test_the_gb10_attention_advice_names_the_backend_0340_tries_first(tmp_path: Path) -> None:
    """vLLM 0.34.0's _get_backend_priorities (vllm/platforms/cuda.py) for major 12 without MLA: FLASH_ATTN,
    FLASHINFER, TRITON_ATTN.  The advice once said TRITON_ATTN ran "instead of FlashInfer's"."""
    cuda = (DATA / "wheels" / "vllm-0.34.0" / "vllm" / "platforms" / "cuda.py").read_text()
    body = cuda[cuda.index("def _get_backend_priorities("):cuda.index("def _backend_cls_path(")]
    rest = body[body.rindex("        else:\n            return ["):]
    assert [line.strip() for line in rest.splitlines() if line.strip().startswith("AttentionBackendEnum.")][:3] == [
        "AttentionBackendEnum.FLASH_ATTN,", "AttentionBackendEnum.FLASHINFER,", "AttentionBackendEnum.TRITON_ATTN,"]
    site = vllm_site(tmp_path, None, "vllm/engine/arg_utils.py", "vllm/v1/attention/backends/registry.py")
    found = [h for h in settings_here([site], {}, given(CC(12, 1))) if h.setting.name == "vllm-attention-gb10"]
    assert lines(found)[1:] == [
        "  vllm-attention-gb10: needed for 12.1 (vllm 0.34.0 has --attention-backend): runs vLLM's attention with its Triton "
        "backend (TRITON_ATTN) on a GB10, in place of the one vLLM tries first for 12.x without MLA: FlashAttention "
        "(FLASH_ATTN) in every release read (0.19.0, 0.20.2, 0.33.0, 0.34.0), then FlashInfer",
        "    --attention-backend TRITON_ATTN",
    ]
