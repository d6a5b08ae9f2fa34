"""Find, date and drop the builds FlashInfer would load instead of compiling a JIT module from patched sources.

What FlashInfer's JIT does, read in every flashinfer-python wheel from 0.5.0 to 0.6.16.post4 (and the
flashinfer-jit-cache package of the same tags); the release and file:function of each fact:

- Where a build lives (all releases).  jit/env.py, at import: ``FLASHINFER_BASE_DIR`` is ``$FLASHINFER_WORKSPACE_BASE``
  or ``Path.home()``; ``FLASHINFER_CACHE_DIR`` is ``<base>/.cache/flashinfer``; ``_get_workspace_dir_name`` appends
  ``<__version__>/<arch>``; ``FLASHINFER_JIT_DIR`` is that plus ``cached_ops``.  jit/core.py ``JitSpec.build_dir``
  (``JitSpecNvcc`` from 0.6.16) is ``FLASHINFER_JIT_DIR/<name>``, ``jit_library_path`` ``<build_dir>/<name>.so``.
  No release reads a FLASHINFER_JIT_DIR variable.  ``__version__`` (flashinfer/_build_meta.py) equals the
  wheel's METADATA version in all 34 releases.
- The arch folder (jit/env.py ``_get_workspace_dir_name``): ``"_".join(f"{major}{minor}")`` over
  ``sorted(CompilationContext().TARGET_CUDA_ARCHS)``.  compilation_context.py ``CompilationContext.__init__`` takes
  ``FLASHINFER_CUDA_ARCH_LIST.split(" ")``, each "M.m": 0.5.0-0.6.6 keep m as written ("12.0" -> 120, "12.0a" ->
  120a); from 0.6.7 an m without a letter goes through ``_normalize_cuda_arch`` (9.x and 10+ get "a"; 12.x gets
  "0f" in 0.6.7, and from 0.6.8 "0f" for 12.0 and "<m>a" for 12.m; CUDA < 12.9 makes 12.x a RuntimeError at
  import).  Without the variable, torch's device capabilities: 0.5.0-0.6.6 add "a" from major 9, 0.6.7+ normalize.
- A prebuilt module wins, always.  jit/core.py ``build_and_load`` (0.5.0-0.6.12; from 0.6.16 ``JitSpec.build_and_load``
  through ``JitSpecNvcc.try_load``) loads ``aot_path`` = ``FLASHINFER_AOT_DIR/<name>/<name>.so`` whenever it exists and
  builds nothing.  jit/env.py ``_get_aot_dir``: ``flashinfer_jit_cache.get_jit_cache_dir()`` when that package is
  importable (``find_spec``), which is ``site-packages/flashinfer_jit_cache/jit_cache`` (its __init__.py, one blob
  in every tag); else ``flashinfer/data/aot`` (in no wheel).  No variable turns it off; ``FLASHINFER_DISABLE_JIT``
  only forbids building.  From 0.6.16 a prebuilt that fails to load falls back to a JIT build.  The jit-cache's
  version must start with FlashInfer's, or FlashInfer does not import, unless ``FLASHINFER_DISABLE_VERSION_CHECK``.
- Otherwise ninja decides, on every ``build_and_load`` (all releases: ``build`` calls ``run_ninja`` under the lock
  ``cached_ops/tmp/<name>.lock``; ``is_compiled`` is never asked).  jit/cpp_ext.py ``generate_ninja_build_for_op``:
  ``depfile = $out.d``, ``deps = gcc``, nvcc ``--generate-dependencies-with-compile``, which lists the -isystem
  headers of flashinfer/data/include too: ninja recompiles when a source or header is newer than the object, or
  when the command changed; a header edited but dated before the build is missed.
- build.ninja itself: 0.5.0-0.6.11 ``JitSpec.build`` writes it only when it is missing (``if not
  self.is_ninja_generated``), so what jit/comm.py changes (the backport's gencode for major 12) never reaches an
  existing build: ninja recompiles with the old flags.  From 0.6.11.post1 ``write_ninja`` runs on every build.
  ninja's log and deps sit in ``cached_ops/`` in 0.5.0-0.6.0, in the module's folder from 0.6.1.
- flashinfer-cubin holds downloaded cubins (jit/env.py ``_get_cubin_dir``), not builds of these sources.

So patchkit drops the module's whole build folder, build.ninja included, in every release, and names a prebuilt
it must not touch.  Standard library only; FlashInfer is never imported; every read is bounded.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum
from itertools import islice
from pathlib import Path

from patchkit.errors import BadInput, PatchkitError, Refused, UnsafePath
from patchkit.match import Pattern
from patchkit.types import StrEnum
from patchkit.values import Value
from patchkit.versions import at_least, is_version

# Where a build comes from, as the lines name it: below ~/.cache/flashinfer or FLASHINFER_WORKSPACE_BASE, or prebuilt.
BuildKind = StrEnum("BuildKind", {"CACHED": "cached JIT build", "WORKSPACE": "JIT build under FLASHINFER_WORKSPACE_BASE",
                        "PREBUILT": "prebuilt by flashinfer-jit-cache", "AOT": "prebuilt in flashinfer/data/aot"})
CACHED, WORKSPACE, PREBUILT, AOT = BuildKind
UNINSTALL_JIT_CACHE = "pip uninstall flashinfer-jit-cache"

# The files each JIT module is compiled from, as the repository (and an editable install) spells them; a wheel
# has them below flashinfer/data/.  Derived from gen_trtllm_comm_module in flashinfer/jit/comm.py (the same
# three sources in 0.5.0-0.6.16.post4) and the headers those include.  Every module includes utils.cuh; the
# backport (FlashInfer PR 3903) adds GetMaxClusterSize to it, which only trtllm_comm calls.
MODULE_SOURCES: dict[str, tuple[str, ...]] = {
    "trtllm_comm": (
        "csrc/trtllm_allreduce.cu",
        "csrc/trtllm_allreduce_fusion.cu",
        "csrc/trtllm_moe_allreduce_fusion.cu",
        "include/flashinfer/comm/trtllm_allreduce.cuh",
        "include/flashinfer/comm/trtllm_allreduce_fusion.cuh",
        "include/flashinfer/comm/trtllm_moe_allreduce_fusion.cuh",
        "include/flashinfer/utils.cuh",
    ),
}
# The Python file that writes each module's build.ninja (its flags and sources).
MODULE_GENERATORS: dict[str, str] = {"trtllm_comm": "flashinfer/jit/comm.py"}

_WRITES_NINJA_EACH_BUILD = "0.6.11.post1"
_MAX_ENTRIES = 4096  # entries read from one folder of the cache
_MAX_DEPTH = 16  # folders below a build folder
_NAME = Pattern(r"[A-Za-z0-9_]+")
_LOCAL = Pattern(r"[a-z0-9]+(\.[a-z0-9]+)*")  # a local label in PEP 440's normal form (cu128, cu128.torch27)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Build(Value):
    module: str
    kind: BuildKind
    path: Path  # the module's build folder (cached, workspace) or the prebuilt .so
    library: Path  # the .so FlashInfer loads (a half-done build folder may have none)
    mtime: float | None  # of the .so, else of build.ninja, else of the folder; None: unreadable
    arch: str | None  # the arch folder of a JIT build ("120a", "90a_120a"); None for a prebuilt
    droppable: bool  # patchkit's to remove: a build folder below the cache root
    reason: str  # why FlashInfer would use it instead of compiling the patched sources
    advice: str  # for a build patchkit does not drop: what does
    root: Path | None  # the cache root a drop stays inside


class Drop(str, Enum):
    """What apply or revert did with a stale build of a module whose sources it wrote."""

    DROPPED = "dropped"
    WOULD_DROP = "would drop"  # a dry run
    GONE = "gone"  # gone already when patchkit came to drop it
    PREBUILT = "prebuilt"  # not patchkit's to drop (``Build.advice`` says what does)
    FAILED = "failed"  # refused or not removed (``JitDrop.error``)


class JitDrop(Value):
    module: str
    path: Path  # the build folder, or the prebuilt .so
    outcome: Drop
    build: Build
    error: PatchkitError | None = None


class JitCheck(Value):  # the stale builds of the files written, what became of each
    drops: tuple[JitDrop, ...] = ()
    error: PatchkitError | None = None  # why none were looked for


def modules_for(paths: Iterable[str]) -> tuple[str, ...]:
    """The JIT modules built from any of ``paths`` (relative to site-packages or to a checkout), sorted."""
    found = set()
    for path in paths:
        path = str(path).replace(os.sep, "/")
        source = path[len("flashinfer/data/"):] if path.startswith("flashinfer/data/") else path
        for module, sources in MODULE_SOURCES.items():
            if source in sources or path == MODULE_GENERATORS.get(module):
                found.add(module)
    return tuple(sorted(found))


def _home(env: Mapping[str, str], home: Path) -> str:
    """``Path.home()`` in a process with environment ``env``: $HOME when set (``os.path.expanduser``), else ``home``."""
    if "HOME" in env:
        return env["HOME"].rstrip("/") or "/"
    return str(home)


def cache_root(env: Mapping[str, str], home: Path) -> tuple[Path, BuildKind]:
    """FlashInfer's ``FLASHINFER_CACHE_DIR`` for a process with environment ``env``, and the kind of its builds."""
    base, kind = env.get("FLASHINFER_WORKSPACE_BASE"), WORKSPACE
    if base is None:
        base, kind = _home(env, home), CACHED
    if not os.path.isabs(base):
        what = f"FLASHINFER_WORKSPACE_BASE={base!r}" if kind == WORKSPACE else f"HOME={base!r}"
        raise BadInput(what, "a relative folder: FlashInfer's cache is then below the server's working folder, which patchkit cannot know")
    return Path(base) / ".cache" / "flashinfer", kind


