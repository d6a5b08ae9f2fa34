"""Which extension modules a release imports, read from its own Python files: nothing of it is
imported or run; each file is read bounded (``kernels/jit.py``'s reader) and parsed with ``ast``.

- ``start_imports``: what a server imports at every start, from the module and method that
  ``known-kernels.toml`` names for it (vLLM: ``vllm/platforms/cuda.py``, whose module-level
  imports run when vLLM picks its CUDA platform, and ``CudaPlatform.import_kernels``, which
  ``vllm/_custom_ops.py`` calls when it is imported).  Module level means every statement that
  runs on import (inside ``if``, ``try`` and ``with`` too, ``if TYPE_CHECKING:`` aside); the
  method is followed through the class's bases where the class does not define it or calls
  ``super()``'s, and through a name bound to one of two classes (``CudaPlatform = Nvml... if
  nvml_available else NonNvml...``: both).
- ``importers``: the files of a package that import one module anywhere (a feature's module,
  imported where the feature is used).

A dotted name is a candidate for an extension module: ``import vllm._C``, ``from vllm import _C``
and, in ``vllm/vllm_flash_attn/``, ``from . import _vllm_fa2_C`` all name ``vllm._C`` /
``vllm.vllm_flash_attn._vllm_fa2_C``; the caller keeps those that a shared object of the
distribution provides (``module_of``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

from patchkit.values import Record

MAX_FILES = 20000  # .py files of one package looked at for ``importers``
MAX_DEPTH = 8  # classes followed through their bases


class StartImports(Record):
    modules: dict[str, str]  # dotted name -> where it is imported ("vllm/platforms/cuda.py:23"), first place
    read: tuple[str, ...]  # the files read, relative to site-packages
    problem: str | None  # why the start could not be read: then nothing is known


def module_of(rel: str) -> str:
    """The dotted module a shared object provides: ``vllm/_C.abi3.so`` -> ``vllm._C``."""
    parts = rel.split("/")
    return ".".join(parts[:-1] + [parts[-1].split(".")[0]])


def _parse(site: Path, rel: str) -> ast.Module | None:
    from patchkit.kernels.jit import _read

    text = _read(site / rel)
    if text is None:
        return None
    try:
        return ast.parse(text, rel)
    except (SyntaxError, ValueError):
        return None


def _package(rel: str) -> str:
    """The package a file's relative imports start from: ``vllm/platforms/cuda.py`` -> ``vllm.platforms``."""
    parts = rel.split("/")
    return ".".join(parts[:-1])


def _names(node: ast.stmt, package: str) -> list[str]:
    """The dotted names an import statement may load, as modules."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        up = package.split(".")
        up = up[:len(up) - (node.level - 1)] if node.level > 1 else up
        base = ".".join(p for p in (*up, base) if p)
    return [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]


def _type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module body that run when it is imported (not inside a def or class)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or _type_checking(node):
            continue
        yield node
        for field in ("body", "orelse", "finalbody"):
            yield from _module_level(getattr(node, field, []) or [])
        for handler in getattr(node, "handlers", []) or []:
            yield from _module_level(handler.body)


def _found(nodes: Iterable[ast.stmt], rel: str, into: dict[str, str]) -> None:
    package = _package(rel)
    for node in nodes:
        for name in _names(node, package):
            into.setdefault(name, f"{rel}:{node.lineno}")


def _file_of(site: Path, dotted: str) -> str | None:
    rel = dotted.replace(".", "/")
    for candidate in (f"{rel}.py", f"{rel}/__init__.py"):
        if (site / candidate).is_file():
            return candidate
    return None


def _classes(tree: ast.Module, name: str) -> list[ast.ClassDef]:
    """The top-level classes ``name`` is: a class statement, or a name bound to one or two of them."""
    top = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if name in top:
        return [top[name]]
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            return [top[o.id] for o in options if isinstance(o, ast.Name) and o.id in top]
    return []


def _imported_from(tree: ast.Module, rel: str, name: str) -> str | None:
    """The module a top-level ``from X import name`` of ``rel`` takes ``name`` from."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return _names(node, _package(rel))[0]
    return None


def _method(site: Path, rel: str, tree: ast.Module, cls: str, method: str, into: dict[str, str], read: list[str], depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        return
    for node in _classes(tree, cls):
        defined = next((n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == method), None)
        if defined is not None:
            _found((n for n in ast.walk(defined) if isinstance(n, (ast.Import, ast.ImportFrom))), rel, into)
            calls_super = any(isinstance(n, ast.Attribute) and n.attr == method and isinstance(n.value, ast.Call)
                              and isinstance(n.value.func, ast.Name) and n.value.func.id == "super" for n in ast.walk(defined))
            if not calls_super:
                continue
        for base in node.bases:
            if not isinstance(base, ast.Name):
                continue
            if _classes(tree, base.id):
                _method(site, rel, tree, base.id, method, into, read, depth + 1)
                continue
            source = _imported_from(tree, rel, base.id)
            other = _file_of(site, source) if source else None
            parsed = _parse(site, other) if other is not None else None
            if other is not None and parsed is not None:
                read.append(other)
                _method(site, other, parsed, base.id, method, into, read, depth + 1)


def start_imports(site: Path, module: str, method: str | None) -> StartImports:
    """What importing ``module`` (a file relative to ``site``) and calling ``method`` ("Class.name",
    a method of a class of that module) import."""
    tree = _parse(site, module)
    if tree is None:
        return StartImports({}, (module,), f"{site / module}: cannot read or parse it")
    into: dict[str, str] = {}
    read = [module]
    _found(_module_level(tree.body), module, into)
    if method:
        cls, _, name = method.partition(".")
        if not _classes(tree, cls):
            return StartImports({}, tuple(read), f"{site / module}: no class {cls}")
        _method(site, module, tree, cls, name, into, read)
    return StartImports(into, tuple(dict.fromkeys(read)), None)


def importers(site: Path, dotted: str) -> tuple[str, ...]:
    """The files of ``dotted``'s top-level package (relative to ``site``) that import it, sorted."""
    from patchkit.kernels.jit import _read

    top, last = dotted.split(".")[0], dotted.rsplit(".", 1)[-1]
    found = []
    for path in sorted((site / top).rglob("*.py"))[:MAX_FILES]:
        text = _read(path)
        if not text or last not in text:
            continue
        rel = path.relative_to(site).as_posix()
        try:
            tree = ast.parse(text, rel)
        except (SyntaxError, ValueError):
            continue
        if any(dotted in _names(n, _package(rel)) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))):
            found.append(rel)
    return tuple(found)
