"""rewrite/backport.py: an upstream diff carried to a file, exactly, at an offset, by a three-way
merge, or refused naming the hunk; the shipped PR 3903 diff on real FlashInfer files."""

from __future__ import annotations

import pytest

from patchkit.errors import RewriteError
from patchkit.fixes.kinds import BackportRule, Origin
from patchkit.fixes.registry import FIXES
from patchkit.rewrite import backport
from patchkit.rewrite.backported import Carried, HowCarried, Upstream
from patchkit.rewrite.found import phrased
from patchkit.rewrite.rules import rewrite_file
from patchkit.types import ALREADY_UPSTREAM, PATCHED

BASE = b"".join(b"line %d\n" % i for i in range(1, 21))
DIFF = b"""diff --git a/f.txt b/f.txt
index 1111111..2222222 100644
--- a/f.txt
+++ b/f.txt
@@ -4,3 +4,4 @@ x
 line 4
 line 5
+added after 5
 line 6
@@ -14,3 +15,3 @@ y
 line 14
-line 15
+line fifteen
 line 16
"""
AFTER = BASE.replace(b"line 5\n", b"line 5\nadded after 5\n").replace(b"line 15\n", b"line fifteen\n")
HUNKS = backport.parse(DIFF, "t.diff")["f.txt"]
# DIFF as a fix's rule, made on 0.9, landed in 1.0: what it found, as values and in its phrases.
RULE_OF_DIFF = BackportRule(fix="f", project="p", files=("f.txt",), from_cc=10, to_cc=12, evidence="", needs="", diff=DIFF,
                            origin=Origin("P", 1, "0123456789abcdef", "t", "1.0"), made_on="0.9")


def test_parse_reads_files_and_hunks() -> None:
    assert [h.name() for h in HUNKS] == ["hunk 1 (@@ -4,3 +4,4 @@)", "hunk 2 (@@ -14,3 +15,3 @@)"]
    assert HUNKS[0].old == (b"line 4\n", b"line 5\n", b"line 6\n")
    assert HUNKS[0].new == (b"line 4\n", b"line 5\n", b"added after 5\n", b"line 6\n")


@pytest.mark.parametrize(
    "before, after, how, offsets, said",
    [
        (BASE, AFTER, HowCarried.EXACTLY, (), "exactly"),
        (b"new top\n" + BASE, b"new top\n" + AFTER, HowCarried.OFFSET, (1,), "at an offset of +1 lines"),
        (BASE[len(b"line 1\nline 2\n"):], AFTER[len(b"line 1\nline 2\n"):], HowCarried.OFFSET, (-2,), "at an offset of -2 lines"),
    ],
)
def test_applied_exactly_or_at_an_offset(before: bytes, after: bytes, how: HowCarried, offsets: tuple[int, ...], said: str) -> None:
    result = backport.rewrite(before, "f.txt", HUNKS)
    assert (result.source, result.status, result.how, result.offsets, result.hunks) == (after, PATCHED, how, offsets, 2)
    (found,) = rewrite_file(before, "f.txt", (RULE_OF_DIFF,)).found
    assert (found.added_key, found.copied_from, found.value) == (2, Upstream("0123456789abcdef", "1.0"), Carried(how, offsets))
    assert (phrased(found).added_key, phrased(found).copied_from, phrased(found).value) == ("2 hunks", "0123456789ab", said)


def test_a_file_that_holds_the_change_is_left_alone() -> None:
    result = backport.rewrite(AFTER, "f.txt", HUNKS)
    assert (result.source, result.status, result.how) == (AFTER, ALREADY_UPSTREAM, HowCarried.THERE)
    (found,) = rewrite_file(AFTER, "f.txt", (RULE_OF_DIFF,)).found
    assert (found.value, phrased(found).value) == (Carried(HowCarried.THERE), "already there")


def test_three_way_merge_where_ours_changed_the_context() -> None:
    """Ours changed line 4 and line 14 (context of the hunks, not their changes): the hunks do
    not apply as text, but against the base they merge."""
    ours = BASE.replace(b"line 4\n", b"line four\n").replace(b"line 14\n", b"line fourteen\n")
    with pytest.raises(RewriteError, match=r"^f.txt: hunk 1 \(@@ -4,3 \+4,4 @@\) does not apply as text$"):
        backport.rewrite(ours, "f.txt", HUNKS)
    result = backport.rewrite(ours, "f.txt", HUNKS, base=BASE, base_name="0.9")
    assert result.how == HowCarried.MERGED
    (found,) = rewrite_file(ours, "f.txt", (RULE_OF_DIFF,), base=lambda rule, path: BASE).found
    assert (found.value, phrased(found).value) == (Carried(HowCarried.MERGED), "by a three-way merge")
    assert result.source == AFTER.replace(b"line 4\n", b"line four\n").replace(b"line 14\n", b"line fourteen\n")


