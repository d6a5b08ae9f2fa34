"""The fix that keeps SGLang from turning FlashInfer's all-reduce fusion on by itself on SM12x, on
the real release files: after the default rules, every ``self.enable_flashinfer_allreduce_fusion =
True`` of server_args.py is reached on SM90 (0.5.7) and SM100 as before, and never on SM120 or
SM121; nothing else of the file changes; 0.5.8 and later are upstream already.  The conditions
are taken out of the patched file with ``ast`` and evaluated with the capability helpers as the
same release defines them (the majors read from its utils/common.py): SGLang is never imported."""

from __future__ import annotations

import ast
import functools
import types

import pytest

from patchkit.data import shipped
from patchkit.digest import blob_id
from patchkit.fixes.load import read_fixes
from patchkit.rewrite.backported import Carried, HowCarried
from patchkit.rewrite.diff import parse
from patchkit.rewrite.found import phrased
from patchkit.rewrite.rules import rewrite_file
from patchkit.types import ALREADY_UPSTREAM, PATCHED
from support.mirror import wheel_zip

pytestmark = pytest.mark.network  # the wheels come from the cache, or from the index on a cold one

PATH = "python/sglang/srt/server_args.py"
COMMON = "sglang/srt/utils/common.py"
FLAGS = ("is_sm90_supported", "is_sm100_supported", "is_blackwell_supported")
GPUS = {(9, 0): "H100", (10, 0): "B200", (12, 0): "RTX PRO 6000", (12, 1): "GB10"}
GPTOSS = ("0.5.4.post2", "0.5.4.post3", "0.5.5", "0.5.5.post1", "0.5.5.post2", "0.5.5.post3", "0.5.6", "0.5.6.post1",
          "0.5.6.post2")


# A release's files are read from its wheel, and patched, once for all the tests that look at them
# (bytes and tuples: nothing a test could change).
@functools.cache
def _read(version: str, path: str) -> bytes:
    return wheel_zip(version).read(path)


def _server_args(version: str) -> bytes:
    return _read(version, PATH.removeprefix("python/"))


@functools.cache
def _patched(version: str) -> tuple[bytes, tuple]:
    rules = read_fixes()["fusion-self-enable"].rules
    result = rewrite_file(_server_args(version), PATH, rules, base=lambda rule, path: _server_args(rule.made_on),
                          version=version)
    return result.source, result.found


@functools.lru_cache(maxsize=2)  # a test reads the file as released and as patched; a tree is some 5 MB
def _tree(source: bytes) -> ast.Module:
    """``ast.parse(source)``: the patched file is read twice in a row (the readers here only look at it)."""
    return ast.parse(source)


def _majors(version: str) -> dict[str, tuple[int, ...]]:
    """The majors each capability helper admits, as the release's utils/common.py defines it: a def
    comparing ``get_device_capability(...)[0]`` (``== 10``, ``in [10, 12]``), a def or-ing two
    others (``is_sm100_supported(device) or is_sm120_supported(device)``, 0.5.5.post3 - 0.5.6.post2)
    or a ``partial(_check_cuda_device_version, device_capability_majors=[...])`` (0.5.7 on)."""
    helpers = (*FLAGS, "is_sm120_supported")
    found: dict[str, tuple[int, ...]] = {}
    calls: dict[str, list[str]] = {}
    for node in ast.parse(_read(version, COMMON)).body:
        if isinstance(node, ast.FunctionDef) and node.name in helpers:
            for cmp in (n for n in ast.walk(node) if isinstance(n, ast.Compare)):
                if "get_device_capability" in ast.unparse(cmp.left):
                    value = ast.literal_eval(cmp.comparators[0])
                    found[node.name] = tuple(value) if isinstance(value, list) else (value,)
            calls[node.name] = [n.func.id for n in ast.walk(node) if isinstance(n, ast.Call)
                                and isinstance(n.func, ast.Name) and n.func.id in helpers]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id in helpers]
            majors = [n.value for n in ast.walk(node) if isinstance(n, ast.keyword) and n.arg == "device_capability_majors"]
            if names and majors:
                found[names[0]] = tuple(ast.literal_eval(majors[0]))
    for name, called in calls.items():
        if name not in found and called:
            found[name] = tuple(m for c in called for m in found[c])
    return {name: majors for name, majors in found.items() if name in FLAGS}