def find(
    version: str,
    sites: Sequence[Path],
    env: Mapping[str, str],
    home: Path,
    modules: Iterable[str],
    package: Path | None = None,
) -> list[Build]:
    """Every build of ``modules`` that FlashInfer ``version`` would load instead of compiling them from the files
    as they are now: the prebuilt .so (flashinfer-jit-cache in ``sites``, else ``package``/data/aot; ``package`` is
    the flashinfer/ folder, ``sites[0]/flashinfer`` by default), then the build folders of every arch below the
    cache root that ``env`` (the server's environment) and ``home`` give.  Raises BadInput for a bad version or
    module name, or a cache root relative to the server's working folder."""
    release, plus, label = version.partition("+")
    if not is_version(release) or plus and not _LOCAL.fullmatch(label):  # the cache folder is named by it
        raise BadInput(version, "not a FlashInfer release version")
    wanted = sorted(set(modules))
    for module in wanted:
        if not _NAME.fullmatch(module):
            raise BadInput(module, "not a FlashInfer JIT module name")
    if not wanted:
        return []
    builds = _prebuilt(version, sites, env, wanted, package)
    root, kind = cache_root(env, home)
    return builds + _cached(version, root, kind, wanted)


def _prebuilt(version: str, sites: Sequence[Path], env: Mapping[str, str], modules: list[str], package: Path | None) -> list[Build]:
    jit_cache = next((Path(s) / "flashinfer_jit_cache" for s in sites if (Path(s) / "flashinfer_jit_cache" / "__init__.py").is_file()), None)
    if jit_cache is not None:
        from patchkit.targets.dist_info import version_in

        folder, kind, droppable = jit_cache / "jit_cache", PREBUILT, False
        theirs = version_in(jit_cache.parent, "flashinfer_jit_cache")
        advice = f"no setting turns it off (jit/env.py: _get_aot_dir): `{UNINSTALL_JIT_CACHE}`, and FlashInfer builds its modules on first use"
        mismatch = "" if theirs is None or theirs.startswith(version) or env.get("FLASHINFER_DISABLE_VERSION_CHECK") else (
            f"; flashinfer-jit-cache {theirs} is not FlashInfer {version}'s, so FlashInfer does not import at all"
            " unless FLASHINFER_DISABLE_VERSION_CHECK is set")
    elif package is not None or sites:
        folder, kind, droppable, mismatch = Path(package or Path(sites[0]) / "flashinfer") / "data" / "aot", AOT, False, ""
        advice = "an ahead-of-time build (python -m flashinfer.aot), not a cache: remove its folder, or rebuild it from the patched sources"
    else:
        return []
    builds = []
    for module in modules:
        library = folder / module / f"{module}.so"
        mtime = _mtime(library)
        if mtime is not None:
            reason = f"FlashInfer loads it before building anything (jit/core.py: build_and_load checks aot_path first){mismatch}"
            builds.append(Build(module, kind, library, library, mtime, None, droppable, reason, advice, None))
    return builds


