"""rewrite.rules: one file, the rules of the fixes that name it, and what each found.

(before, after) pairs per kind of rule, "leaves this alone" cases, the helper a predicate
rule needs (found through ``from .x import *``, missing, reached as an attribute), and the
globs that choose the files.  Fixtures are written here in the shape of the projects'
files; none is project source.
"""

from __future__ import annotations

import pytest

from patchkit.errors import RewriteError
from patchkit.fixes.kinds import RULES, DictKeyRule, ListMemberRule, PredicateRule, RuleKind
from patchkit.rewrite import rules
from patchkit.rewrite.rules import matches, rewrite_file, rules_of
from patchkit.types import ALREADY_UPSTREAM, PATCHED

# --- the rules ----------------------------------------------------------------------------

TABLES = DictKeyRule("tables", "sglang", ("python/pkg/comm/*.py",), 10, 12, "not upstream", "",
                     tables=("MAX_SIZES", "_WORLD_SIZES"))
NVCC = ListMemberRule("fusion", "flashinfer", ("flashinfer/jit/comm.py",), 10, 12, "upstream", "",
                      call="get_nvcc_flags_list", keyword="supported_major_versions", functions=("gen_comm_module",))
GATE = PredicateRule("fusion", "sglang", ("python/pkg/layers/*.py",), "sm100", "sm120", "not upstream", "",
                     functions=("gather_states", "fusion_applies"), flag="_is_sm100_supported",
                     helpers=("python/pkg/platform.py",))
COMM_PY = "python/pkg/comm/utils.py"
JIT_PY = "flashinfer/jit/comm.py"
LAYER_PY = "python/pkg/layers/norm.py"

# --- dict-key -----------------------------------------------------------------------------

SIZES = b"""MiB = 1024 * 1024

MAX_SIZES = {
    9: {2: 64 * MiB, 4: 64 * MiB},
    10: {2: 64 * MiB, 4: 128 * MiB},
}


class Communicator:
    _WORLD_SIZES = {9: [4, 6, 8], 10: [6, 8]}
"""
SIZES_NEW = SIZES.replace(
    b"    10: {2: 64 * MiB, 4: 128 * MiB},\n", b"    10: {2: 64 * MiB, 4: 128 * MiB},\n    12: {2: 64 * MiB, 4: 128 * MiB},\n"
).replace(b"10: [6, 8]}", b"10: [6, 8], 12: [6, 8]}")

# --- list-member --------------------------------------------------------------------------

JIT = b'''from .core import gen_jit_spec, get_nvcc_flags_list


def gen_comm_module():
    """The all-reduce kernels."""
    nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 10])
    return gen_jit_spec("comm", ["comm.cu"], extra_cuda_cflags=nvcc_flags)


def gen_other_module():
    nvcc_flags = get_nvcc_flags_list(supported_major_versions=[9, 10])
    return gen_jit_spec("other", ["other.cu"], extra_cuda_cflags=nvcc_flags)
'''
JIT_NEW = JIT.replace(b"[9, 10])\n    return gen_jit_spec(\"comm\"", b"[9, 10, 12])\n    return gen_jit_spec(\"comm\"")
JIT_MULTILINE = b"""def gen_comm_module():
    return gen_jit_spec(
        "comm",
        extra_cuda_cflags=get_nvcc_flags_list(
            supported_major_versions=[
                9,
                10,
            ]
        ),
    )
"""
JIT_MULTILINE_NEW = JIT_MULTILINE.replace(b"                10,\n", b"                10,\n                12,\n")

# --- predicate ----------------------------------------------------------------------------