def _self_enabling(source: bytes) -> list[tuple[int, list[tuple[ast.expr, bool]]]]:
    """Each ``self.enable_flashinfer_allreduce_fusion = True`` (its line) with the tests of the ``if``
    statements around it that ask a capability helper, and whether it lies in their body (True) or
    their ``else`` (False)."""
    found = []

    def walk(node: ast.AST, tests: list) -> None:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.enable_flashinfer_allreduce_fusion" \
                and isinstance(node.value, ast.Constant) and node.value.value is True:
            found.append((node.lineno, tests))
        if isinstance(node, ast.If):
            asks = any(isinstance(n, ast.Name) and n.id in FLAGS for n in ast.walk(node.test))
            for child in node.body:
                walk(child, tests + [(node.test, True)] if asks else tests)
            for child in node.orelse:
                walk(child, tests + [(node.test, False)] if asks else tests)
            return
        for child in ast.iter_child_nodes(node):
            walk(child, tests)

    walk(_tree(source), [])
    return found


def _turns_on(tests: list[tuple[ast.expr, bool]], gpu: tuple[int, int], majors: dict) -> bool:
    """Whether the conditions let SGLang set the fusion on a GPU of ``gpu`` (CUDA 12.9, one node,
    no dp attention, GptOssForCausalLM, not an H20, no all-to-all backend)."""
    scope = {name: (lambda m=m: gpu[0] in m) for name, m in majors.items()}
    scope.update(is_cuda=lambda: True, model_arch="GptOssForCausalLM", is_h20_device=False,
                 self=types.SimpleNamespace(enable_flashinfer_allreduce_fusion=False, enable_dp_attention=False,
                                            nnodes=1, moe_a2a_backend="none"))
    return all(bool(eval(compile(ast.Expression(test), PATH, "eval"), dict(scope))) is body for test, body in tests)


def _imports(source: bytes) -> set[str]:
    return {a.name for n in ast.walk(_tree(source)) if isinstance(n, ast.ImportFrom) for a in n.names}


@pytest.mark.parametrize("version", [*GPTOSS, "0.5.7"])
def test_sglang_turns_the_fusion_on_by_itself_on_sm90_sm100_only(version: str) -> None:
    majors = _majors(version)
    assert majors == {"is_sm90_supported": (9,), "is_sm100_supported": (10,), "is_blackwell_supported": (10, 12)}
    before = _server_args(version)
    source, found = _patched(version)
    assert [(f.name, f.status) for f in found] == [("SGLang PR 16283", PATCHED)]
    # As released, SGLang turns the fusion on by itself on both SM12x GPUs (SGLang issue 15650).
    assert any(_turns_on(tests, (12, 0), majors) and _turns_on(tests, (12, 1), majors) for _, tests in _self_enabling(before))
    sites = _self_enabling(source)
    # 0.5.4.post2 - 0.5.6.post2: DeepseekV3's branch (SM100 already) and GptOss's; 0.5.7: one block.
    assert len(sites) == (1 if version == "0.5.7" else 2)
    for line, tests in sites:
        assert tests, line  # every one of them asks a capability helper
        for gpu in ((12, 0), (12, 1)):
            assert _turns_on(tests, gpu, majors) is False, (line, GPUS[gpu])
        assert _turns_on(tests, (10, 0), majors) is True, line
        # 0.5.7's block is for SM90 too, as upstream's 0.5.8; the model branches before it were SM100 only.
        assert _turns_on(tests, (9, 0), majors) is (version == "0.5.7"), line
    # The helper the change calls is imported there already.
    assert "is_sm100_supported" in _imports(source)


@pytest.mark.parametrize("version", GPTOSS)
def test_the_gptoss_branch_alone_changes(version: str) -> None:
    """One line of the file: the GptOss branch's test.  The file's other is_blackwell_supported()
    tests (MXFP4, attention backends) are other features and stay."""
    before = _server_args(version)
    source, _ = _patched(version)
    old, new = before.splitlines(keepends=True), source.splitlines(keepends=True)
    changed = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
    assert len(changed) == 1
    (at,) = changed
    assert (old[at], new[at]) == (b"            if is_blackwell_supported():\n", b"            if is_sm100_supported():\n")
    assert b"self.enable_flashinfer_allreduce_fusion = True" in b"".join(new[at + 1:at + 4])
    assert b"GptOssForCausalLM" in new[at + 4 if version in GPTOSS[:3] else at + 5]  # its log line
    assert source.count(b"is_blackwell_supported()") == before.count(b"is_blackwell_supported()") - 1 > 0


