"""Every kind of rule renders its own line (``render.found.WORDS``): a kind without words fails
here, and each kind is rendered from what its real rules found — the shipped manifests under
patches/ (made by the rules of patchkit/fixes/*.toml) and, for list-member, which no fix uses
yet, a rewrite of FlashInfer's comm.py shape."""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.fixes.kinds import ListMemberRule, RuleKind
from patchkit.fixes.load import read_fixes
from patchkit.render.apply import found_line
from patchkit.render.found import WORDS
from patchkit.rewrite.found import Found
from patchkit.rewrite.rules import rewrite_file
from patchkit.types import ALREADY_UPSTREAM, PATCHED

PATCHES = Path(__file__).resolve().parents[2] / "patches"


def _shipped() -> dict[tuple[RuleKind | None, str], Found]:
    """The first thing of each kind and status the shipped manifests record, in path order."""
    seen: dict[tuple[RuleKind | None, str], Found] = {}

    def walk(doc) -> None:
        if isinstance(doc, dict):
            if "scope" in doc and "added_key" in doc:
                found = Found.from_json(doc)
                seen.setdefault((found.kind, found.status), found)
            for value in doc.values():
                walk(value)
        elif isinstance(doc, list):
            for value in doc:
                walk(value)

    for path in sorted(PATCHES.rglob("manifest.json")):
        walk(json.loads(path.read_bytes()))
    return seen


def test_every_kind_has_its_words() -> None:
    assert set(WORDS) == set(RuleKind)
    assert {rule.kind for fix in read_fixes().values() for rule in fix.rules} <= set(WORDS)


def test_each_kind_a_fix_uses_renders_what_it_found_in_a_shipped_manifest() -> None:
    shipped = _shipped()
    used = {rule.kind for fix in read_fixes().values() for rule in fix.rules}
    assert used == {RuleKind.DICT_KEY, RuleKind.PREDICATE, RuleKind.COMPARISON, RuleKind.BACKPORT}
    assert {kind for kind, status in shipped if status == PATCHED} == used
    lines = {kind: found_line(found) for (kind, status), found in shipped.items() if status == PATCHED}
    assert lines == {
        RuleKind.DICT_KEY: "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): key 12 = key 10",
        RuleKind.PREDICATE: "_is_sm100_supported in apply_flashinfer_allreduce_fusion(): _is_sm120_supported added",
        RuleKind.COMPARISON: "sm_version == 120 (def _compute_enable_deep_gemm): now sm_version in (120, 121) (121 admitted as 120 is)",
        RuleKind.BACKPORT: "SGLang 0.5.13's change: 1 hunk applied exactly",
    }
    upstream = shipped[RuleKind.BACKPORT, ALREADY_UPSTREAM]
    assert found_line(upstream) == (
        "SGLang 0.5.13's change in python/sglang/srt/layers/deep_gemm_wrapper/configurer.py: already there, left alone")
    # the same findings, had the releases had them already: each kind says so in its words
    left = {kind: found_line(found._replace(status=ALREADY_UPSTREAM)) for (kind, status), found in shipped.items()
            if status == PATCHED}
    assert left == {
        RuleKind.DICT_KEY: "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): already has key 12, left alone",
        RuleKind.PREDICATE: "_is_sm100_supported in apply_flashinfer_allreduce_fusion(): already has _is_sm120_supported, left alone",
        RuleKind.COMPARISON: "sm_version == 120 (def _compute_enable_deep_gemm): already admits 121, left alone",
        RuleKind.BACKPORT: "SGLang 0.5.13's change: already there, left alone",
    }


JIT = b'''from .core import gen_jit_spec, get_nvcc_flags_list


def gen_comm_module():
    nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 10])
    return gen_jit_spec("comm", ["comm.cu"], extra_cuda_cflags=nvcc_flags)
'''


def test_a_list_member_rule_says_the_member_it_added() -> None:
    rule = ListMemberRule("fusion", "flashinfer", ("flashinfer/jit/comm.py",), 10, 12, "upstream", "",
                          call="get_nvcc_flags_list", keyword="supported_major_versions", functions=("gen_comm_module",))
    first = rewrite_file(JIT, "flashinfer/jit/comm.py", [rule])
    assert [found_line(f) for f in first.found] == [
        "get_nvcc_flags_list(supported_major_versions=...) (def gen_comm_module): member 12 after 10"]
    again = rewrite_file(first.source, "flashinfer/jit/comm.py", [rule])
    assert [found_line(f) for f in again.found] == [
        "get_nvcc_flags_list(supported_major_versions=...) (def gen_comm_module): already has 12, left alone"]
