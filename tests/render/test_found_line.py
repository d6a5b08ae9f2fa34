"""apply's line for what a rule found says each kind in its own words: a comparison rule's test as it
reads now, not a dict key's "key 121 = key 120"."""

from __future__ import annotations

from patchkit.fixes.kinds import RuleKind
from patchkit.render.apply import found_line
from patchkit.rewrite.found import Found
from patchkit.types import ALREADY_UPSTREAM, PATCHED


def test_a_comparison_rule_says_the_test_it_widened() -> None:
    # deepgemm-sm12x's comparison rule on SGLang 0.5.21's gate (sm_version == 120 -> in (120, 121))
    found = Found("deepgemm-sm12x", RuleKind.COMPARISON, "sm_version == 120", "def _compute_enable_deep_gemm", PATCHED, 121,
                  120, "sm_version in (120, 121)")
    assert found_line(found) == ("sm_version == 120 (def _compute_enable_deep_gemm): now sm_version in (120, 121)"
                                 " (121 admitted as 120 is)")
    assert found_line(found._replace(status=ALREADY_UPSTREAM, value="sm_version in (120, 121)")) == (
        "sm_version == 120 (def _compute_enable_deep_gemm): already admits 121, left alone")
