"""The failure modes patchkit knows (``modes/*.toml`` beside this module): one record per way a
serving stack breaks on SM12x, read into one type, ``Mode``.  docs/FAILURE-MODES.md says what
each field means and lists every mode (generated from these files).

A mode holds what users see (``signs``: the texts, and the project whose frame or log line
carries each), what it costs (``Cost``: silent wrong output first), the GPUs and the conditions
(``Condition``) it needs, the releases of each project that are exposed (``Exposure``: each
bound with the released files that prove it, or the thread it is quoted from), the ways out in
order (``WayOut``: a patch patchkit carries, the smallest upgrade, a setting of
known-settings.toml, another backend), caveats and sources.  Data only: doctor, diagnose and
watch judge from it.  A wrong file is one BadInput line naming the file and the key.
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.fixes.load import FOLDERS, _read, data_files
from patchkit.types import StrEnum

_E = TypeVar("_E", bound=StrEnum)
from patchkit.values import Value
from patchkit.versions import at_least, is_version, version_key

FOLDER = FOLDERS[1]
_MAX_FILES = 200  # modes are a few dozen: a folder of thousands is not patchkit's data


class Cost(StrEnum):
    """What a mode does to a user, worst first (``rank``: 1 is the worst)."""

    SILENT_WRONG = "silent-wrong"  # the server runs and answers wrongly, saying nothing
    CRASH = "crash"  # the server stops with an error
    HANG = "hang"  # the server stops moving and prints nothing
    SLOWDOWN = "slowdown"  # the server runs, slower than the GPU allows

    @property
    def rank(self) -> int:
        return list(Cost).index(self) + 1


class Condition(StrEnum):
    """What else a mode needs beyond the GPU and the releases: a feature, a model family, a setup.
    A mode with none happens to every server of an exposed release on the GPU."""

    FP4_MOE = "fp4-moe"  # an NVFP4/MXFP4 mixture-of-experts model
    FP4_GEMM = "fp4-gemm"  # NVFP4 dense layers
    FP8_MOE = "fp8-moe"  # an FP8 (block or tensor scaled) mixture-of-experts model
    FP8_GEMM = "fp8-gemm"  # FP8 dense layers (DeepGEMM's paths)
    MXFP4 = "mxfp4"  # an MXFP4 model (gpt-oss)
    FP8_KV = "fp8-kv-cache"  # --kv-cache-dtype fp8
    SPARSE_MLA = "sparse-mla"  # DeepSeek-V3.2/V4 or GLM-5.x sparse attention (DSA)
    MLA = "mla"  # multi-head latent attention (DeepSeek, Kimi, GLM)
    HEAD_DIM_512 = "head-dim-512"  # attention heads of 512 (Gemma 4)
    TENSOR_PARALLEL = "tensor-parallel"  # more than one GPU of one machine
    MULTI_NODE = "multi-node"  # more than one machine
    SAMPLER = "flashinfer-sampler"  # FlashInfer's top-k/top-p sampler
    AUTOTUNE = "flashinfer-autotune"  # FlashInfer's autotuner at start
    JIT = "jit-build"  # kernels compiled at run time with a local CUDA toolkit
    SOURCE_BUILD = "source-build"  # the project built from source for the GPU
    DEEPGEMM_OFF = "deepgemm-off"  # DeepGEMM turned off by a setting
    CUSTOM_ALL_REDUCE = "custom-all-reduce"  # vLLM's custom all-reduce at graph capture
    FLASHINFER_ATTENTION = "flashinfer-attention"  # attention through FlashInfer's kernels (asked for, or the default)
    TRTLLM_ATTENTION = "trtllm-attention"  # attention routed to FlashInfer's TRT-LLM-gen kernels (asked for, or chosen)
    ALLREDUCE_FUSION = "allreduce-fusion"  # FlashInfer's all-reduce fusion (--enable-flashinfer-allreduce-fusion)


class Phase(StrEnum):
    """How far a server's start got, as its log shows it (``logs/phases.py`` reads them): where a
    mode that hangs stops moving (``hangs_in``), so that watch can name it when its time is up."""

    DISTRIBUTED = "torch distributed"  # NCCL's init and the first collectives
    LOADING = "loading weights"
    LOADED = "weights loaded"
    KV_CACHE = "KV cache allocated"
    GRAPH_CAPTURE = "CUDA graph capture"
    CAPTURED = "CUDA graph captured"  # then the warm-up request, and the autotuner where it runs


class WayKind(StrEnum):
    """A way out, in the order patchkit offers them."""

    PATCH = "patch"  # a fix patchkit carries (fixes/<name>.toml)
    UPGRADE = "upgrade"  # the smallest upgrade that holds the upstream fix
    SETTING = "setting"  # a setting of known-settings.toml the installed release has
    BACKEND = "backend"  # another backend, as the release spells it


class Proven(Enum):
    """Where a fact comes from: read in the released files, or quoted from a thread."""

    FILES = "files"
    QUOTED = "quoted"


class Sign(Value):
    """A text users see: a traceback's last line (``exception``) or a line a tool prints by itself (``log``)."""

    text: str
    in_exception: bool  # True: text of a traceback's last line; False: text of any log line
    project: str  # the project whose frame or line carries it
    frames: tuple[str, ...]  # a frame in one of these folders (a package, or a folder path inside one) must be in the traceback (empty: any)
    thread: str  # where it was seen ("vllm#54225")