IMPORTS = b"from pkg.utils import (\n    is_cuda,\n    is_sm90_supported,\n    is_sm100_supported,\n)\n"
IMPORTS_NEW = IMPORTS.replace(b"    is_sm100_supported,\n", b"    is_sm100_supported,\n    is_sm120_supported,\n")
DEFS = (
    b"_is_cuda = is_cuda()\n"
    b"_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
    b"_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
)
DEFS_NEW = DEFS + b"_is_sm120_supported = _is_cuda and is_sm120_supported()\n"
APPLIES = (
    b"def fusion_applies(hidden, batch_size):\n"
    b"    if not (_is_sm90_supported or _is_sm100_supported):\n"
    b"        return False\n"
    b"    return batch_size <= 128\n"
)
APPLIES_NEW = APPLIES.replace(b"_is_sm100_supported)", b"_is_sm100_supported or _is_sm120_supported)")
# Another function of the rule, here without the or-expression (it calls the one that has it).
GATHER = b"def gather_states(hidden, residual):\n    return fusion_applies(hidden, len(hidden)) and residual is not None\n"


def layer(*functions: bytes, imports: bytes = IMPORTS, defs: bytes = DEFS) -> bytes:
    return imports + b"\n" + defs + b"".join(b"\n\n" + f for f in functions)


def layer_new(*functions: bytes) -> bytes:
    return layer(*functions, imports=IMPORTS_NEW, defs=DEFS_NEW)


# pkg.utils is a package whose __init__ re-exports pkg/utils/common.py with a star import.
UTILS = {
    "python/pkg/utils/__init__.py": b"from .common import *\nfrom .logging import get_logger\n",
    "python/pkg/utils/common.py": (
        b"import torch\n\n\n"
        b"def is_cuda():\n    return torch.version.cuda is not None\n\n\n"
        b"def is_sm100_supported():\n    return torch.cuda.get_device_capability()[0] == 10\n\n\n"
        b"def is_sm120_supported():\n    return torch.cuda.get_device_capability()[0] == 12\n"
    ),
}
UTILS_WITHOUT = {**UTILS, "python/pkg/utils/common.py": UTILS["python/pkg/utils/common.py"].split(b"\n\n\ndef is_sm120")[0]}

# The flag's helper reached as an attribute of the platform object.
PLATFORM_IMPORTS = b"from pkg.platform import get_platform\nfrom pkg.utils import is_cuda\n"
PLATFORM_DEFS = (
    b"_is_cuda = is_cuda()\n"
    b"_is_sm90_supported = _is_cuda and get_platform().is_sm90\n"
    b"_is_sm100_supported = _is_cuda and get_platform().is_sm100\n"
)
PLATFORM_DEFS_NEW = PLATFORM_DEFS + b"_is_sm120_supported = _is_cuda and get_platform().is_sm120\n"
PLATFORM = b"""class Platform:
    @property
    def is_sm100(self):
        return self.major == 10

    @property
    def is_sm120(self):
        return self.major == 12
"""


def read(files: dict[str, bytes]):
    return files.get


REWRITES = [
    pytest.param(SIZES, COMM_PY, {}, SIZES_NEW, id="dict-key: module table and class table"),
    pytest.param(JIT, JIT_PY, {}, JIT_NEW, id="list-member: only inside the rule's function"),
    pytest.param(JIT_MULTILINE, JIT_PY, {}, JIT_MULTILINE_NEW, id="list-member: one member a line"),
    pytest.param(layer(APPLIES), LAYER_PY, UTILS, layer_new(APPLIES_NEW), id="predicate: helper through from .common import *"),
    pytest.param(
        layer(APPLIES, imports=IMPORTS.replace(b"from pkg.utils", b"from ..utils")), LAYER_PY, UTILS,
        layer(APPLIES_NEW, imports=IMPORTS_NEW.replace(b"from pkg.utils", b"from ..utils"), defs=DEFS_NEW),
        id="predicate: helper of a relative import",
    ),
    pytest.param(
        layer(APPLIES, imports=PLATFORM_IMPORTS, defs=PLATFORM_DEFS), LAYER_PY, {"python/pkg/platform.py": PLATFORM},
        layer(APPLIES_NEW, imports=PLATFORM_IMPORTS, defs=PLATFORM_DEFS_NEW), id="predicate: helper as an attribute",
    ),
    pytest.param(layer(GATHER, APPLIES), LAYER_PY, UTILS, layer(GATHER, APPLIES_NEW, imports=IMPORTS_NEW, defs=DEFS_NEW),
                 id="predicate: another function of the rule without the or-expression"),
]


