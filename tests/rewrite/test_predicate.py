"""The predicate rewrite: (before, after) pairs, "leaves this alone" cases, errors, and
real SGLang files (0.5.9's communicator.py: helper imported; 0.5.23's add_norm.py: helper
reached as an attribute).

Fixtures are written here in the shape of SGLang's files; none is SGLang source.
"""

from __future__ import annotations

import ast
import difflib
import zipfile

import pytest
from test_list_member import black_clean

from patchkit.errors import RewriteError
from patchkit.rewrite.predicate import Helper, rewrite
from patchkit.types import ALREADY_UPSTREAM, PATCHED
from support.mirror import default_cache, fetch_wheel

FLAG = "_is_sm100_supported"
IMPORTS = b"from pkg.utils import (\n    is_cuda,\n    is_sm90_supported,\n    is_sm100_supported,\n)\n"
IMPORTS_NEW = IMPORTS.replace(b"    is_sm100_supported,\n", b"    is_sm100_supported,\n    is_sm120_supported,\n")
DEFS = (
    b"_is_cuda = is_cuda()\n"
    b"_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
    b"_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
    b"_use_other = False\n"
)
DEFS_NEW = DEFS.replace(b"_use_other", b"_is_sm120_supported = _is_cuda and is_sm120_supported()\n_use_other")


def _module(body: bytes, imports: bytes = IMPORTS, defs: bytes = DEFS) -> bytes:
    return imports + b"\n" + defs + b"\n\n" + body


def _patched(body: bytes) -> bytes:
    return _module(body, IMPORTS_NEW, DEFS_NEW)


def _rw(before: bytes, function: str = "use_fusion", flag: str = FLAG, old="sm100", new="sm120"):
    return rewrite(before, function, flag, old, new, path="pkg/mod.py")


FUSION = (
    b"def use_fusion(batch_size: int):\n"
    b"    return (\n"
    b"        # fusion regressed on one architecture\n"
    b"        (_is_sm90_supported or _is_sm100_supported)\n"
    b"        and batch_size > 0\n"
    b"        and not _use_other\n"
    b"    )\n"
)
FUSION_NEW = FUSION.replace(b"_is_sm100_supported)", b"_is_sm100_supported or _is_sm120_supported)")

CHAIN = (
    b"def use_fusion(batch_size: int):\n"
    b"    return (\n"
    b"        _is_sm90_supported\n"
    b"        or _is_sm100_supported  # datacenter Blackwell\n"
    b"        # the others\n"
    b"        or _use_other\n"
    b"    )\n"
)
CHAIN_NEW = CHAIN.replace(b"Blackwell\n", b"Blackwell\n        or _is_sm120_supported\n")

PLATFORM_DEFS = b"_is_cuda = is_cuda()\n_is_sm100_supported = _is_cuda and get_platform().is_sm100\n"
PLATFORM_DEFS_NEW = PLATFORM_DEFS + b"_is_sm120_supported = _is_cuda and get_platform().is_sm120\n"

CHAIN_LAST = (
    b"def use_fusion(n):\n"
    b"    return (\n"
    b"        _is_sm90_supported\n"
    b"        or _use_another_architecture_with_a_long_name\n"
    b"        or _is_sm100_supported  # last\n"
    b"    )\n"
)