def test_0_5_7_takes_0_5_8s_narrowing_exactly() -> None:
    """The comment and the condition, as 0.5.8 has them; 0.5.8's block is the patched one plus the
    model it added (Glm4MoeLiteForCausalLM), nothing else."""
    before = _server_args("0.5.7")
    source, found = _patched("0.5.7")
    assert [(f.value, phrased(f).value) for f in found] == [(Carried(HowCarried.EXACTLY), "exactly")]
    old, new = before.splitlines(), source.splitlines()
    assert [(i + 1, a, b) for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b] == [
        (1470, b"        # TRTLLM AllReduce Fusion supports SM90/100/120, enable it by default",
         b"        # TRTLLM AllReduce Fusion supports SM90/100, enable it by default"),
        (1487, b"            and (is_sm90_supported() or is_blackwell_supported())",
         b"            and (is_sm90_supported() or is_sm100_supported())"),
    ]
    upstream = _server_args("0.5.8").splitlines()
    block = new[1469:1493]
    assert upstream[1601:1626] == block[:15] + [b'                "Glm4MoeLiteForCausalLM",'] + block[15:]


@pytest.mark.parametrize("version", ["0.5.8", "0.5.9"])
def test_upstream_from_0_5_8_is_unchanged(version: str) -> None:
    source, found = _patched(version)
    assert source == _server_args(version)
    assert [(f.name, f.status, f.value) for f in found] == [("SGLang PR 16283", ALREADY_UPSTREAM, Carried(HowCarried.LANDED))]
    assert [phrased(f).value for f in found] == ["upstream since 0.5.8"]
    majors = _majors(version)
    (line, tests), = _self_enabling(source)
    assert [_turns_on(tests, gpu, majors) for gpu in GPUS] == [True, True, False, False]


@pytest.mark.parametrize("version", ["0.5.3", "0.5.4.post1"])
def test_before_0_5_4_post2_there_is_nothing_to_carry(version: str) -> None:
    """0.5.4.post1 and earlier turn it on by themselves on is_sm100_supported() only (they have no
    is_blackwell_supported())."""
    source, found = _patched(version)
    assert (source, found) == (_server_args(version), ())
    majors = _majors(version)
    assert majors == {"is_sm90_supported": (9,), "is_sm100_supported": (10,)}
    sites = _self_enabling(source)
    assert sites and all(_turns_on(tests, (10, 0), majors) and not _turns_on(tests, (12, 0), majors) for _, tests in sites)


def test_each_diff_is_made_on_the_real_file_of_its_release() -> None:
    """A diff's pre-image blob is its ``made_on`` release's server_args.py, its post-image the patched file."""
    rules = read_fixes()["fusion-self-enable"].rules
    assert [(r.made_on, r.since, r.until, r.origin.landed_in) for r in rules] == [
        ("0.5.7", "0.5.7", None, "0.5.8"), ("0.5.5", "0.5.4.post2", "0.5.5", "0.5.8"),
        ("0.5.6.post2", "0.5.5.post1", "0.5.6.post2", "0.5.8")]
    for rule in rules:
        (diff,) = parse(rule.diff)
        assert diff.path == PATH
        before, (after, _) = _server_args(rule.made_on), _patched(rule.made_on)
        assert f"index {blob_id(before)}..{blob_id(after)} 100644".encode() in rule.diff


def test_the_shipped_series_carry_it_and_the_fusions_patch_says_it_stops_the_release() -> None:
    """SGLang 0.5.7's series: the fix second (on by default, by name); allreduce-fusion's message says
    that 0.5.7 turns the fusion on by itself and that this fix keeps it from doing so."""
    series = shipped("patches") / "0.5.7"
    names = (series / "series").read_text().splitlines()
    assert names == ["0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch",
                     "0002-Keep-SGLang-from-turning-the-all-reduce-fusion-on-by.patch",
                     "0003-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch",
                     "0004-Allow-the-FlashInfer-all-reduce-fusion-on-SM120.patch"]
    ours = (series / names[1]).read_bytes()
    assert b"Subject: [PATCH] Keep SGLang from turning the all-reduce fusion on by itself on SM12x\n" in ours
    assert b"-            and (is_sm90_supported() or is_blackwell_supported())\n" \
           b"+            and (is_sm90_supported() or is_sm100_supported())\n" in ours
    fusion = (series / names[3]).read_text()
    assert ("SGLang 0.5.7 turns the fusion on by itself on SM120 for\nDeepseekV3ForCausalLM, GptOssForCausalLM, "
            "Glm4MoeForCausalLM,\nQwen3MoeForCausalLM (with FlashInfer below 0.6.17 installed, the server\nthen fails); "
            "the fusion-self-enable fix keeps it from doing so.\n") in fusion
    assert not (shipped("patches") / "0.5.8" / "series").read_text().count("Keep-SGLang-from-turning")