@pytest.mark.parametrize("before, path, files, after", REWRITES)
def test_rewrite(before: bytes, path: str, files: dict, after: bytes) -> None:
    result = rewrite_file(before, path, [TABLES, NVCC, GATE], read(files), "python")
    assert result.source == after
    assert result.changed
    compile(result.source, path, "exec")


NO_CHANGE = [
    pytest.param(SIZES, "python/pkg/comm/nested/utils.py", id="not a file of any rule: * stays in one folder"),
    pytest.param(SIZES, "python/pkg/layers/utils.py", id="tables in another rule's file"),
    pytest.param(b"import torch\n\nSIZES = {10: 1}\n", COMM_PY, id="no table of the rule"),
    pytest.param(SIZES_NEW, COMM_PY, id="dict-key: already upstream"),
    pytest.param(JIT.replace(b"gen_comm_module", b"gen_allgather_module"), JIT_PY, id="list-member: not in the function"),
    pytest.param(JIT.replace(b"supported_major_versions=", b"supported_minor_versions="), JIT_PY, id="another keyword"),
    pytest.param(JIT.replace(b"get_nvcc_flags_list(", b"get_flags_list("), JIT_PY, id="another call"),
    pytest.param(JIT_NEW, JIT_PY, id="list-member: already upstream"),
    pytest.param(layer_new(APPLIES_NEW), LAYER_PY, id="predicate: already upstream"),
    pytest.param(b"def forward(x):\n    return x\n", LAYER_PY, id="predicate: neither a function of the rule nor the flag"),
    pytest.param(layer(b"def other(a):\n    return _is_sm90_supported or _is_sm100_supported\n"), LAYER_PY,
                 id="predicate: the or-expression in another function"),
]


@pytest.mark.parametrize("source, path", NO_CHANGE)
def test_leaves_this_alone(source: bytes, path: str) -> None:
    result = rewrite_file(source, path, [TABLES, NVCC, GATE], read(UTILS), "python")
    assert result.source == source
    assert not result.changed


def test_what_dict_key_found() -> None:
    assert tuple(f.to_json() for f in rewrite_file(SIZES, COMM_PY, [TABLES]).found) == (
        {"name": "MAX_SIZES", "scope": "module", "status": PATCHED, "added_key": 12, "copied_from": 10,
         "value": "{2: 64 * MiB, 4: 128 * MiB}", "fix": "tables", "kind": "dict-key"},
        {"name": "_WORLD_SIZES", "scope": "class Communicator", "status": PATCHED, "added_key": 12, "copied_from": 10,
         "value": "[6, 8]", "fix": "tables", "kind": "dict-key"},
    )
    assert [f.status for f in rewrite_file(SIZES_NEW, COMM_PY, [TABLES]).found] == [ALREADY_UPSTREAM] * 2


def test_what_list_member_found() -> None:
    """Only the list in the rule's function: the other function's list is not even reported."""
    assert tuple(f.to_json() for f in rewrite_file(JIT, JIT_PY, [NVCC]).found) == (
        {"name": "get_nvcc_flags_list(supported_major_versions=...)", "scope": "def gen_comm_module", "status": PATCHED,
         "added_key": 12, "copied_from": 10, "value": "[9, 10, 12]", "fix": "fusion", "kind": "list-member"},
    )


def test_list_member_without_functions_patches_every_call() -> None:
    rule = NVCC._replace(functions=())
    result = rewrite_file(JIT, JIT_PY, [rule])
    assert result.source == JIT.replace(b"[9, 10]", b"[9, 10, 12]")
    assert [f.scope for f in result.found] == ["def gen_comm_module", "def gen_other_module"]