class Proof(Value):
    """A released file that holds (or lacks) a text: what a bound rests on."""

    distribution: str  # the distribution on the index ("flashinfer-python")
    release: str
    file: str  # the path inside the wheel
    text: str
    holds: bool  # True: the file holds the text; False: it lacks it
    sdist: bool = False  # the file is in the source archive (vLLM's csrc/, flash-attn's setup.py), not the wheel
    machine: str = ""  # the wheel built for this machine ("aarch64": what a GB10 installs); "": CPython 3.11's x86_64 one


class Exposure(Value):
    """The releases of one project exposed to a mode: ``since`` <= release < ``fixed_in``."""

    project: str  # the installed distribution whose release decides it
    since: str | None  # the first exposed release (None: every release before fixed_in)
    fixed_in: str | None  # the first release with the upstream fix (None: none yet)
    read_to: str  # the newest release read: what is newer is not judged
    proofs: tuple[Proof, ...]
    quoted: str  # where a bound not proven by the files comes from ("" when every bound is)
    when: tuple[Condition, ...] | None = None  # this feature's conditions (None: the mode's)
    gpus: tuple[CC, ...] | None = None  # the GPUs these releases fail on (None: the mode's)
    # The compiled file whose code decides it, as the release installs it (the first of these paths that is
    # there): exposed on a GPU only where that file carries no code that runs on it.  A release's wheels
    # differ by machine (sglang-kernel 0.4.10's x86_64 common ops have sm_120a, its aarch64 ones, a GB10's,
    # sm_121a too).  () : the release decides alone.
    code_in: tuple[str, ...] = ()

    def covers(self, version: str) -> bool:
        """Whether ``version`` is exposed (a release newer than ``read_to`` is not judged here: ``read``)."""
        return (self.since is None or at_least(version, self.since)) and \
            (self.fixed_in is None or not at_least(version, self.fixed_in))

    def read(self, version: str) -> bool:
        """Whether the data reaches ``version``: a release newer than ``read_to`` was not read (its own
        files say whether it holds the fix: ``fix_marks``)."""
        return not at_least(version, _next(self.read_to))

    def fix_marks(self) -> tuple[Proof, ...]:
        """The texts of the fix as the newest fixed release read holds them: a newer release is judged by
        finding them in its files."""
        fixed = [p for p in self.proofs if p.holds and self.fixed_in is not None and at_least(p.release, self.fixed_in)]
        newest = max((p.release for p in fixed), key=version_key, default=None)
        return tuple(p for p in fixed if p.release == newest)

    @property
    def proven(self) -> Proven:
        return Proven.QUOTED if self.quoted or not self.proofs else Proven.FILES


