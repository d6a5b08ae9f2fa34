"""FlashInfer's own path arithmetic, read from a real flashinfer-python wheel and evaluated, never run.

``jit_library_path(version, env, home, archs, name)`` finds, in the release's jit/env.py, the assignments of
FLASHINFER_BASE_DIR, FLASHINFER_CACHE_DIR, FLASHINFER_WORKSPACE_DIR (through ``_get_workspace_dir_name``) and
FLASHINFER_JIT_DIR, and in jit/core.py the ``jit_library_path`` property, and evaluates those expressions
with a small evaluator that knows only the forms they use (names, attributes, calls, ``/``, f-strings, one
generator).  ``archs`` stands for ``CompilationContext().TARGET_CUDA_ARCHS``; ``os.getenv`` reads ``env``;
``pathlib.Path.home()`` is ``$HOME`` or ``home``.  A release that computed its paths in another way would fail to evaluate
here or give another path: the tests then disagree with patchkit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import PurePosixPath
from types import SimpleNamespace

from patchkit.versions import at_least

# FlashInfer's arch folder, as patchkit.targets.jit_builds's docstring says each release names it
# (the tests check those facts against each release's text; patchkit itself needs no arch: it
# looks in every arch folder).
_NORMALIZES_ARCHS = "0.6.7"
_KEEPS_SM12_MINOR = "0.6.8"


@cache
def wheel_text(version: str, member: str) -> str:
    """A file of the real flashinfer-python ``version`` wheel (from PyPI, cached: see support.mirror)."""
    from support.mirror import wheel_zip

    return wheel_zip(version, "flashinfer-python").read(member).decode("utf-8")


def function(source: str, name: str) -> ast.FunctionDef:
    """The one function called ``name`` in ``source``; for a method, the nvcc JitSpec's (``JitSpecNvcc`` from
    0.6.16, whose base class ``JitSpec`` declares abstract ones of the same names; ``JitSpec`` before)."""
    tree = ast.parse(source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    scope = classes.get("JitSpecNvcc") or classes.get("JitSpec")
    for top in ([scope] if scope is not None else []) + [tree]:
        found = [n for n in ast.walk(top) if isinstance(n, ast.FunctionDef) and n.name == name]
        if found:
            (one,) = found
            return one
    raise AssertionError(f"no function {name}")


class _Evaluator:
    def __init__(self, scope: dict) -> None:
        self.scope = scope

    def expr(self, node: ast.expr):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.scope[node.id]
        if isinstance(node, ast.Attribute):
            return getattr(self.expr(node.value), node.attr)
        if isinstance(node, ast.Call) and not node.keywords:
            return self.expr(node.func)(*[self.expr(a) for a in node.args])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self.expr(node.left) / self.expr(node.right)
        if isinstance(node, ast.JoinedStr):
            return "".join(str(self.expr(v.value)) if isinstance(v, ast.FormattedValue) else v.value for v in node.values)
        if isinstance(node, ast.GeneratorExp) and len(node.generators) == 1:
            (gen,) = node.generators
            names = [t.id for t in gen.target.elts] if isinstance(gen.target, ast.Tuple) else [gen.target.id]
            out = []
            for item in self.expr(gen.iter):
                inner = _Evaluator({**self.scope, **dict(zip(names, item if len(names) > 1 else [item], strict=True))})
                out.append(inner.expr(node.elt))
            return out
        raise AssertionError(f"FlashInfer computes a path with a form these tests do not know: {ast.unparse(node)}")

    def call(self, fn: ast.FunctionDef):
        """A function of assignments and one return, called with no arguments."""
        local = _Evaluator(dict(self.scope))
        for stmt in fn.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                local.scope[stmt.targets[0].id] = local.expr(stmt.value)
            elif isinstance(stmt, ast.Return):
                return local.expr(stmt.value)
            else:
                raise AssertionError(f"{fn.name} does more than these tests evaluate: {ast.unparse(stmt)}")
        raise AssertionError(f"{fn.name} returns nothing")


def jit_env(version: str, env: dict, home: str, archs: set) -> SimpleNamespace:
    """The FLASHINFER_*_DIR values of jit/env.py of ``version`` for a process with ``env``, ``home`` and ``archs``."""
    source = wheel_text(version, "flashinfer/jit/env.py")
    assert "from ..version import __version__ as flashinfer_version" in source
    scope = {
        "os": SimpleNamespace(getenv=lambda key, default=None: env.get(key, default)),
        # Path.home() is os.path.expanduser("~"): $HOME when the process has it.
        "pathlib": SimpleNamespace(Path=_PathType(PurePosixPath(env.get("HOME", home)))),
        "flashinfer_version": wheel_text(version, "flashinfer/_build_meta.py").split('__version__ = "')[1].split('"')[0],
        "CompilationContext": lambda: SimpleNamespace(TARGET_CUDA_ARCHS=set(archs)),
        "sorted": sorted,
    }
    evaluator = _Evaluator(scope)
    wanted = ("FLASHINFER_BASE_DIR", "FLASHINFER_CACHE_DIR", "FLASHINFER_WORKSPACE_DIR", "FLASHINFER_JIT_DIR")
    functions = {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    values = {}
    for node in ast.parse(source).body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in wanted:
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in functions:
                values[target.id] = evaluator.call(functions[value.func.id])
            else:
                values[target.id] = evaluator.expr(value)
            scope[target.id] = values[target.id]
    assert sorted(values) == sorted(wanted), f"{version}: jit/env.py assigns {sorted(values)}"
    return SimpleNamespace(**values)


class _PathType:
    """``pathlib.Path`` as env.py uses it: called on a string, and ``Path.home()``."""

    def __init__(self, home: PurePosixPath) -> None:
        self._home = home

    def __call__(self, text: str) -> PurePosixPath:
        return PurePosixPath(text)

    def home(self) -> PurePosixPath:
        return self._home


def jit_library_path(version: str, env: dict, home: str, archs: set, name: str) -> PurePosixPath:
    """``JitSpec(name).jit_library_path`` of ``version``'s jit/core.py (``JitSpecNvcc`` from 0.6.16)."""
    fn = function(wheel_text(version, "flashinfer/jit/core.py"), "jit_library_path")
    scope = {"jit_env": jit_env(version, env, home, archs), "self": SimpleNamespace(name=name)}
    return _Evaluator(scope).call(fn)