def test_what_predicate_found() -> None:
    assert tuple(f.to_json() for f in rewrite_file(layer(GATHER, APPLIES), LAYER_PY, [GATE], read(UTILS), "python").found) == (
        {"name": "_is_sm100_supported in fusion_applies()", "scope": "def fusion_applies", "status": PATCHED,
         "added_key": "_is_sm120_supported", "copied_from": "_is_sm100_supported",
         "value": "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
         "added": ["_is_sm120_supported = _is_cuda and is_sm120_supported()", "from pkg.utils import is_sm120_supported"],
         "fix": "fusion", "kind": "predicate"},
    )
    (found,) = rewrite_file(layer_new(APPLIES_NEW), LAYER_PY, [GATE], read(UTILS), "python").found
    assert (found.status, found.added) == (ALREADY_UPSTREAM, ())


def test_rules_apply_in_order_each_tagged_with_its_fix() -> None:
    """Two fixes' rules on one file: each rewrites what the one before left."""
    both = SIZES + b"\n\n" + JIT.split(b"\n\n\n", 1)[1]
    rules = [TABLES, NVCC._replace(files=(COMM_PY,))]
    result = rewrite_file(both, COMM_PY, rules)
    assert result.source == SIZES_NEW + b"\n\n" + JIT_NEW.split(b"\n\n\n", 1)[1]
    assert [(f.fix, f.kind, f.name) for f in result.found] == [
        ("tables", "dict-key", "MAX_SIZES"),
        ("tables", "dict-key", "_WORLD_SIZES"),
        ("fusion", "list-member", "get_nvcc_flags_list(supported_major_versions=...)"),
    ]


# --- what a rule refuses ------------------------------------------------------------------

MISSING = "python/pkg/layers/norm.py: cannot add _is_sm120_supported: is_sm120_supported is not defined in pkg.utils in this release"


@pytest.mark.parametrize(
    "source, files, message",
    [
        pytest.param(layer(APPLIES), UTILS_WITHOUT, MISSING, id="helper missing from the star-imported module"),
        pytest.param(layer(APPLIES), {}, MISSING, id="no utils module at all"),
        pytest.param(
            layer(APPLIES), {**UTILS, "python/pkg/utils/__init__.py": b"from .logging import get_logger\n"}, MISSING,
            id="the module no longer re-exports common",
        ),
        pytest.param(
            layer(APPLIES, imports=PLATFORM_IMPORTS, defs=PLATFORM_DEFS),
            {"python/pkg/platform.py": PLATFORM.split(b"\n\n    @property\n    def is_sm120")[0]},
            f"{LAYER_PY}: cannot add _is_sm120_supported: get_platform().is_sm120 is not defined in this release",
            id="attribute missing from the helpers file",
        ),
        pytest.param(
            layer(APPLIES, imports=PLATFORM_IMPORTS, defs=PLATFORM_DEFS), {"python/pkg/other.py": PLATFORM},
            f"{LAYER_PY}: cannot add _is_sm120_supported: get_platform().is_sm120 is not defined in this release",
            id="attribute defined only outside the rule's helpers files",
        ),
        pytest.param(
            layer(GATHER), UTILS, f"{LAYER_PY}: function gather_states has no or-expression with _is_sm100_supported",
            id="a function of the rule, and no or-expression in any",
        ),
        pytest.param(
            b"def fusion_applies():\n    return True\n", {},
            f"{LAYER_PY}: function fusion_applies has no or-expression with _is_sm100_supported",
            id="a function of the rule, no flag in the file",
        ),
        pytest.param(
            SIZES.replace(b"10: [6, 8]", b"11: [6, 8]"), {}, "no key 10 to copy from", id="dict-key: no key to copy",
        ),
    ],
)
def test_refuses(source: bytes, files: dict, message: str) -> None:
    path = COMM_PY if b"MAX_SIZES" in source else LAYER_PY
    with pytest.raises(RewriteError) as exc:
        rewrite_file(source, path, [TABLES, GATE], read(files), "python")
    assert message in str(exc.value)