def test_a_conflict_names_the_hunk() -> None:
    ours = BASE.replace(b"line 15\n", b"line 15 changed here too\n")
    with pytest.raises(RewriteError) as caught:
        backport.rewrite(ours, "f.txt", HUNKS, base=BASE, base_name="0.9")
    assert str(caught.value) == "f.txt: hunk 2 (@@ -14,3 +15,3 @@) conflicts"


def test_the_base_must_take_the_diff() -> None:
    with pytest.raises(RewriteError, match=r"hunk 1 .* does not apply to 0.9, the release the change was made on"):
        backport.rewrite(b"other\n", "f.txt", HUNKS, base=b"unrelated\n", base_name="0.9")


def test_no_newline_at_end_of_file() -> None:
    diff = b"diff --git a/g b/g\n--- a/g\n+++ b/g\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    (hunk,) = backport.parse(diff, "t")["g"]
    assert backport.rewrite(b"a\nb", "g", (hunk,)).source == b"a\nc"


def test_refresh_leaves_out_added_lines() -> None:
    (h,) = backport.refresh(HUNKS[:1], ("added after 5",))
    assert h.new == h.old


def test_a_python_change_that_reads_an_undefined_name_is_refused() -> None:
    """As pyflakes would flag it: the merged code reads a name the release never binds."""
    before = b"has_a = True\nspecs = []\nif has_a:\n    specs.append(1)\n"
    diff = (b"diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,4 +1,4 @@\n has_a = True\n specs = []\n"
            b"-if has_a:\n+if has_a or has_b:\n     specs.append(1)\n")
    hunks = backport.parse(diff, "t")["m.py"]
    with pytest.raises(RewriteError) as caught:
        backport.rewrite(before, "m.py", hunks)
    assert str(caught.value) == "m.py: the change reads has_b, which this release's file does not define"
    assert backport.rewrite(before + b"has_b = 0\n", "m.py", hunks).status == PATCHED


def test_unbound_names_leaves_bound_and_builtin_names_alone() -> None:
    before = b"import os\n"
    after = b"import os\nfrom x import y as z\ndef f(a, *, b=len):\n    return os, z, a, b, print\n"
    assert backport.unbound_names(before, after) == []
    assert backport.unbound_names(before, after + b"q = missing\n") == ["missing"]


# --- the shipped diff (FlashInfer PR 3903) -------------------------------------------------

RULE = next(r for r in FIXES["allreduce-fusion"].rules if r.kind == "backport")


def test_the_shipped_diff_parses_into_its_files() -> None:
    files = backport.parse(RULE.diff, "pr-3903")
    assert tuple(files) == RULE.files
    assert [len(h) for h in files.values()] == [2, 1, 1, 1, 14, 1, 2, 1]
    guards = [h for h in files["include/flashinfer/comm/trtllm_allreduce.cuh"]
              if b"#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))\n" in h.old]
    assert len(guards) == 13


def test_a_release_at_or_after_the_landing_is_upstream() -> None:
    data = b"whatever the file holds\n"
    for version in ("0.6.17", "0.7.4"):
        result = rewrite_file(data, "include/flashinfer/utils.cuh", (RULE,), version=version)
        assert result.source == data and not result.changed
        (found,) = result.found
        assert (found.status, found.value, found.copied_from) == (
            ALREADY_UPSTREAM, Carried(HowCarried.LANDED), Upstream("2deed6c15e8c8410763d6e8adedc8ca69597e957", "0.6.17"))
        assert (phrased(found).added_key, phrased(found).copied_from, phrased(found).value) == (
            "1 hunk", "2deed6c15e8c", "upstream since 0.6.17")


def test_the_hunks_of_an_upstream_change_are_counted_as_the_reader_reads_them() -> None:
    """A change already upstream is counted without the diff reader: the count is the reader's, for every
    file of every shipped backport."""
    from patchkit.fixes.kinds import BackportRule
    from patchkit.fixes.load import read_fixes
    from patchkit.rewrite.diff import count_hunks

    rules = [r for fix in read_fixes().values() for r in fix.rules if isinstance(r, BackportRule)]
    assert len(rules) >= 6
    for rule in rules:
        for path, hunks in backport.parse(rule.diff, rule.fix).items():
            assert count_hunks(rule.diff, path) == len(hunks), (rule.fix, path)
    assert count_hunks(rules[0].diff, "not/a/file.py") == 0
