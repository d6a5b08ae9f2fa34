"""The DeepGEMM fix on the real release files: after the default rules, SGLang's
``_compute_enable_deep_gemm()`` refuses SM120 and SM121 with a DeepGEMM lacking the SM12x APIs
and still enables SM90 and SM100; 0.5.21 and later are unchanged.  The function is taken out
of the patched configurer.py with ``ast`` and run with stubs: SGLang is never imported."""

from __future__ import annotations

import ast
import sys
import types

import pytest

from patchkit.fixes.load import read_fixes
from patchkit.rewrite.backported import Carried, HowCarried
from patchkit.rewrite.found import phrased
from patchkit.rewrite.rules import rewrite_file
from patchkit.types import ALREADY_UPSTREAM
from support.mirror import wheel_zip

PATH = "python/sglang/srt/layers/deep_gemm_wrapper/configurer.py"
APIS = ("fp8_einsum", "m_grouped_fp8_fp4_gemm_nt_contiguous", "transform_sf_into_required_layout")


def _configurer(version: str) -> bytes:
    return wheel_zip(version).read(PATH.removeprefix("python/"))


def _patched(version: str) -> tuple[bytes, tuple]:
    rules = read_fixes()["deepgemm-sm12x"].rules
    result = rewrite_file(_configurer(version), PATH, rules, base=lambda rule, path: _configurer(rule.made_on),
                          version=version)
    return result.source, result.found


def _enabled(source: bytes, sm: int, apis: tuple[str, ...], monkeypatch) -> bool:
    """``_compute_enable_deep_gemm()`` of ``source`` on a GPU of ``sm`` with a deep_gemm holding ``apis``."""
    tree = ast.parse(source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("_compute_enable_deep_gemm", "_sm120_deep_gemm_apis_available")]
    deep_gemm = types.ModuleType("deep_gemm")
    for name in apis:
        setattr(deep_gemm, name, lambda *a: None)
    monkeypatch.setitem(sys.modules, "deep_gemm", deep_gemm)
    env = types.SimpleNamespace(SGLANG_ENABLE_JIT_DEEPGEMM=types.SimpleNamespace(get=lambda: True))
    scope = {"get_device_sm": lambda: sm, "envs": env, "_is_cuda": True, "_is_musa": False}
    exec(compile(ast.Module(defs, []), "configurer.py", "exec"), scope)
    return scope["_compute_enable_deep_gemm"]()


@pytest.mark.parametrize("version", ["0.5.4", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.13", "0.5.19",
                                     "0.5.20"])
def test_refuses_sm12x_without_the_apis_and_keeps_sm90_sm100(version: str, monkeypatch) -> None:
    before = _configurer(version)
    source, _ = _patched(version)
    assert source != before
    # Without the fix, GB10 (121) gets DeepGEMM in every one of these releases.
    assert _enabled(before, 121, (), monkeypatch) is True
    for sm in (120, 121):
        assert _enabled(source, sm, (), monkeypatch) is False, sm
    for sm in (90, 100):
        assert _enabled(source, sm, (), monkeypatch) is True, sm
    assert _enabled(source, 89, APIS, monkeypatch) is False


def test_0_5_20_admits_a_deepgemm_with_the_sm12x_apis_as_0_5_21_does(monkeypatch) -> None:
    source, found = _patched("0.5.20")
    assert [(f.value, phrased(f).value) for f in found if f.name == "SGLang PR 39482"] == [(Carried(HowCarried.EXACTLY), "exactly")]
    assert _enabled(source, 121, APIS, monkeypatch) is True
    assert _enabled(source, 121, APIS[:1], monkeypatch) is False
    assert b"get_platform().is_sm100 or get_device_sm() in (120, 121)" in source
    # The backport gives 0.5.20 0.5.21's gate, byte for byte.
    assert _function(source) == _function(_configurer("0.5.21"))


@pytest.mark.parametrize("version", ["0.5.4", "0.5.10.post1", "0.5.11", "0.5.12.post1"])
def test_before_0_5_13_the_refusal_is_carried_in_the_form_the_release_has(version: str) -> None:
    """0.5.13's three lines, refreshed per form of the function, apply exactly; the comparison rule
    then widens ``== 120`` to 121, as in 0.5.13 - 0.5.19."""
    before = _configurer(version)
    source, found = _patched(version)
    assert [(f.name, f.value, phrased(f).value) for f in found if f.name == "SGLang 0.5.13's change"] == [
        ("SGLang 0.5.13's change", Carried(HowCarried.EXACTLY), "exactly")]
    added = [line for line in source.splitlines() if line not in before.splitlines()]
    assert added == [b"    # DeepGEMM requires TMEM/tcgen05 (SM100+datacenter), not available on SM120",
                     b"    if sm_version in (120, 121):"]
    # Nothing else of the file moved: the old text is the new one without the three lines.
    lines = source.splitlines(keepends=True)
    at = lines.index(b"    if sm_version in (120, 121):\n")
    assert b"".join(lines[:at - 1] + lines[at + 2:]) == before


def test_0_5_13_to_0_5_19_take_the_comparison_rule() -> None:
    source, found = _patched("0.5.19")
    assert [(f.name, f.scope, f.value) for f in found if f.patched] == [
        ("sm_version == 120", "def _compute_enable_deep_gemm", "sm_version in (120, 121)")]
    assert source.splitlines()[21] == b"    if sm_version in (120, 121):"


@pytest.mark.parametrize("version", ["0.5.21", "0.5.23"])
def test_upstream_from_0_5_21_is_unchanged(version: str) -> None:
    source, found = _patched(version)
    assert source == _configurer(version)
    assert {f.name: f.status for f in found} == {"SGLang 0.5.13's change": ALREADY_UPSTREAM,
                                                 "SGLang PR 39482": ALREADY_UPSTREAM}


def _function(source: bytes) -> str:
    tree = ast.parse(source)
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, ast.FunctionDef)
                     and n.name in ("_compute_enable_deep_gemm", "_sm120_deep_gemm_apis_available"))


def test_a_backport_whose_files_are_all_absent_has_nothing_to_carry_and_one_half_there_is_refused() -> None:
    """A release (or a tree) without configurer.py has no DeepGEMM gate: nothing of the change to
    carry.  A backport of two files with one of them there would carry half the upstream change."""
    rule = next(r for r in read_fixes()["deepgemm-sm12x"].rules if r.made_on == "0.5.10.post1")
    assert rule.missing_from({}) == ()
    assert rule.missing_from({PATH: b""}) == ()
    two = rule._replace(files=(PATH, "python/sglang/srt/utils/common.py"))
    assert two.missing_from({PATH: b""}) == ("python/sglang/srt/utils/common.py",)
    assert two.missing_from({}) == ()
