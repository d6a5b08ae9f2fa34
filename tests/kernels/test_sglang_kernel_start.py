"""What SGLang loads of sglang-kernel at every start, as known-kernels.toml says it, checked against the real
sglang-kernel 0.4.10 and sglang 0.5.23 wheels (read as zip files and parsed with ``ast``, never installed or
imported): ``import sgl_kernel`` loads common_ops (sgl_kernel/load_utils.py) and, through every module it
imports at module level, none of the modules marked ``at_start = false``; SGLang imports those only inside
functions (a feature).  doctor once failed every 12.0 machine over flash_ops.abi3.so (FA3), which only
``--attention-backend fa3`` loads."""

from __future__ import annotations

import ast
import shutil
import zipfile
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.fixes.kernels import KERNELS, known_kernels, read_kernels
from patchkit.fixes.load import HERE

SGLANG_KERNEL = known_kernels().of("sglang-kernel")
FEATURES = [f for f in SGLANG_KERNEL.files if not f.at_start]


def wheel(distribution: str, version: str) -> zipfile.ZipFile:
    from support.mirror import wheel_zip

    return wheel_zip(version, distribution)


def module_level_imports(tree: ast.Module, package: str) -> set[str]:
    """Every module an import statement that runs on import names (in ``if``, ``try`` and ``with`` too):
    ``from a import b`` names ``a`` and ``a.b``."""
    found: set[str] = set()

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
            for field in ("body", "orelse", "finalbody"):
                if isinstance(node, (ast.If, ast.Try, ast.With)):
                    walk(getattr(node, field, []))
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    walk(handler.body)

    walk(tree.body)
    return found


def loaded_by_import(whl: zipfile.ZipFile, start: str) -> set[str]:
    """The modules of the wheel that ``import start`` imports, followed through each one's module-level imports."""
    names = set(whl.namelist())
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        path = module.replace(".", "/")
        file = next((p for p in (f"{path}.py", f"{path}/__init__.py") if p in names), None)
        if module in seen or file is None:
            continue
        seen.add(module)
        package = module if file.endswith("__init__.py") else module.rpartition(".")[0]
        todo += [m for m in module_level_imports(ast.parse(whl.read(file)), package) if m.split(".")[0] == start]
    return seen


@pytest.mark.network
def test_import_sgl_kernel_loads_none_of_the_features_modules() -> None:
    assert {f.glob for f in FEATURES} == {"sgl_kernel/flash_ops.*", "sgl_kernel/flashmla_ops.*", "sgl_kernel/spatial_ops.*",
                                          "sgl_kernel/infllm_ops*"}
    whl = wheel("sglang-kernel", "0.4.10")
    shared = [n for n in whl.namelist() if n.endswith(".so")]
    loaded = loaded_by_import(whl, "sgl_kernel")
    load_utils = whl.read("sgl_kernel/load_utils.py").decode()
    assert "sgl_kernel.load_utils" in loaded and "sgl_kernel.flash_attn" not in loaded
    # The start loads common_ops by its path, for the GPU's architecture (sm90/ on 9.0, sm100/ on the others).
    assert 'ops_subdir = "sm90"' in load_utils and 'ops_subdir = "sm100"' in load_utils
    assert 'ops_pattern = str(sgl_kernel_dir / ops_subdir / "common_ops.*")' in load_utils
    for f in FEATURES:
        (so,) = [n for n in shared if fnmatchcase(n, f.glob)]  # a real file of the wheel
        module = so.split(".")[0].replace("/", ".")
        assert module not in loaded, so
    at_start = [n for n in shared if SGLANG_KERNEL.file(n) is None or SGLANG_KERNEL.file(n).at_start]
    assert at_start == ["sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/sm90/common_ops.abi3.so"]


@pytest.mark.network
def test_sglang_0523_imports_fa3_of_sgl_kernel_inside_functions_only_on_cuda() -> None:
    """Every module-level import of sgl_kernel.flash_attn (which imports flash_ops) in SGLang 0.5.23 is under
    an XPU branch or in an XPU backend's file; the FA3 backend and the others import it inside functions."""
    whl = wheel("sglang", "0.5.23")
    for name in whl.namelist():
        if not name.endswith(".py"):
            continue
        text = whl.read(name)
        if b"sgl_kernel.flash_attn" not in text and b"sgl_kernel import flash_ops" not in text:
            continue
        for branch in fa3_imports_on_import(ast.parse(text).body, None):
            # at the top of an XPU backend's own file, or in an `if _is_xpu:` (`elif _is_xpu:`) branch
            assert branch == "_is_xpu" or branch is None and name.endswith("/attention/backends/xpu_backend.py") or \
                branch is None and name == "sglang/srt/layers/attention/xpu_backend.py", name


def fa3_imports_on_import(body: list[ast.stmt], branch: str | None) -> list[str | None]:
    """For each import of sgl_kernel.flash_attn that runs on import, the test of the ``if`` branch it is in."""
    found: list[str | None] = []
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module == "sgl_kernel.flash_attn":
            found.append(branch)
        elif isinstance(node, ast.If):
            found += fa3_imports_on_import(node.body, ast.unparse(node.test))
            found += fa3_imports_on_import(node.orelse, f"not {ast.unparse(node.test)}")
        elif isinstance(node, (ast.Try, ast.With)):
            found += fa3_imports_on_import(node.body, branch)
    return found


def test_at_start_is_for_a_distribution_loaded_always(tmp_path: Path) -> None:
    good = (HERE / KERNELS).read_text()
    old = 'glob = "vllm/_moe_C*"\n'
    assert old in good
    (tmp_path / KERNELS).write_text(good.replace(old, old + "at_start = false\n"))
    with pytest.raises(BadInput) as exc:
        read_kernels(tmp_path / KERNELS)
    assert str(exc.value).endswith("(vllm), file 4: 'at_start' is for a file of a distribution loaded 'always'")
    (tmp_path / KERNELS).write_text(good.replace('at_start = false\n', 'at_start = "no"\n', 1))
    with pytest.raises(BadInput) as exc:
        read_kernels(tmp_path / KERNELS)
    assert str(exc.value).endswith("(sglang-kernel), file 3: 'at_start' is missing or not bool")
    shutil.copy(HERE / KERNELS, tmp_path / "same.toml")
    assert read_kernels(tmp_path / "same.toml") == known_kernels()