REWRITES = [
    pytest.param(_module(FUSION), _patched(FUSION_NEW), id="or-expression inside an and-expression"),
    pytest.param(
        _module(b"def use_fusion(n):\n    if _is_sm90_supported or _is_sm100_supported:\n        return n\n"),
        _patched(b"def use_fusion(n):\n    if _is_sm90_supported or _is_sm100_supported or _is_sm120_supported:\n        return n\n"),
        id="if test",
    ),
    pytest.param(_module(CHAIN), _patched(CHAIN_NEW), id="one operand a line: own line, the comment stays with the flag"),
    pytest.param(
        _module(CHAIN_LAST),
        _patched(CHAIN_LAST.replace(b"# last\n", b"# last\n        or _is_sm120_supported\n")),
        id="one operand a line, the flag last",
    ),
    pytest.param(
        _module(b"def use_fusion(n):\n    return (_is_sm100_supported or _is_sm90_supported) and n\n"),
        _patched(b"def use_fusion(n):\n    return (_is_sm100_supported or _is_sm120_supported or _is_sm90_supported) and n\n"),
        id="flag first",
    ),
    pytest.param(
        _module(b"def use_fusion(n):\n    a = _is_sm90_supported or _is_sm100_supported\n    return a or (n and _is_sm100_supported or n)\n"),
        _patched(
            b"def use_fusion(n):\n    a = _is_sm90_supported or _is_sm100_supported or _is_sm120_supported\n"
            b"    return a or (n and _is_sm100_supported or n)\n"
        ),
        id="only where the flag is an operand of the or",
    ),
    pytest.param(
        _module(b"def use_fusion(n):\n    a = _is_sm100_supported or n\n    return (n or _is_sm100_supported) and a\n"),
        _patched(
            b"def use_fusion(n):\n    a = _is_sm100_supported or _is_sm120_supported or n\n"
            b"    return (n or _is_sm100_supported or _is_sm120_supported) and a\n"
        ),
        id="two or-expressions",
    ),
    pytest.param(
        _module(b"class Layer:\n    def use_fusion(self):\n        def check():\n            return _is_sm90_supported or _is_sm100_supported\n\n        return check\n"),
        _patched(
            b"class Layer:\n    def use_fusion(self):\n        def check():\n"
            b"            return _is_sm90_supported or _is_sm100_supported or _is_sm120_supported\n\n        return check\n"
        ),
        id="method, nested def",
    ),
    pytest.param(
        _module(FUSION, b"from pkg.utils import is_cuda, is_sm90_supported, is_sm100_supported\n"),
        _module(FUSION_NEW, b"from pkg.utils import is_cuda, is_sm90_supported, is_sm100_supported, is_sm120_supported\n", DEFS_NEW),
        id="one-line import",
    ),
    pytest.param(
        _module(FUSION, IMPORTS.replace(b"pkg.utils", b"..utils")),
        _module(FUSION_NEW, IMPORTS_NEW.replace(b"pkg.utils", b"..utils"), DEFS_NEW),
        id="relative import",
    ),
    pytest.param(
        _module(FUSION, defs=DEFS.replace(b"_is_sm100_supported =", b"_is_sm100_supported: bool =")),
        _module(
            FUSION_NEW, IMPORTS_NEW, DEFS_NEW.replace(b"_is_sm100_supported =", b"_is_sm100_supported: bool =").replace(
                b"_is_sm120_supported =", b"_is_sm120_supported: bool ="
            )
        ),
        id="annotated definition",
    ),
    pytest.param(
        _module(FUSION, defs=PLATFORM_DEFS),
        _module(FUSION_NEW, defs=PLATFORM_DEFS_NEW),
        id="helper reached as an attribute: nothing to import",
    ),
    pytest.param(
        _module(FUSION, IMPORTS_NEW, DEFS_NEW),
        _module(FUSION_NEW, IMPORTS_NEW, DEFS_NEW),
        id="new flag already defined: only the or-expression",
    ),
    pytest.param(
        _module(FUSION, IMPORTS_NEW),
        _module(FUSION_NEW, IMPORTS_NEW, DEFS_NEW),
        id="new helper already imported: no second import",
    ),
    pytest.param(
        _module(b"def use_fusion(n):\n    return (_is_sm90_supported or\n            _is_sm100_supported)\n"),
        _patched(b"def use_fusion(n):\n    return (_is_sm90_supported or\n            _is_sm100_supported or\n            _is_sm120_supported)\n"),
        id="or at the end of the line",
    ),
    pytest.param(
        _module(FUSION).replace(b"\n", b"\r\n"),
        _patched(FUSION_NEW).replace(b"\n", b"\r\n"),
        id="CRLF line endings",
    ),
    pytest.param(
        _module(FUSION) + b"\n\n# \\\n",
        _patched(FUSION_NEW) + b"\n\n# \\\n",
        id="last line a comment ending in a backslash keeps its newline",
    ),
]