def _normalize(version: str, major: int, minor: int) -> tuple[int, str]:
    """compilation_context.py ``_normalize_cuda_arch`` (0.6.7+), with CUDA >= 12.9 (else FlashInfer cannot import)."""
    if major == 9:
        return major, f"{minor}a"
    if major == 12:
        return major, "0f" if minor == 0 or not at_least(version, _KEEPS_SM12_MINOR) else f"{minor}a"
    if major >= 10:
        return major, f"{minor}a"
    return major, str(minor)


def arch_folder(version: str, arch_list: str | None = None, gpus: Iterable[tuple[int, int]] = ()) -> str | None:
    """The arch folder FlashInfer ``version`` builds in: from ``FLASHINFER_CUDA_ARCH_LIST`` when given, else from the
    GPUs' compute capabilities.  None where that value makes FlashInfer fail at import (so nothing is built)."""
    normalizes = at_least(version, _NORMALIZES_ARCHS)
    archs: set[tuple[int, str]] = set()
    try:
        if arch_list is not None:
            for arch in arch_list.split(" "):
                major, minor = arch.split(".")
                if not normalizes or minor[-1].isalpha():
                    archs.add((int(major), minor))
                else:
                    archs.add(_normalize(version, int(major), int(minor)))
        else:
            for major, minor in gpus:
                if normalizes:
                    archs.add(_normalize(version, major, minor))
                else:
                    archs.add((major, f"{minor}a" if major >= 9 else str(minor)))
    except (ValueError, IndexError):
        return None
    return "_".join(f"{major}{minor}" for major, minor in sorted(archs))
