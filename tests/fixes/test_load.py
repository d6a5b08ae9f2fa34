"""The fixes and projects are data (TOML): read, checked, and turned into the registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.fixes.load import HERE, read_fix, read_fixes, read_projects
from patchkit.fixes.registry import PROJECTS

RULE = """
[[rules]]
project = "sglang"
kind = "dict-key"
files = ["python/sglang/x/*.py"]
tables = ["T"]
from_cc = 10
to_cc = 12
evidence = "not upstream; copied from SM100, untuned"
"""
HEAD = 'title = "A fix"\ndefault = false\nrationale = """\nWhy."""\n'


def test_the_shipped_fixes_and_projects() -> None:
    fixes = read_fixes()
    # the default ones first (fusion-self-enable: on by default, added with SGLang 0.5.8's narrowing of the self-enabled fusion)
    assert list(fixes) == ["deepgemm-sm12x", "fusion-self-enable", "torch-symm-mem", "allreduce-fusion"]
    fix = fixes["torch-symm-mem"]
    assert fix.default and fix.title == "Add SM120 to the torch symm-mem all-reduce tables"
    assert [(r.project, r.kind, r.from_cc, r.to_cc) for r in fix.rules] == [("sglang", "dict-key", 10, 12), ("vllm", "dict-key", "10.0", "12.0")]
    assert list(read_projects()) == ["sglang", "vllm", "flashinfer"]
    fusion = fixes["allreduce-fusion"]
    assert not fusion.default
    assert [(r.project, r.kind, r.from_cc, r.to_cc, r.evidence) for r in fusion.rules] == [
        ("flashinfer", "backport", 10, 12, "part of upstream FlashInfer PR 3903, in flashinfer-python 0.6.17 (the rest: its "
         "tests/comm/test_trtllm_allreduce.py and test_trtllm_allreduce_fusion.py changes, which no release ships)"),
        ("sglang", "predicate", "sm100", "sm120", "not upstream; copied from SM100, untuned"),
    ]
    backport = fusion.rules[0]
    assert tuple(backport.origin._asdict().values()) == ("FlashInfer", 3903, "2deed6c15e8c8410763d6e8adedc8ca69597e957",
                               "feat(comm): extend trtllm_allreduce to SM12x and fix lamport buffer pointer packing", "0.6.17")
    assert (backport.made_on, [(r.file, r.until, r.drop) for r in backport.refresh]) == (
        "0.6.16.post4", [("flashinfer/aot.py", "0.6.5", ("            or has_sm120f",))])
    assert backport.where().startswith("FlashInfer PR 3903 (feat(comm): extend trtllm_allreduce to SM12x")
    assert [(p.project, p.since, p.until) for p in fusion.paths] == [
        ("sglang", "0.5.3", "0.5.7"), ("sglang", "0.5.8", "0.5.13.post1"), ("sglang", "0.5.14", "0.5.20"),
        ("sglang", "0.5.21", None), ("flashinfer", "0.5.0", None)]
    assert fusion.path("sglang", "0.5.23").functions == (
        ("python/sglang/srt/layers/layer_boundary/residual/add_norm.py", ("flashinfer_ar_fusion_applies",)),
        ("python/sglang/srt/layers/flashinfer_comm_fusion.py", ("_resolve_backend",)))
    assert fusion.path("sglang", "0.5.2") is None and fusion.path("vllm", "0.11.0") is None


def test_the_registry_is_built_from_them() -> None:
    sglang, vllm = PROJECTS["sglang"], PROJECTS["vllm"]
    assert sglang.files == (
        "python/sglang/srt/layers/deep_gemm_wrapper/configurer.py",
        "python/sglang/srt/server_args.py",  # fusion-self-enable's backports
        "python/sglang/srt/distributed/device_communicators/*.py",
        "python/sglang/srt/layers/communicator.py",
        "python/sglang/srt/layers/layer_boundary/residual/add_norm.py",
    )
    assert sglang.tables == ("SYMM_MEM_ALL_REDUCE_MAX_SIZES", "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES", "_WORLD_SIZES_MULTIMEM")
    assert (sglang.source_root, sglang.key_style, sglang.from_cc, sglang.to_cc, sglang.patches) == ("python", "major", 10, 12, "")
    assert vllm.tables == ("CUSTOM_ALL_REDUCE_MAX_SIZES", "SYMM_MEM_ALL_REDUCE_MAX_SIZES", "_WORLD_SIZES_MULTIMEM")
    assert (vllm.source_root, vllm.key_style, vllm.from_cc, vllm.to_cc, vllm.patches) == ("", "major.minor", "10.0", "12.0", "vllm")
    flashinfer = PROJECTS["flashinfer"]
    assert (flashinfer.distribution, flashinfer.dist_info(), flashinfer.files) == (
        "flashinfer-python", "flashinfer_python-*.dist-info", (
            "csrc/trtllm_allreduce.cu", "flashinfer/aot.py", "flashinfer/comm/trtllm_ar.py", "flashinfer/jit/comm.py",
            "include/flashinfer/comm/trtllm_allreduce.cuh", "include/flashinfer/comm/trtllm_allreduce_fusion.cuh",
            "include/flashinfer/comm/trtllm_moe_allreduce_fusion.cuh", "include/flashinfer/utils.cuh"))
    # An installed wheel keeps the JIT's CUDA sources below flashinfer/data/ (projects.toml).
    assert flashinfer.package_path("include/flashinfer/utils.cuh") == "flashinfer/data/include/flashinfer/utils.cuh"
    assert flashinfer.package_path("csrc/trtllm_allreduce.cu") == "flashinfer/data/csrc/trtllm_allreduce.cu"
    assert flashinfer.repo_path("flashinfer/data/csrc/trtllm_allreduce.cu") == "csrc/trtllm_allreduce.cu"
    assert flashinfer.package_path("flashinfer/jit/comm.py") == flashinfer.repo_path("flashinfer/jit/comm.py") == "flashinfer/jit/comm.py"


def test_a_fix_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "my-fix.toml"
    path.write_text(HEAD + RULE)
    fix = read_fix(path)
    assert (fix.name, fix.title, fix.rationale, fix.default) == ("my-fix", "A fix", "Why.", False)
    (rule,) = fix.rules
    assert rule == rule._replace(fix="my-fix", project="sglang", files=("python/sglang/x/*.py",), tables=("T",), needs="")


@pytest.mark.parametrize(
    "text, reason",
    [
        ("title = ", "not a readable TOML file"),
        (HEAD, "my-fix: 'rules' is missing or not list"),
        (HEAD + RULE.replace('kind = "dict-key"', 'kind = "regex"'), "my-fix, rule 1: kind 'regex' is not one of dict-key, list-member, predicate, backport"),
        (HEAD + RULE.replace('kind = "dict-key"', 'kind = "list-member"'), "my-fix, rule 1: a list-member rule names 'call' and 'keyword', or 'target', or 'test'"),
        (HEAD + RULE.replace('kind = "dict-key"', 'kind = "predicate"'), "my-fix, rule 1: 'from_cc' is missing or not str"),
        (HEAD + RULE.replace("to_cc = 12", "to_cc = 10"), "my-fix, rule 1: from_cc and to_cc are both 10"),
        (HEAD + RULE.replace('tables = ["T"]', "tables = []"), "my-fix, rule 1: 'tables' must be a list of strings"),
        (HEAD + RULE.replace("from_cc = 10", "from_cc = true"), "my-fix, rule 1: 'from_cc' is missing or not"),
        (HEAD.replace("default = false", 'default = "no"') + RULE, "my-fix: 'default' is missing or not bool"),
    ],
)
def test_a_wrong_fix_file_is_one_line_naming_it(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "my-fix.toml"
    path.write_text(text)
    with pytest.raises(BadInput) as caught:
        read_fix(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {reason}") and "\n" not in message, message


def test_the_data_files_ship_with_the_package() -> None:
    assert (HERE / "projects.toml").is_file() and (HERE / "torch-symm-mem.toml").is_file()


BACKPORT = '''
[[rules]]
project = "flashinfer"
kind = "backport"
diff = "up.diff"
made_on = "0.6.16.post4"
from_cc = 10
to_cc = 12
evidence = "same as upstream FlashInfer PR 1"
[rules.origin]
project = "FlashInfer"
pr = 1
commit = "abc"
title = "a change"
landed_in = "0.6.17"
'''
DIFF = b"diff --git a/csrc/x.cu b/csrc/x.cu\n--- a/csrc/x.cu\n+++ b/csrc/x.cu\n@@ -1 +1 @@\n-a\n+b\n"
PATH = '''
[[path]]
project = "flashinfer"
since = "0.5.0"
files = ["csrc/x.cu"]
'''


def test_a_backport_rule_and_a_feature_path_are_read(tmp_path: Path) -> None:
    (tmp_path / "up.diff").write_bytes(DIFF)
    path = tmp_path / "my-fix.toml"
    path.write_text(HEAD + BACKPORT + PATH)
    fix = read_fix(path)
    (rule,) = fix.rules
    assert (rule.kind, rule.files, rule.diff, rule.made_on, rule.refresh) == ("backport", ("csrc/x.cu",), DIFF, "0.6.16.post4", ())
    assert rule.origin.cite() == "FlashInfer PR 1" and rule.names() == ()
    assert fix.path("flashinfer", "0.6.4").files == ("csrc/x.cu",) and fix.path("flashinfer", "0.4.0") is None


@pytest.mark.parametrize(
    "text, diff, reason",
    [
        (BACKPORT, None, "my-fix, rule 1: cannot read the backport's diff"),
        (BACKPORT, b"not a diff\n", "my-fix, rule 1: not a diff (no 'diff --git a/X b/X' line)"),
        (BACKPORT.replace('diff = "up.diff"', 'diff = "../up.diff"'), DIFF, "my-fix, rule 1: diff '../up.diff' must be a path below"),
        (BACKPORT.replace("pr = 1\n", ""), DIFF, "my-fix, rule 1, origin: 'pr' is missing or not int"),
        (BACKPORT.replace('made_on = "0.6.16.post4"\n', ""), DIFF, "my-fix, rule 1: 'made_on' is missing or not str"),
        (BACKPORT.replace("same as upstream", "just like"), DIFF,
         "my-fix, rule 1: evidence must start with one of 'same as upstream', 'part of upstream', 'proposed upstream', 'not upstream'"),
        (BACKPORT.replace("same as upstream FlashInfer PR 1", "part of upstream FlashInfer PR 1"), DIFF,
         "my-fix, rule 1: evidence 'part of upstream ...' must say '(the rest: ...)'"),
        (BACKPORT.replace("same as upstream FlashInfer PR 1", "proposed upstream FlashInfer PR 1"), DIFF,
         "my-fix, rule 1: evidence 'proposed upstream ...' must say 'not merged'"),
        (BACKPORT + '[[rules.refresh]]\nfile = "csrc/y.cu"\ndrop = ["x"]\nwhy = "w"\n', DIFF,
         "my-fix, rule 1, refresh 1: 'csrc/y.cu' is not a file of the diff"),
        (BACKPORT + PATH.replace('files = ["csrc/x.cu"]', "files = []"), DIFF,
         "my-fix, path 1: 'files' must be a list of globs (or empty, with 'functions')"),
        (BACKPORT + PATH + '[[path.blocks]]\nfile = "csrc/x.cu"\ntext = "t"\n', DIFF, "my-fix, path 1, block 1: 'says' is missing or not str"),
    ],
)
def test_a_wrong_backport_or_path_is_one_line_naming_the_file(tmp_path: Path, text: str, diff: bytes | None, reason: str) -> None:
    if diff is not None:
        (tmp_path / "up.diff").write_bytes(diff)
    path = tmp_path / "my-fix.toml"
    path.write_text(HEAD + text)
    with pytest.raises(BadInput) as caught:
        read_fix(path)
    message = str(caught.value)
    assert reason in message and "\n" not in message, message
    assert message.startswith(f"{path}") or message.startswith(f"{tmp_path / 'up.diff'}"), message