class WayOut(Value):
    kind: WayKind
    project: str  # the project whose release decides whether it applies
    since: str | None  # the releases it applies to
    before: str | None
    what: str  # the fix's name (patch), the release to upgrade to (upgrade), the setting's name, the backend as spelled
    says: str  # what it does, in a few words
    caveat: str  # what it breaks or does not cure ("" when nothing is known)
    proofs: tuple[Proof, ...]  # the flag, variable or fix in the released files

    def fits(self, version: str) -> bool:
        return (self.since is None or at_least(version, self.since)) and (self.before is None or not at_least(version, self.before))


class Mode(Value):
    name: str
    survey: int  # its number in the 2026-09 survey of upstream threads
    title: str
    cost: Cost
    costs: tuple[Cost, ...]  # every cost it is reported with, the worst first
    gpus: tuple[CC, ...]
    when: tuple[Condition, ...]  # what else it needs (empty: any server on an exposed release)
    reports: int  # distinct public reports read
    sources: tuple[str, ...]
    signs: tuple[Sign, ...]
    exposed: tuple[Exposure, ...]
    ways_out: tuple[WayOut, ...]
    caveats: tuple[str, ...]
    path: Path
    hangs_in: tuple[Phase, ...] = ()  # a hang: the phases of the start it stops in


def _next(version: str) -> str:
    """The smallest release after ``version`` that a reader of ``version`` has not read: its next post-release."""
    return f"{version}.post9999" if ".post" not in version else version.rpartition(".post")[0] + ".post9999"


# -- reading ----------------------------------------------------------------------------------