@pytest.mark.parametrize(("before", "after"), REWRITES)
def test_rewrite(before: bytes, after: bytes) -> None:
    result = _rw(before)
    assert result.source == after
    assert result.changed
    assert PATCHED in {p.status for p in result.predicates}
    # Idempotent: a second run finds the new flag everywhere and changes nothing.
    again = _rw(result.source)
    assert again.source == after
    assert not again.changed
    assert {p.status for p in again.predicates} == {ALREADY_UPSTREAM}


def test_latin1_source() -> None:
    before = "# -*- coding: latin-1 -*-\n# Caf\u00e9\n".encode("latin-1") + _module(FUSION)
    assert _rw(before).source == before.replace(_module(FUSION), _patched(FUSION_NEW))


def test_other_spellings() -> None:
    before = b"from u import is_blackwell_dc\n\n_ok_dc = is_blackwell_dc()\n\n\ndef f():\n    return _ok_dc or x\n"
    after = (
        b"from u import is_blackwell_dc, is_blackwell_ws\n\n_ok_dc = is_blackwell_dc()\n_ok_ws = is_blackwell_ws()\n\n\n"
        b"def f():\n    return _ok_dc or _ok_ws or x\n"
    )
    assert _rw(before, "f", flag="_ok_dc", old="_dc", new="_ws").source == after


def test_reports_what_it_did() -> None:
    result = _rw(_module(FUSION))
    assert [p.to_json() for p in result.predicates] == [
        {
            "name": f"{FLAG} in use_fusion()",
            "scope": "def use_fusion",
            "status": PATCHED,
            "added_key": "_is_sm120_supported",
            "copied_from": FLAG,
            "value": "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
        }
    ]
    assert result.added == (
        "_is_sm120_supported = _is_cuda and is_sm120_supported()",
        "from pkg.utils import is_sm120_supported",
    )
    assert _rw(_module(FUSION, IMPORTS_NEW, DEFS_NEW)).added == ()


def test_the_helper_the_release_must_define() -> None:
    """The rewrite names the helper the new flag's definition calls that the module lacks
    (rules.py then checks that the release defines it)."""
    assert _rw(_module(FUSION)).helper == Helper("is_sm120_supported", "pkg.utils", "is_sm120_supported")
    relative = _module(FUSION, IMPORTS.replace(b"pkg.utils", b".utils"))
    assert _rw(relative).helper.module == ".utils"
    assert _rw(_module(FUSION, defs=PLATFORM_DEFS)).helper == Helper("is_sm120", None, "get_platform().is_sm120")
    assert _rw(_module(FUSION, IMPORTS_NEW)).helper is None
    assert _rw(_module(FUSION, IMPORTS_NEW, DEFS_NEW)).helper is None
    assert _rw(b"import os\n").helper is None


LEFT_ALONE = [
    pytest.param(_module(FUSION.replace(b"def use_fusion", b"def other")), id="another function"),
    pytest.param(_module(b"ENABLED = _is_sm90_supported or _is_sm100_supported\n"), id="module level"),
    pytest.param(_module(b"# def use_fusion(): _is_sm90_supported or _is_sm100_supported\n"), id="the function in a comment"),
    pytest.param(_module(b'DOC = "def use_fusion(): _is_sm90_supported or _is_sm100_supported"\n'), id="the function in a string"),
    pytest.param(_module(FUSION_NEW, IMPORTS_NEW, DEFS_NEW), id="already upstream"),
    pytest.param(_module(FUSION_NEW), id="already upstream, defined elsewhere"),
    pytest.param(
        _module(b"def use_fusion(n):\n    return _is_sm120_supported or _is_sm100_supported and n\n"),
        id="already upstream, the flag in an and",
    ),
]