def test_no_reader_means_no_helper() -> None:
    with pytest.raises(RewriteError, match="is_sm120_supported is not defined in pkg.utils"):
        rewrite_file(layer(APPLIES), LAYER_PY, [GATE])


def test_the_helper_defined_in_the_module_itself_needs_no_reader() -> None:
    """Nothing to find elsewhere when the module already imports the new helper."""
    imports = IMPORTS_NEW
    result = rewrite_file(layer(APPLIES, imports=imports), LAYER_PY, [GATE])
    assert result.source == layer(APPLIES_NEW, imports=imports, defs=DEFS_NEW)


# --- once bugs: a parenthesized re-export, a file that only imports the flag ----------------


def test_helper_re_exported_by_a_parenthesized_import() -> None:
    files = {**UTILS, "python/pkg/utils/__init__.py": b"from .common import (\n    is_sm100_supported,\n    is_sm120_supported,\n)\n"}
    assert rewrite_file(layer(APPLIES), LAYER_PY, [GATE], read(files), "python").changed


def test_a_file_that_only_imports_the_flag() -> None:
    source = b"from pkg.layers.comm import _is_sm100_supported\n\n\ndef other():\n    return _is_sm100_supported\n"
    assert rewrite_file(source, LAYER_PY, [GATE], read(UTILS), "python").source == source


# --- the files of a rule ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, pattern, expected",
    [
        ("python/pkg/comm/utils.py", "python/pkg/comm/*.py", True),
        ("python/pkg/comm/sub/utils.py", "python/pkg/comm/*.py", False),  # fnmatch alone would say yes
        ("python/pkg/comm/utils.pyc", "python/pkg/comm/*.py", False),
        ("python/pkg/comm/utils.py", "python/*/comm/utils.py", True),
        ("python/a/b/comm/utils.py", "python/*/comm/utils.py", False),
        ("flashinfer/jit/comm.py", "flashinfer/jit/comm.py", True),
        ("flashinfer/jit/Comm.py", "flashinfer/jit/comm.py", False),  # case matters
        ("other/flashinfer/jit/comm.py", "flashinfer/jit/comm.py", False),
        ("flashinfer/jit/comm.py", "*.py", False),
        ("setup.py", "*.py", True),
    ],
)
def test_matches(path: str, pattern: str, expected: bool) -> None:
    assert matches(path, pattern) is expected


def test_rules_of() -> None:
    two = GATE._replace(files=("python/pkg/layers/comm.py", "python/pkg/layers/boundary/*.py"))
    rules = [TABLES, NVCC, two]
    assert rules_of(COMM_PY, rules) == [TABLES]
    assert rules_of(JIT_PY, rules) == [NVCC]
    assert rules_of("python/pkg/layers/comm.py", rules) == [two]
    assert rules_of("python/pkg/layers/boundary/add_norm.py", rules) == [two]
    assert rules_of("python/pkg/layers/boundary/deeper/add_norm.py", rules) == []
    assert rules_of("python/pkg/comm/sub/utils.py", rules) == []
    assert rules_of(COMM_PY, [NVCC, TABLES, TABLES._replace(fix="again")]) == [TABLES, TABLES._replace(fix="again")]


def test_each_kind_of_rule_has_its_class_and_its_rewrite() -> None:
    """A kind of rule is one entry of ``fixes.kinds.RULES`` (the data is read through it) and one
    of ``rewrite.rules.REWRITES``: none is left without either."""
    assert list(RULES) == list(RuleKind) and all(cls.kind is kind for kind, cls in RULES.items())
    assert set(rules.REWRITES) == set(RuleKind)
