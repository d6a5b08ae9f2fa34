"""The target registry: which files and which table names patchkit looks at.

Data only.  Adding a table, a candidate file or a project is a change here and
nowhere else.  Paths are relative to the root of the project's repository.
"""

from __future__ import annotations

from typing import NamedTuple


class Project(NamedTuple):
    name: str
    # Candidate files, as globs over repository paths (``*`` stays inside one folder).
    files: tuple[str, ...]
    # Dict tables keyed by compute capability, found by name wherever they are assigned
    # (module level or class body) in any candidate file.
    tables: tuple[str, ...]


SGLANG = Project(
    name="sglang",
    files=("python/sglang/srt/distributed/device_communicators/*.py",),
    tables=(
        # 0.5.3 - 0.5.4: all_reduce_utils.py, module level
        "SYMM_MEM_ALL_REDUCE_MAX_SIZES",
        # 0.5.4.post3 and later: all_reduce_utils.py, module level
        "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",
        # class attribute of SymmMemCommunicator (symm_mem.py) and later of
        # TorchSymmMemCommunicator (torch_symm_mem.py)
        "_WORLD_SIZES_MULTIMEM",
    ),
)

PROJECTS = {p.name: p for p in (SGLANG,)}
