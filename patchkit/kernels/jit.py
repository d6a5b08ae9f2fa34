"""What the libraries that compile their kernels at the first start (JIT) are installed with: their
sources, as facts, and the compiler each would call, asked what it knows.  Nothing is imported,
nothing of theirs is run, and no compiler compiles anything: a compiler is asked ``--version`` and
``--help`` (bounded in time and bytes), whose "Allowed values for this option" list the targets
it knows.

- **FlashInfer** (``flashinfer/``): what ``CompilationContext`` builds for a GPU of compute
  capability 12.x is read from ``flashinfer/compilation_context.py``, matched against the four
  forms its releases have had (``FLASHINFER_FORMS``, each with the release it was read in); which
  of its JIT modules admit major 12 from the ``supported_major_versions=[...]`` lists its module
  generators pass to ``get_nvcc_flags_list`` (a module without one admits every major), each call
  owned by the function that holds it, or by the ``gen_*`` functions that call that helper.  Its
  compiler is nvcc, found as ``flashinfer/jit/cpp_ext.py``'s ``get_cuda_path`` finds it:
  ``$CUDA_HOME`` (or ``$CUDA_PATH``), else the nvcc on PATH, else ``/usr/local/cuda``.
- **DeepGEMM** (``deep_gemm/``, or the copy vLLM bundles in ``vllm/third_party/deep_gemm/``): its
  JIT compiles the kernel templates of ``include/deep_gemm/impls/sm<NN>_*.cuh`` for the GPU's
  major, and its APIs assert "Unsupported architecture" on a major with none (``csrc/apis/*.hpp``,
  compiled into ``_C``): the impls present say which majors it serves.  Compiler: nvcc, found as
  FlashInfer finds it.
- **Triton** (``triton/``): ``sm_arch_from_capability`` (``triton/backends/nvidia/compiler.py``)
  targets ``sm_<cc>a`` from 9.0 on; its PTX goes to ``ptxas``, ``$TRITON_PTXAS_PATH`` or the one
  bundled in ``triton/backends/nvidia/bin/``, and from Triton 3.6, for 10.0 and later (3.9: 9.0 and
  later), to ``ptxas-blackwell`` (``$TRITON_PTXAS_BLACKWELL_PATH`` or the bundled one): ``get_ptxas`` in
  ``compiler.py``, ``env_nvidia_tool`` in ``triton/knobs.py`` (read to 3.9.0).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from pathlib import Path

from patchkit.values import Record

FLASHINFER, DEEPGEMM, TRITON = "flashinfer", "deep-gemm", "triton"
ASK_SECONDS, ASK_BYTES = 10.0, 1 << 20  # one --version or --help
MAX_SOURCE = 4 << 20  # bytes of one source file read
MAX_SOURCES = 5000  # FlashInfer .py files read for their arch lists

# what a form builds for one cc: ((nvcc release or None, sm_ target), ...) best first, and the RuntimeError's message or None
Builds = tuple[tuple[tuple[str | None, str], ...], str | None]


class Form(Record):
    """One form of FlashInfer's ``CompilationContext``: the lines that tell it (whitespace collapsed),
    and per cc what it builds: the targets it picks, best first, each with the nvcc release it needs
    (None: any), and what it raises when nvcc is older than every one of them."""

    release: str  # where it was read
    marks: tuple[str, ...]
    targets: dict[tuple[int, int], Builds]  # cc -> (((nvcc release or None, sm_ target), ...), the RuntimeError's message or None)


_SM12X = "SM 12.x requires CUDA >= 12.9"

# flashinfer/compilation_context.py, as the flashinfer-python wheels have it (_normalize_cuda_arch from 0.6.7).
FLASHINFER_FORMS = (
    # 0.7.4: "if minor == 0: if is_cuda_version_at_least("12.9"): return (major, "0f") / if ..."12.8": return
    # (major, "0a") / raise RuntimeError("SM 120 requires CUDA >= 12.8")", then for 12.1+ "if ..."12.9": return
    # (major, str(minor) + "a") / raise RuntimeError("SM 12.1+ requires CUDA >= 12.9")" (0.7.1 to 0.7.3 not read).
    Form("0.7.4", ('elif major == 12:', 'if is_cuda_version_at_least("12.8"): return (major, "0a")',
                   'if is_cuda_version_at_least("12.9"): return (major, str(minor) + "a") raise RuntimeError('),
         {(12, 0): ((("12.9", "sm_120f"), ("12.8", "sm_120a")), "SM 120 requires CUDA >= 12.8"),
          (12, 1): ((("12.9", "sm_121a"),), "SM 12.1+ requires CUDA >= 12.9")}),
    # 0.6.8 to 0.7.0: "if is_cuda_version_at_least("12.9"): if minor == 0: return (major, "0f") else: return
    # (major, str(minor) + "a") else: raise RuntimeError("SM 12.x requires CUDA >= 12.9")".
    Form("0.6.11", ('elif major == 12:', 'if minor == 0: return (major, "0f") else: return (major, str(minor) + "a")'),
         {(12, 0): ((("12.9", "sm_120f"),), _SM12X), (12, 1): ((("12.9", "sm_121a"),), _SM12X)}),
    # 0.6.7: "SM 12.x -> always normalized to SM 120 with 'f' suffix", under is_cuda_version_at_least("12.9").
    Form("0.6.7", ('elif major == 12:', 'if is_cuda_version_at_least("12.9"): return (major, "0f") else: raise RuntimeError("SM 12.x'),
         {(12, 0): ((("12.9", "sm_120f"),), _SM12X), (12, 1): ((("12.9", "sm_120f"),), _SM12X)}),
    # 0.5.0 and 0.6.4: __init__: "if major >= 9: minor = str(minor) + "a"" for each GPU.
    Form("0.6.4", ('if major >= 9: minor = str(minor) + "a"',),
         {(12, 0): (((None, "sm_120a"),), None), (12, 1): (((None, "sm_121a"),), None)}),
)


class Compiler(Record):
    """The compiler a JIT library would call, and what it said of itself."""

    tool: str  # "nvcc", "ptxas", "ptxas-blackwell"
    path: str | None  # where it is, or was looked for (None: nowhere to look)
    chosen_by: str  # how it was found: "$CUDA_HOME", "PATH", "/usr/local/cuda", "$TRITON_PTXAS_PATH", "bundled"
    release: str | None  # "12.8", from --version
    targets: tuple[str, ...] | None  # the sm_ targets --help allows; None: not known
    problem: str | None  # why it could not be asked
    found: bool = True  # False: nothing at ``path``

    def knows(self, target: str) -> bool | None:
        return None if self.targets is None else target in self.targets


class FlashInferSources(Record):
    where: Path
    form: Form | None  # None: compilation_context.py in no form patchkit knows
    modules: int  # module generators that name their majors, or none (every major)
    refusing: tuple[str, ...]  # those whose list leaves 12 out (their function names)
    arch_list: str | None  # $FLASHINFER_CUDA_ARCH_LIST, which FlashInfer builds for instead of the GPUs


class DeepGemmSources(Record):
    where: Path  # the deep_gemm package folder
    impls: dict[int, tuple[str, ...]]  # major -> the impls/sm<NN>_*.cuh file names for it


class TritonSources(Record):
    where: Path
    blackwell: bool  # knobs.py has ptxas-blackwell (Triton 3.6+): used for 10.0 and later


class JitInstall(Record):
    """One JIT library found in site-packages: its distribution, its sources, its compiler(s)."""

    kind: str  # FLASHINFER, DEEPGEMM, TRITON
    distribution: str  # "flashinfer-python", "vllm" (DeepGEMM bundled in it)
    version: str
    sources: FlashInferSources | DeepGemmSources | TritonSources
    compilers: tuple[Compiler, ...]  # nvcc; Triton: ptxas, and ptxas-blackwell from 3.6


def _read(path: Path, holding: bytes = b"") -> str | None:
    """The text of a source file; None when it cannot be read, or does not hold the bytes ``holding``
    (looked for before the text is decoded: most of FlashInfer's 3,500 .py files do not hold them)."""
    from patchkit.bounded import read_file
    from patchkit.errors import BadInput

    try:
        data = read_file(path, MAX_SOURCE, "source file")
    except (BadInput, OSError):
        return None
    return data.decode("utf-8", "replace") if holding in data else None


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def _majors(node: ast.expr | None, constants: Mapping[str, ast.expr]) -> frozenset[int] | None:
    """The majors a ``supported_major_versions`` value lists: a literal, a module-level constant, or
    ``list(...)`` / ``tuple(...)`` of one; None for every major (None, or no value) or one not read."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple") and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Name):
        node = constants.get(node.id)
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return frozenset(value)
    return None


def _called_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def nvcc_flag_calls(source: str, name: str) -> list[tuple[tuple[str, ...], frozenset[int] | None]]:
    """Each ``get_nvcc_flags_list(...)`` call of a FlashInfer source file: the module generators it
    builds the flags of, and the majors its ``supported_major_versions`` lists (None: every major,
    or not read).  The owner is the function whose body holds the call; a helper (a function not
    named ``gen_*``) stands for the ``gen_*`` functions of the file that call it, directly or
    through other helpers, and is named itself, after the file, where none does
    (``cake_gemm_allreduce.nvcc_flags``); a call outside any function, by the file's ``name``.
    [] for a file Python cannot parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    constants = {t.id: node.value for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value
                 for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    callers: dict[str, set[str]] = {}  # function -> the functions of the file whose bodies call it
    found = []

    def walk(node: ast.AST, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            if isinstance(child, ast.Call):
                called = _called_name(child)
                if owner and called:
                    callers.setdefault(called, set()).add(owner)
                if called == "get_nvcc_flags_list":
                    value = next((k.value for k in child.keywords if k.arg == "supported_major_versions"),
                                 child.args[0] if child.args else None)
                    found.append((owner, _majors(value, constants)))
            walk(child, inner)

    walk(tree, None)

    def generators(helper: str) -> tuple[str, ...]:
        seen, todo, gens = {helper}, [helper], set()
        while todo:
            for caller in callers.get(todo.pop(), ()):
                if caller.startswith("gen_"):
                    gens.add(caller)
                elif caller not in seen:
                    seen.add(caller)
                    todo.append(caller)
        return tuple(sorted(gens)) or (f"{Path(name).stem}.{helper}",)

    return [((name,) if owner is None else (owner,) if owner.startswith("gen_") else generators(owner), majors)
            for owner, majors in found]


def flashinfer_sources(package: Path, env: Mapping[str, str]) -> FlashInferSources:
    text = _read(package / "compilation_context.py") or ""
    flat = _collapsed(text)
    form = next((f for f in FLASHINFER_FORMS if all(m in flat for m in f.marks)), None)
    owners: set[str] = set()
    refusing: set[str] = set()
    for path in sorted(package.rglob("*.py"))[:MAX_SOURCES]:
        source = _read(path, b"get_nvcc_flags_list(")
        if source is None:
            continue
        for names, majors in nvcc_flag_calls(source, path.name):
            owners.update(names)
            if majors is not None and 12 not in majors:
                refusing.update(names)
    return FlashInferSources(package, form, len(owners), tuple(sorted(refusing)), env.get("FLASHINFER_CUDA_ARCH_LIST"))


def deepgemm_sources(package: Path) -> DeepGemmSources:
    impls: dict[int, list[str]] = {}
    try:
        names = sorted(os.listdir(package / "include" / "deep_gemm" / "impls"))
    except OSError:
        names = []
    for name in names:
        found = re.fullmatch(r"sm(\d+)_\w+\.cuh", name)
        if found:
            impls.setdefault(int(found.group(1)) // 10, []).append(name)
    return DeepGemmSources(package, {major: tuple(v) for major, v in impls.items()})


def triton_sources(package: Path) -> TritonSources:
    return TritonSources(package, 'env_nvidia_tool("ptxas-blackwell")' in (_read(package / "knobs.py") or ""))


def allowed_targets(help_text: str, option: str) -> tuple[str, ...] | None:
    """The ``sm_`` values of ``option``'s "Allowed values for this option:" in a ``--help`` text
    (ptxas's ``--gpu-name``, nvcc's ``--gpu-architecture``); None when it has none."""
    lines = help_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(option + " ") or line == option), None)
    if start is None:
        return None
    block = []
    for line in lines[start + 1:]:
        if line.startswith("-") or not line.strip():
            break
        block.append(line)
    text = " ".join(block)
    at = text.find("Allowed values for this option:")
    if at < 0:
        return None
    return tuple(v for v in re.findall(r"'([^']+)'", text[at:]) if v.startswith("sm_"))


def ask(tool: str, path: str | None, chosen_by: str, option: str) -> Compiler:
    """``path --version`` and ``path --help``, each bounded: the release and the targets it knows."""
    from patchkit.bounded import run

    if path is None or not os.path.isfile(path):
        return Compiler(tool, path, chosen_by, None, None, "not found", found=False)
    answers = []
    for flag in ("--version", "--help"):
        try:
            done = run([path, flag], ASK_SECONDS, ASK_BYTES)
        except OSError as exc:
            return Compiler(tool, path, chosen_by, None, None, f"cannot run it ({exc.strerror or exc})")
        if done.stopped or done.returncode != 0:
            why = f"stopped: {done.stopped}" if done.stopped else f"exit {done.returncode}"
            return Compiler(tool, path, chosen_by, None, None, f"`{Path(path).name} {flag}` failed ({why})")
        answers.append((done.out + done.err).decode("utf-8", "replace"))
    release = re.search(r"release (\d+\.\d+)", answers[0])
    return Compiler(tool, path, chosen_by, release.group(1) if release else None, allowed_targets(answers[1], option), None)


def find_nvcc(env: Mapping[str, str]) -> tuple[str, str]:
    """The nvcc FlashInfer and DeepGEMM would call (``get_cuda_path``): $CUDA_HOME/bin/nvcc, the nvcc
    on PATH, /usr/local/cuda/bin/nvcc; (path, how it was found): the path looked at, there or not."""
    import shutil

    for key in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(key):
            return os.path.join(env[key], "bin", "nvcc"), f"${key}"
    found = shutil.which("nvcc", path=env.get("PATH", ""))
    if found:
        return found, "PATH"
    return "/usr/local/cuda/bin/nvcc", "/usr/local/cuda"


class NvccAt(Record):
    """Where the nvcc FlashInfer and DeepGEMM would call is (``find_nvcc``), and whether it is there."""

    path: str
    chosen_by: str  # "$CUDA_HOME", "$CUDA_PATH", "PATH", "/usr/local/cuda"
    found: bool


def nvcc_at(env: Mapping[str, str]) -> NvccAt:
    """The one lookup of nvcc: what the JIT section asks and what a fix that needs nvcc is judged by."""
    path, chosen_by = find_nvcc(env)
    return NvccAt(path, chosen_by, os.path.isfile(path))


def triton_ptxas(package: Path, tool: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The ptxas Triton would call: ``$TRITON_PTXAS_PATH`` (``$TRITON_PTXAS_BLACKWELL_PATH`` for
    ptxas-blackwell) when set, else the one bundled beside it (Triton falls back to that too)."""
    key = f"TRITON_{tool.upper().replace('-', '_')}_PATH"
    if env.get(key):
        return env[key], f"${key}"
    return str(package / "backends" / "nvidia" / "bin" / tool), "bundled with Triton"


def jit_installs(sites: list[Path], env: Mapping[str, str]) -> list[JitInstall]:
    """FlashInfer, DeepGEMM (its own or vLLM's copy) and Triton in ``sites`` (the first site that has
    a package wins, as on sys.path), each with the compilers it would call, asked."""
    from patchkit.targets.dist_info import installed_versions

    found: dict[str, JitInstall] = {}
    nvcc = None
    for site in sites:
        dists = installed_versions([site])

        def owner(*names: str, dists: dict[str, str] = dists) -> tuple[str, str]:
            return next(((n, dists[n]) for n in names if n in dists), (names[0], "?"))

        places = ((FLASHINFER, site / "flashinfer", ("flashinfer-python", "flashinfer"), "compilation_context.py"),
                  (DEEPGEMM, site / "deep_gemm", ("deep-gemm", "deep_gemm"), "include/deep_gemm/impls"),
                  (DEEPGEMM + " (vllm)", site / "vllm" / "third_party" / "deep_gemm", ("vllm",), "include/deep_gemm/impls"),
                  (TRITON, site / "triton", ("triton",), "backends/nvidia"))
        for key, package, names, mark in places:
            if key in found or not (package / mark).exists():
                continue
            name, version = owner(*names)
            sources: FlashInferSources | DeepGemmSources | TritonSources
            if key == TRITON:
                sources = triton_sources(package)
                tools = ("ptxas", "ptxas-blackwell") if sources.blackwell else ("ptxas",)
                compilers = tuple(ask(t, *triton_ptxas(package, t, env), "--gpu-name") for t in tools)
            else:
                if nvcc is None:
                    nvcc = ask("nvcc", *find_nvcc(env), "--gpu-architecture")
                compilers = (nvcc,)
                sources = flashinfer_sources(package, env) if key == FLASHINFER else deepgemm_sources(package)
            found[key] = JitInstall(key.split(" ")[0], name, version, sources, compilers)
    return [found[k] for k in sorted(found)]