@pytest.mark.parametrize("source", LEFT_ALONE)
def test_leaves_alone(source: bytes) -> None:
    result = _rw(source)
    assert result.source == source
    assert not result.changed
    assert result.added == ()


def test_already_upstream_is_reported() -> None:
    (predicate,) = _rw(_module(FUSION_NEW)).predicates
    assert (predicate.status, predicate.expression) == (ALREADY_UPSTREAM, "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)")


_DEFS = b"_is_sm100_supported = "
ERRORS = [  # (source, options, message after "pkg/mod.py: ")
    pytest.param(_module(b"def use_fusion(n):\n    return _is_sm100_supported and n > 0\n"), {},
                 "function use_fusion has no or-expression with _is_sm100_supported", id="the flag in no or-expression"),
    pytest.param(_module(b"def use_fusion(n):\n    return n\n"), {},
                 "function use_fusion has no or-expression with _is_sm100_supported", id="the flag not in the function"),
    pytest.param(_module(FUSION, defs=b"_is_cuda = is_cuda()\n"), {},
                 "_is_sm100_supported is not assigned at module level; patchkit copies its definition for _is_sm120_supported",
                 id="no definition to copy"),
    pytest.param(_module(FUSION, defs=_DEFS + b"get_device_sm() == 100\n"), {},
                 "the definition of _is_sm100_supported holds literals (100); "
                 "patchkit only copies definitions made of names and calls", id="definition with a literal"),
    pytest.param(_module(FUSION, defs=_DEFS + b"_is_cuda and is_blackwell()\n"), {},
                 "the definition of _is_sm100_supported must name one helper with 'sm100' (names: none)",
                 id="definition without a helper"),
    pytest.param(_module(FUSION, b"import pkg.utils as is_sm100_supported\n"), {},
                 "is_sm100_supported is not imported at module level by 'from ... import'; "
                 "patchkit imports is_sm120_supported next to it", id="helper not imported by from-import"),
    pytest.param(_module(FUSION, b"from pkg.utils import is_cuda, is_sm90_supported, is_sm100_supported, get_device_capability\n"),
                 {}, "the rewrite would make a line 111 columns wide, over black's 88: from pkg.utils import is_cuda, "
                 "is_sm90_supported, is_sm100_supported, is_sm120_supported, get_device_capability", id="a line black would re-wrap"),
    pytest.param(_module(b"def use_fusion(n):\n    return (_is_sm100_supported or\n"), {},
                 "cannot parse: line 14: '(' was never closed", id="syntax error"),
    pytest.param(_module(FUSION), {"flag": "_is_blackwell"}, "flag _is_blackwell does not contain 'sm100'",
                 id="a flag without the spelling"),
    pytest.param(_module(FUSION), {"new": "sm100"}, "the capability spellings are both 'sm100'", id="the same spelling twice"),
]


@pytest.mark.parametrize(("source", "options", "message"), ERRORS)
def test_errors(source: bytes, options: dict, message: str) -> None:
    with pytest.raises(RewriteError) as info:
        _rw(source, **options)
    assert str(info.value) == f"pkg/mod.py: {message}"
    assert info.value.exit_code == 3


@pytest.mark.parametrize(("before", "after"), REWRITES)
def test_black_clean_stays_black_clean(before: bytes, after: bytes) -> None:
    assert black_clean(after) or not black_clean(before)


def test_which_fixtures_are_black_clean() -> None:
    # Keeps the test above meaningful: it only speaks for black-clean originals.
    unclean = [p.id for p in REWRITES if not black_clean(p.values[0])]
    assert unclean == ["or at the end of the line"]


# --- real SGLang releases ------------------------------------------------------------

COMMUNICATOR = "sglang/srt/layers/communicator.py"
ADD_NORM = "sglang/srt/layers/layer_boundary/residual/add_norm.py"


