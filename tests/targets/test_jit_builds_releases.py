"""patchkit.targets.jit_builds against the real flashinfer-python releases (wheels from PyPI, cached).

Where FlashInfer puts a build is derived here from each release's own jit/env.py and jit/core.py text
(flashinfer_text.py evaluates their path expressions, nothing of FlashInfer runs); patchkit must find a
build at exactly that place.  The facts the module's docstring states per release are checked against
the release's text, at the releases where they change.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from flashinfer_text import arch_folder, function, jit_library_path, wheel_text

from patchkit.targets.jit_builds import CACHED, MODULE_GENERATORS, MODULE_SOURCES, WORKSPACE, find

pytestmark = pytest.mark.network  # FlashInfer's real wheels, fetched once into the cache

# The first and last releases of the range, one where build.ninja is kept, the first that rewrites it.
RELEASES = ("0.5.0", "0.6.4", "0.6.11", "0.6.11.post1", "0.6.16.post4")
# Printed by FlashInfer 0.6.4's own JIT on a real H200 with FLASHINFER_CUDA_ARCH_LIST=12.0a, HOME=/root
# (shared/fixtures/gpu-runs/h200-sglang-0.5.9-flashinfer-0.6.4.log: spec.get_library_path() after spec.build).
REAL_RUN = "/root/.cache/flashinfer/0.6.4/120a/cached_ops/trtllm_comm/trtllm_comm.so"

# (environment, TARGET_CUDA_ARCHS, FLASHINFER_CUDA_ARCH_LIST that gives them).  A suffixed arch is kept as
# written in every release (test_arch_list_parsing below checks the lines that do it).
CASES = [
    ({}, {(12, "0a")}, "12.0a"),
    ({"FLASHINFER_WORKSPACE_BASE": "{tmp}/scratch"}, {(9, "0a"), (12, "0a")}, "12.0a 9.0a"),
    ({"HOME": "{tmp}/server-home"}, {(10, "0a"), (8, "9")}, "10.0a 8.9"),
]


def test_the_real_runs_path_is_what_env_py_computes() -> None:
    assert str(jit_library_path("0.6.4", {}, "/root", {(12, "0a")}, "trtllm_comm")) == REAL_RUN


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("case", range(len(CASES)), ids=["home", "workspace-base", "HOME"])
def test_patchkit_finds_the_build_where_the_release_puts_it(tmp_path: Path, version: str, case: int) -> None:
    env_template, archs, arch_list = CASES[case]
    env = {k: v.format(tmp=tmp_path) for k, v in env_template.items()}
    home = tmp_path / "home"
    expected = Path(jit_library_path(version, env, str(home), archs, "trtllm_comm"))
    assert expected.is_relative_to(tmp_path)
    expected.parent.mkdir(parents=True)
    expected.write_bytes(b"\x7fELF so")
    other = Path(jit_library_path(version, env, str(home), archs, "norm"))
    other.parent.mkdir(parents=True)
    other.write_bytes(b"\x7fELF so")
    (build,) = find(version, [tmp_path / "site"], env, home, ["trtllm_comm"])
    assert (build.library, build.path, build.arch) == (expected, expected.parent, arch_folder(version, arch_list))
    assert build.kind == (WORKSPACE if "FLASHINFER_WORKSPACE_BASE" in env else CACHED)


def compilation_context(version: str) -> str:
    return wheel_text(version, "flashinfer/compilation_context.py")


def test_arch_list_parsing() -> None:
    """The lines that read FLASHINFER_CUDA_ARCH_LIST, the same in every release tested."""
    for version in ("0.5.0", "0.6.4", "0.6.7", "0.6.8", "0.6.16.post4"):
        text = compilation_context(version)
        assert 'for arch in os.environ["FLASHINFER_CUDA_ARCH_LIST"].split(" "):' in text
        assert 'major, minor = arch.split(".")' in text
        if version in ("0.5.0", "0.6.4"):
            assert "_normalize_cuda_arch" not in text and "self.TARGET_CUDA_ARCHS.add((int(major), str(minor)))" in text
        else:
            assert "if minor[-1].isalpha():" in text and "self._normalize_cuda_arch(major, int(minor))" in text


# (release, FLASHINFER_CUDA_ARCH_LIST or GPUs, arch folder, the lines of compilation_context.py that make it)
ARCHS = [
    ("0.6.4", "12.0", "120", "self.TARGET_CUDA_ARCHS.add((int(major), str(minor)))"),
    ("0.6.4", "12.0a", "120a", "self.TARGET_CUDA_ARCHS.add((int(major), str(minor)))"),
    ("0.6.4", "10.0a 8.9 9.0a", "89_90a_100a", "for major, minor in sorted(compilation_context.TARGET_CUDA_ARCHS)"),
    ("0.6.4", "12", None, 'major, minor = arch.split(".")'),  # ValueError at import
    ("0.6.4", [(12, 0)], "120a", 'if major >= 9:\n                        minor = str(minor) + "a"'),
    ("0.6.4", [(8, 9), (9, 0)], "89_90a", 'if major >= 9:\n                        minor = str(minor) + "a"'),
    ("0.6.7", "12.0", "120f", 'return (major, "0f")'),
    ("0.6.7", "12.1", "120f", 'return (major, "0f")'),
    ("0.6.7", "9.0 10.0", "90a_100a", 'return (major, str(minor) + "a")'),
    ("0.6.7", "12.0a", "120a", "if minor[-1].isalpha():"),
    ("0.6.7", [(12, 1)], "120f", "self.TARGET_CUDA_ARCHS.add(self._normalize_cuda_arch(major, minor))"),
    ("0.6.8", "12.1", "121a", "if minor == 0:\n                    return (major, \"0f\")\n                else:\n                    return (major, str(minor) + \"a\")"),
    ("0.6.8", "12.0", "120f", "if minor == 0:\n                    return (major, \"0f\")"),
    ("0.6.16.post4", "12.1 12.0", "120f_121a", "if minor == 0:\n                    return (major, \"0f\")"),
    ("0.6.16.post4", "8.6", "86", "return (major, str(minor))"),
    ("0.6.16.post4", "12.", None, "if minor[-1].isalpha():"),  # IndexError at import
]


@pytest.mark.parametrize("version, given, folder, lines", ARCHS)
def test_arch_folder(version: str, given, folder, lines: str) -> None:
    text = compilation_context(version) + wheel_text(version, "flashinfer/jit/env.py")
    assert lines in text
    if isinstance(given, str):
        assert arch_folder(version, given) == folder
    else:
        assert arch_folder(version, gpus=given) == folder
    if version == "0.6.7":
        assert "if minor == 0:" not in text


@pytest.mark.parametrize("version", ["0.5.0", "0.6.4", "0.6.11", "0.6.11.post1", "0.6.16.post4"])
def test_build_ninja_is_kept_until_0_6_11_post1(tmp_path: Path, version: str) -> None:
    build = function(wheel_text(version, "flashinfer/jit/core.py"), "build")
    writes = [n for n in ast.walk(build) if isinstance(n, ast.Call) and ast.unparse(n) == "self.write_ninja()"]
    guarded = [n for n in ast.walk(build) if isinstance(n, ast.If) and ast.unparse(n.test) == "not self.is_ninja_generated"
               and any(ast.unparse(b) == "self.write_ninja()" for b in n.body)]
    keeps = bool(guarded)
    assert len(writes) == 1 and keeps == (version in ("0.5.0", "0.6.4", "0.6.11"))
    assert "run_ninja(" in ast.unparse(build)  # ninja runs on every build: it decides what is rebuilt
    folder = tmp_path / ".cache" / "flashinfer" / version / "120a" / "cached_ops" / "trtllm_comm"
    folder.mkdir(parents=True)
    (built,) = find(version, [], {}, tmp_path, ["trtllm_comm"])
    assert ("keeps an existing build.ninja" in built.reason) == keeps


@pytest.mark.parametrize("version", RELEASES)
def test_a_prebuilt_module_is_loaded_first_and_nothing_turns_that_off(version: str) -> None:
    core = wheel_text(version, "flashinfer/jit/core.py")
    assert 'return jit_env.FLASHINFER_AOT_DIR / self.name / f"{self.name}.so"' in core
    assert "return self.aot_path.exists()" in ast.unparse(function(core, "is_aot"))
    loader = ast.unparse(function(core, "try_load" if "def try_load" in core else "build_and_load"))
    assert loader.index("if self.is_aot:") < loader.index("return self.load(self.aot_path)")
    env = wheel_text(version, "flashinfer/jit/env.py")
    aot_dir = function(env, "_get_aot_dir")
    assert "return pathlib.Path(flashinfer_jit_cache.get_jit_cache_dir())" in ast.unparse(aot_dir)
    assert "return _package_root / 'data' / 'aot'" in ast.unparse(aot_dir)
    read = {c.args[0].value for c in ast.walk(aot_dir) if isinstance(c, ast.Call) and c.args
            and isinstance(c.args[0], ast.Constant) and ast.unparse(c.func) in ("os.getenv", "os.environ.get")}
    assert read == {"FLASHINFER_DISABLE_VERSION_CHECK"}
    assert 'importlib.util.find_spec("flashinfer_jit_cache")' in env


@pytest.mark.parametrize("version", ["0.5.0", "0.6.4", "0.6.16.post4"])
def test_the_module_table_is_gen_trtllm_comm_modules_sources(version: str) -> None:
    comm = function(wheel_text(version, "flashinfer/jit/comm.py"), "gen_trtllm_comm_module")
    sources = {f"csrc/{n.right.value}" for n in ast.walk(comm) if isinstance(n, ast.BinOp)
               and ast.unparse(n.left) == "jit_env.FLASHINFER_CSRC_DIR"}
    table = MODULE_SOURCES["trtllm_comm"]
    assert sources == {s for s in table if s.startswith("csrc/")} and len(sources) == 3
    headers = set()
    for source in sorted(sources):
        text = wheel_text(version, f"flashinfer/data/{source}")
        headers |= {f"include/{h}" for h in re.findall(r'^#include "(flashinfer/comm/[^"]+)"', text, re.MULTILINE)}
    for header in sorted(headers):
        assert '#include "../utils.cuh"' in wheel_text(version, f"flashinfer/data/{header}")
    assert headers | sources | {"include/flashinfer/utils.cuh"} == set(table)
    assert 'gen_jit_spec(\n        "trtllm_comm",' in wheel_text(version, "flashinfer/jit/comm.py")
    assert MODULE_GENERATORS["trtllm_comm"] == "flashinfer/jit/comm.py"


def test_no_release_reads_a_flashinfer_jit_dir_variable() -> None:
    for version in RELEASES:
        for member in ("flashinfer/jit/env.py", "flashinfer/jit/core.py", "flashinfer/jit/cpp_ext.py"):
            text = wheel_text(version, member)
            assert '"FLASHINFER_JIT_DIR"' not in text and "'FLASHINFER_JIT_DIR'" not in text, (version, member)
        assert 'os.getenv("FLASHINFER_WORKSPACE_BASE", pathlib.Path.home().as_posix())' in wheel_text(version, "flashinfer/jit/env.py")
