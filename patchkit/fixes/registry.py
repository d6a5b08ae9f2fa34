"""The projects patchkit knows, with the files and tables its default fix patches there.

Built from the data files beside this module (``projects.toml`` and the fixes'
``<name>.toml``, read by ``load.py``): adding a table, a candidate file or a project is
a change there and nowhere else.  Paths are relative to the root of the project's
repository; an installed package has the same files below ``site-packages/<name>/``.
"""

from __future__ import annotations

from typing import NamedTuple

from patchkit.errors import BadInput
from patchkit.fixes.load import HERE, read_fixes, read_projects


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


def _projects() -> dict[str, Project]:
    """Each project of projects.toml, with the dict-key rule of the default fix that patches it."""
    layouts = read_projects()
    rules = [r for fix in read_fixes().values() if fix.default for r in fix.rules if r.kind == "dict-key"]
    projects = {}
    for name, layout in layouts.items():
        rule = next((r for r in rules if r.project == name), None)
        if rule is None:
            raise BadInput(str(HERE / "projects.toml"), f"{name}: no rule of a default fix patches it")
        style = int if layout["key_style"] == "major" else str
        if not (isinstance(rule.from_cc, style) and isinstance(rule.to_cc, style)):
            raise BadInput(str(HERE / f"{rule.fix}.toml"), f"{name}: from_cc and to_cc must be written {layout['key_style']}")
        projects[name] = Project(name, layout["label"], layout["source_root"], rule.files, rule.tables,
                                 layout["key_style"], rule.from_cc, rule.to_cc, layout["patches"])
    return projects


PROJECTS = _projects()
SGLANG, VLLM = PROJECTS["sglang"], PROJECTS["vllm"]