def _binds(source: bytes, name: str) -> bool:
    """Does a module bind ``name`` at its top level (def, class or assignment)?"""
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def _strings(source: bytes) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _check_added(old: bytes, new: bytes, function: str, inserted: list[bytes]) -> None:
    """``new`` is ``old`` with the ``inserted`` lines (the helper's import, the definition
    of _is_sm120_supported right after _is_sm100_supported's) and _is_sm120_supported after
    _is_sm100_supported in the or-expression of ``function``, and nothing else; it compiles,
    and black passes it as it passed ``old``."""
    compile(new, "<new>", "exec")
    assert black_clean(old) and black_clean(new)
    tree = ast.parse(new)
    assigned = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)]
    assert assigned[assigned.index(FLAG) + 1] == "_is_sm120_supported"
    (found,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    ors = [[v.id for v in n.values if isinstance(v, ast.Name)] for n in ast.walk(found) if isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or)]
    assert ors == [["_is_sm90_supported", FLAG, "_is_sm120_supported"]]
    # Nothing else changed: lines inserted, one line gained the flag.
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    changes = [(old_lines[i1:i2], new_lines[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    assert [b for a, b in changes if not a] == [[line] for line in inserted]
    ((before, after),) = [(a, b) for a, b in changes if a]
    assert after == [before[0].replace(FLAG.encode(), FLAG.encode() + b" or _is_sm120_supported")]


@pytest.mark.network
def test_sglang_0_5_9_helper_imported() -> None:
    with zipfile.ZipFile(fetch_wheel("0.5.9", default_cache())) as wheel:
        old = wheel.read(COMMUNICATOR)
        # sglang.srt.utils re-exports all of sglang.srt.utils.common, which defines the new helper.
        assert b"from sglang.srt.utils.common import *" in wheel.read("sglang/srt/utils/__init__.py")
        exists = _binds(wheel.read("sglang/srt/utils/common.py"), "is_sm120_supported")
    assert exists

    function = "apply_flashinfer_allreduce_fusion"
    result = rewrite(old, function, FLAG, "sm100", "sm120", path=COMMUNICATOR)
    assert result.helper == Helper("is_sm120_supported", "sglang.srt.utils", "is_sm120_supported")
    assert [(p.function, p.status) for p in result.predicates] == [(function, PATCHED)]
    _check_added(
        old,
        result.source,
        function,
        [b"    is_sm120_supported,\n", b"_is_sm120_supported = _is_cuda and is_sm120_supported()\n"],
    )
    (utils,) = [n for n in ast.parse(result.source).body if isinstance(n, ast.ImportFrom) and n.module == "sglang.srt.utils"]
    imported = [a.name for a in utils.names]
    assert imported[imported.index("is_sm100_supported") + 1] == "is_sm120_supported"

    again = rewrite(result.source, function, FLAG, "sm100", "sm120", path=COMMUNICATOR)
    assert (again.source, again.changed) == (result.source, False)


@pytest.mark.network
def test_sglang_0_5_23_helper_reached_as_an_attribute() -> None:
    with zipfile.ZipFile(fetch_wheel("0.5.23", default_cache())) as wheel:
        old = wheel.read(ADD_NORM)
        # The platform's probes are named in sglang.srt.runtime_context.
        exists = "is_sm120" in _strings(wheel.read("sglang/srt/runtime_context.py"))
    assert exists

    function = "flashinfer_ar_fusion_applies"
    result = rewrite(old, function, FLAG, "sm100", "sm120", path=ADD_NORM)
    assert result.helper == Helper("is_sm120", None, "get_platform().is_sm120")
    assert [(p.function, p.status) for p in result.predicates] == [(function, PATCHED)]
    assert result.added == ("_is_sm120_supported = _is_cuda and get_platform().is_sm120",)
    _check_added(old, result.source, function, [b"_is_sm120_supported = _is_cuda and get_platform().is_sm120\n"])
