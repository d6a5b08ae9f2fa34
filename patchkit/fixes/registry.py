"""The target registry: which projects, files and table names patchkit looks at.

Data only.  Adding a table, a candidate file or a project is a change here and
nowhere else.  Paths are relative to the root of the project's repository; an
installed package has the same files below ``site-packages/<name>/``.
"""

from __future__ import annotations

from typing import NamedTuple

from patchkit.errors import BadInput


class Project(NamedTuple):
    name: str  # distribution and import package name
    label: str  # how people write it
    # Where the import package sits in the repository ("python" holds python/sglang/).
    source_root: str
    # Candidate files, as globs over repository paths (``*`` stays inside one folder).
    files: tuple[str, ...]
    # Dict tables keyed by compute capability, found by name wherever they are assigned
    # (module level or class body) in any candidate file.
    tables: tuple[str, ...]
    # How the tables spell a compute capability, and the default pair to copy.
    key_style: str  # "major" (10, 12) or "major.minor" ("10.0", "12.0")
    from_cc: object
    to_cc: object
    # Where its shipped patches live below patches/ ("" = patches/<version>/).
    patches: str

    def cc_pair(self, from_cc=None, to_cc=None) -> tuple:
        """The cc pair to use: this project's defaults filled in, each written this project's way."""
        from_cc = self.from_cc if from_cc is None else from_cc
        to_cc = self.to_cc if to_cc is None else to_cc
        for option, value in (("--from-cc", from_cc), ("--to-cc", to_cc)):
            if not isinstance(value, type(self.from_cc)):
                raise BadInput(None, f"{option} {value} is not how {self.label} writes a compute capability: write it like {self.to_cc}")
        if from_cc == to_cc:
            raise BadInput(None, f"--to-cc must differ from --from-cc (--from-cc {from_cc}, --to-cc {to_cc})")
        return from_cc, to_cc

    def repo_path(self, package_path: str) -> str:
        """``sglang/x.py`` (as installed) -> ``python/sglang/x.py`` (as in the repository)."""
        return f"{self.source_root}/{package_path}" if self.source_root else package_path

    def package_path(self, repo_path: str) -> str:
        """The inverse of repo_path."""
        prefix = f"{self.source_root}/" if self.source_root else ""
        return repo_path[len(prefix) :] if prefix and repo_path.startswith(prefix) else repo_path


SGLANG = Project(
    name="sglang",
    label="SGLang",
    source_root="python",
    files=("python/sglang/srt/distributed/device_communicators/*.py",),
    tables=(
        # 0.5.3 - 0.5.4.post2: all_reduce_utils.py, module level
        "SYMM_MEM_ALL_REDUCE_MAX_SIZES",
        # 0.5.4.post3 and later: all_reduce_utils.py, module level
        "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",
        # class attribute of SymmMemCommunicator (symm_mem.py) and later of
        # TorchSymmMemCommunicator (torch_symm_mem.py)
        "_WORLD_SIZES_MULTIMEM",
    ),
    key_style="major",
    from_cc=10,
    to_cc=12,
    patches="",
)

VLLM = Project(
    name="vllm",
    label="vLLM",
    source_root="",
    files=("vllm/distributed/device_communicators/*.py",),
    tables=(
        # all_reduce_utils.py, module level, keyed "9.0", "10.0"
        "CUSTOM_ALL_REDUCE_MAX_SIZES",
        "SYMM_MEM_ALL_REDUCE_MAX_SIZES",
        # class attribute of SymmMemCommunicator (symm_mem.py), found by `patchkit scan`
        "_WORLD_SIZES_MULTIMEM",
    ),
    key_style="major.minor",
    from_cc="10.0",
    to_cc="12.0",
    patches="vllm",
)

PROJECTS = {p.name: p for p in (SGLANG, VLLM)}