def _cached(version: str, root: Path, kind: BuildKind, modules: list[str]) -> list[Build]:
    here = root / version
    try:
        with os.scandir(here) as entries:
            names = sorted(e.name for e in islice(entries, _MAX_ENTRIES))
    except OSError:  # no cache for this release (or not a folder, or unreadable): nothing FlashInfer could load
        return []
    if at_least(version, _WRITES_NINJA_EACH_BUILD):
        reason = "ninja rebuilds it only if a source is dated after it (jit/cpp_ext.py: depfiles, mtimes)"
    else:
        reason = (f"FlashInfer {version} keeps an existing build.ninja (jit/core.py: JitSpec.build writes it only when"
                  " missing), so ninja rebuilds it with the flags of before the patch")
    builds = []
    for arch in names:  # no GPU and no arch list gives no arch folder, and no build (jit/core.py: check_cuda_arch)
        for module in modules:
            folder = here / arch / "cached_ops" / module
            if not os.path.lexists(folder):
                continue
            library = folder / f"{module}.so"
            mtime = next((t for t in map(_mtime, (library, folder / "build.ninja", folder)) if t is not None), None)
            builds.append(Build(module, kind, folder, library, mtime, arch, True, reason, "", root))
    return builds


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime  # FlashInfer follows symlinks (Path.exists), and so does its loader
    except OSError:
        return None