class _Doc:
    """One table of a mode's file, with the file and the place named in every error."""

    def __init__(self, doc: object, path: Path, what: str) -> None:
        if not isinstance(doc, dict):
            raise BadInput(str(path), f"{what}: not a table")
        self.doc, self.path, self.what = doc, path, what

    def bad(self, message: str) -> BadInput:
        return BadInput(str(self.path), f"{self.what}: {message}")

    def text(self, key: str, default: str | None = None) -> str:
        value = self.doc.get(key, default)
        if not isinstance(value, str) or not value.strip():
            raise self.bad(f"{key!r} is missing or not a string")
        return value

    def optional(self, key: str) -> str | None:
        return self.text(key) if key in self.doc else None

    def version(self, key: str) -> str | None:
        value = self.optional(key)
        if value is not None and not is_version(value):
            raise self.bad(f"{key!r}: {value!r} is not a release version")
        return value

    def strings(self, key: str, required: bool = True) -> tuple[str, ...]:
        value = self.doc.get(key, None if required else [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value) or required and not value:
            raise self.bad(f"{key!r} must be a list of strings")
        return tuple(value)

    def number(self, key: str) -> int:
        value = self.doc.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.bad(f"{key!r} is missing or not a number")
        return value

    def tables(self, key: str, required: bool = True) -> list[_Doc]:
        value = self.doc.get(key, None if required else [])
        if not isinstance(value, list) or required and not value:
            raise self.bad(f"{key!r} must be an array of tables ([[{key}]])")
        return [_Doc(v, self.path, f"{self.what}, {key} {i}") for i, v in enumerate(value, 1)]

    def enum(self, key: str, kind: type[_E], value: str | None = None) -> _E:
        value = self.text(key) if value is None else value
        try:
            return kind(value)
        except ValueError:
            raise self.bad(f"{key!r}: {value!r} is not one of {', '.join(k.value for k in kind)}") from None


def _proof(doc: _Doc, project: str) -> Proof:
    holds, lacks = doc.optional("holds"), doc.optional("lacks")
    if (holds is None) == (lacks is None):
        raise doc.bad("a proof names 'holds' or 'lacks', one of them")
    release = doc.version("release")
    if release is None:
        raise doc.bad("'release' is missing")
    archive = doc.optional("archive") or "wheel"
    if archive not in ("wheel", "sdist"):
        raise doc.bad(f"'archive': {archive!r} is not one of wheel, sdist")
    machine = doc.optional("machine") or ""
    if machine not in ("", "aarch64", "x86_64") or machine and archive == "sdist":
        raise doc.bad(f"'machine': {machine!r} is not aarch64 or x86_64 (a wheel's machine)")
    return Proof(doc.text("distribution", project), release, doc.text("file"), holds or lacks or "", holds is not None,
                 archive == "sdist", machine)


def _sign(doc: _Doc) -> Sign:
    exception, log = doc.optional("exception"), doc.optional("log")
    if (exception is None) == (log is None):
        raise doc.bad("a sign names 'exception' or 'log', one of them")
    return Sign(exception or log or "", exception is not None, doc.text("project"), doc.strings("frames", required=False),
                doc.text("thread"))


def _gpus(doc: _Doc) -> tuple[CC, ...]:
    try:
        return tuple(CC.parse(g) for g in doc.strings("gpus"))
    except ValueError as exc:
        raise doc.bad(f"'gpus': {exc}") from None


def _exposure(doc: _Doc) -> Exposure:
    project = doc.text("project")
    proofs = tuple(_proof(p, project) for p in doc.tables("proofs", required=False))
    when = tuple(doc.enum("when", Condition, c) for c in doc.strings("when", required=False)) if "when" in doc.doc else None
    exposure = Exposure(project, doc.version("since"), doc.version("fixed_in"), doc.version("read_to") or "",
                        proofs, doc.optional("quoted") or "", when, _gpus(doc) if "gpus" in doc.doc else None,
                        doc.strings("code_in", required=False))
    if not exposure.read_to:
        raise doc.bad("'read_to' is missing: the newest release read")
    if not proofs and not exposure.quoted:
        raise doc.bad("a bound is proven by 'proofs' from the released files or 'quoted' from a thread")
    return exposure


def _way(doc: _Doc) -> WayOut:
    project = doc.text("project")
    return WayOut(doc.enum("kind", WayKind), project, doc.version("since"), doc.version("before"), doc.text("what"),
                  doc.text("says"), doc.optional("caveat") or "",
                  tuple(_proof(p, project) for p in doc.tables("proofs", required=False)))


def read_mode(path: Path) -> Mode:
    doc = _Doc(_read(path), path, path.stem)
    costs = tuple(doc.enum("costs", Cost, c) for c in doc.strings("costs"))
    gpus = _gpus(doc)
    mode = Mode(doc.text("name"), doc.number("survey"), doc.text("title"), min(costs, key=lambda c: c.rank),
                tuple(sorted(costs, key=lambda c: c.rank)), gpus,
                tuple(doc.enum("when", Condition, c) for c in doc.strings("when", required=False)),
                doc.number("reports"), doc.strings("sources"), tuple(_sign(s) for s in doc.tables("signs", required=False)),
                tuple(_exposure(e) for e in doc.tables("exposed", required=False)),
                tuple(_way(w) for w in doc.tables("ways_out")), doc.strings("caveats", required=False), path,
                tuple(doc.enum("hangs_in", Phase, p) for p in doc.strings("hangs_in", required=False)))
    if mode.hangs_in and Cost.HANG not in mode.costs:
        raise doc.bad("'hangs_in' is for a mode that hangs: its 'costs' have no \"hang\"")
    if path.stem != f"{mode.survey:02d}-{mode.name}":
        raise doc.bad(f"the file of mode {mode.name!r} (survey {mode.survey}) is named {mode.survey:02d}-{mode.name}.toml")
    return mode


@lru_cache(maxsize=1)
def modes(folder: Path = FOLDER) -> tuple[Mode, ...]:
    """Every mode, in the survey's order."""
    paths = data_files(folder)
    if len(paths) > _MAX_FILES:
        raise BadInput(str(folder), f"{len(paths)} files: more than {_MAX_FILES} modes is not patchkit's data")
    found = tuple(read_mode(p) for p in paths)
    seen: dict[str, Path] = {}
    for mode in found:
        if mode.name in seen:
            raise BadInput(str(mode.path), f"mode {mode.name!r} is also in {seen[mode.name].name}")
        seen[mode.name] = mode.path
    return tuple(sorted(found, key=lambda m: m.survey))


def read_to() -> dict[str, str]:
    """Per project, the newest release the modes' data was read to (``--version`` and doctor say it)."""
    found: dict[str, str] = {}
    for mode in modes():
        for e in mode.exposed:
            if e.project not in found or version_key(e.read_to) > version_key(found[e.project]):
                found[e.project] = e.read_to
    return dict(sorted(found.items()))