def newest_mtime(paths: Iterable[Path]) -> float | None:
    """The latest mtime among the ``paths`` that exist (the patched sources), None when none does."""
    times = [t for t in map(_mtime, paths) if t is not None]
    return max(times) if times else None


def older_than(builds: Iterable[Build], sources_mtime: float) -> list[Build]:
    """The builds made before the sources were last written (``newest_mtime`` of the patched files): built from
    what the files held before.  A flashinfer-jit-cache .so always is: pip dates it by the install, but it was
    compiled from the release's own sources.  A build whose time cannot be read is left out."""
    return [b for b in builds if b.kind is PREBUILT or (b.mtime is not None and b.mtime < sources_mtime)]


def drop(build: Build) -> Path | None:
    """Remove a build folder ``find`` returned; the folder removed, or None when it was gone already.

    Only below the cache root ``find`` computed (that root itself may be reached through a symlink, as
    FlashInfer reaches it): every folder from there down is opened with O_NOFOLLOW, so a symlinked arch,
    ``cached_ops`` or build folder is refused (UnsafePath) and a symlink inside the build folder is removed, never
    followed.  Holds FlashInfer's own lock on the module (``cached_ops/tmp/<module>.lock``, flock) while it removes;
    Refused while a running FlashInfer holds it, and for a build that is not patchkit's (a prebuilt)."""
    if not build.droppable or build.root is None:
        raise Refused(str(build.path), f"refused: {build.kind}, not patchkit's to remove; {build.advice}")
    root = build.root
    parts = build.path.relative_to(root).parts if build.path.is_relative_to(root) else ()
    if len(parts) != 4 or parts[-2] != "cached_ops" or any(p in (".", "..") for p in parts):
        raise UnsafePath(str(build.path), f"refused: not a module's build folder below the FlashInfer cache {root}")
    opened: list[int] = []
    try:
        try:
            opened.append(os.open(root, _DIR))
        except FileNotFoundError:
            return None
        shown = root
        for part in parts[:-1]:
            shown = shown / part
            fd = _open_folder(opened[-1], part, shown, root)
            if fd is None:
                return None
            opened.append(fd)
        with _module_lock(opened[-1], build.module, shown, root):
            return build.path if _remove_tree(opened[-1], parts[-1], build.path, root, 0) else None
    finally:
        for fd in reversed(opened):
            os.close(fd)


def _open_folder(parent: int, name: str, shown: Path, root: Path) -> int | None:
    """``name`` in ``parent`` as a folder, never through a symlink; None when it is not there."""
    try:
        return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError:
        try:
            info = os.lstat(name, dir_fd=parent)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(name, dir_fd=parent)
            raise UnsafePath(str(shown), f"refused: a symlink (to {target}), not a folder; patchkit removes only real folders inside {root}") from None
        raise UnsafePath(str(shown), "refused: not a folder") from None


@contextmanager
def _module_lock(cached_ops: int, module: str, shown: Path, root: Path) -> Iterator[None]:
    """FlashInfer's lock on ``module`` (filelock: flock on ``tmp/<module>.lock``), held without waiting."""
    tmp = _open_folder(cached_ops, "tmp", shown / "tmp", root)
    if tmp is None:  # FlashInfer has never taken a lock here
        yield
        return
    lock = shown / "tmp" / f"{module}.lock"
    try:
        try:
            fd = os.open(f"{module}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=tmp)
        except OSError as exc:
            raise UnsafePath(str(lock), f"refused: cannot open FlashInfer's lock ({exc.strerror})") from None
    finally:
        os.close(tmp)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(str(lock), f"refused: a running FlashInfer holds this lock while it builds or loads {module}; try again when it is done") from None
        yield
    finally:
        os.close(fd)  # releases the flock


def _remove_tree(parent: int, name: str, shown: Path, root: Path, depth: int) -> bool:
    """Remove folder ``name`` of ``parent`` and all it holds, through file descriptors; False if it was not there."""
    if depth > _MAX_DEPTH:
        raise UnsafePath(str(shown), f"refused: more than {_MAX_DEPTH} folders deep, not a FlashInfer build folder")
    fd = _open_folder(parent, name, shown, root)
    if fd is None:
        return False
    try:
        with os.scandir(fd) as entries:
            listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for entry, is_folder in listed:
            if is_folder:
                _remove_tree(fd, entry, shown / entry, root, depth + 1)
            else:
                try:
                    os.unlink(entry, dir_fd=fd)  # a symlink goes, what it points to stays
                except FileNotFoundError:
                    pass
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    return True
