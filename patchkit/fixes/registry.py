"""The projects patchkit knows, with the files and tables its default fix patches there.

Built from the data files beside this module (``projects.toml`` and the fixes'
``<name>.toml``, read by ``load.py``): adding a table, a candidate file or a project is
a change there and nowhere else.  Paths are relative to the root of the project's
repository; an installed package has the same files below ``site-packages/<name>/``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from patchkit.cc import CC, Key, KeyStyle, must_differ
from patchkit.errors import BadInput
from patchkit.fixes.kinds import DictKeyRule, Rule
from patchkit.fixes.load import HERE, read_fixes, read_projects
from patchkit.values import Value


class Project(Value):
    name: str  # import package name (and the project's name in patchkit)
    label: str  # how people write it
    # Where the import package sits in the repository ("python" holds python/sglang/).
    source_root: str
    # Candidate files of every rule that patches the project, as globs over repository
    # paths (``*`` stays inside one folder).
    files: tuple[str, ...]
    # The dict tables keyed by compute capability (dict-key rules), found by name wherever
    # they are assigned (module level or class body) in any candidate file.
    tables: tuple[str, ...]
    # How the project spells a compute capability, and the default pair to copy.
    key_style: KeyStyle  # MAJOR (10, 12) or DOTTED ("10.0", "12.0")
    from_cc: Key
    to_cc: Key
    # Where its shipped patches live below patches/ ("" = patches/<version>/).
    patches: str
    distribution: str = ""  # what pip installs: flashinfer-python
    names: tuple[str, ...] = ()  # every name a rule looks for (a cheap "mentions" test)
    # Repository folders that an installed wheel keeps elsewhere: (repository prefix, installed
    # prefix), e.g. ("include/", "flashinfer/data/include/") for FlashInfer's JIT sources.
    installed: tuple[tuple[str, str], ...] = ()
    jit_builds: bool = False  # it loads JIT builds of its own sources (FlashInfer): a patch leaves them stale

    def dist_info(self) -> str:
        """The glob of its dist-info folders: ``flashinfer_python-*.dist-info``."""
        return f"{self.distribution.replace('-', '_')}-*.dist-info"

    def key(self, cc: CC) -> Key:
        """``cc`` as this project keys it, the one place a cc becomes a project's spelling: 12 for
        12.0 and 12.1 where it keys by major (SGLang, FlashInfer), "12.1" where by "X.Y" (vLLM)."""
        return cc.key(self.key_style)

    def cc_pair(
        self, from_cc: CC | None = None, to_cc: CC | None = None, defaults: tuple[Key, Key] | None = None
    ) -> tuple[Key, Key]:
        """The pair of keys to use, as this project writes them: each cc given, else that side of
        ``defaults`` (the project's own pair: what its fixes copy).  BadInput when both are one key."""
        base = (self.from_cc, self.to_cc) if defaults is None else defaults
        keys = (base[0] if from_cc is None else self.key(from_cc), base[1] if to_cc is None else self.key(to_cc))
        if keys[0] == keys[1]:
            shown = (CC.of(keys[0]) if from_cc is None else from_cc, CC.of(keys[1]) if to_cc is None else to_cc)
            also = f": {self.label} keys both as {keys[0]!r}" if shown[0] != shown[1] else ""
            raise BadInput(None, must_differ(*shown) + also)
        return keys

    def repo_path(self, package_path: str) -> str:
        """``sglang/x.py`` (as installed) -> ``python/sglang/x.py`` (as in the repository);
        ``flashinfer/data/include/x.cuh`` -> ``include/x.cuh``."""
        for repo, installed in self.installed:
            if package_path.startswith(installed):
                return repo + package_path[len(installed):]
        return f"{self.source_root}/{package_path}" if self.source_root else package_path

    def package_path(self, repo_path: str) -> str:
        """The inverse of repo_path."""
        for repo, installed in self.installed:
            if repo_path.startswith(repo):
                return installed + repo_path[len(repo):]
        prefix = f"{self.source_root}/" if self.source_root else ""
        return repo_path[len(prefix) :] if prefix and repo_path.startswith(prefix) else repo_path


FIXES = read_fixes()


def _projects() -> dict[str, Project]:
    """Each project of projects.toml, with what the rules of every fix patch there."""
    layouts = read_projects()
    projects = {}
    for name, layout in layouts.items():
        rules = [r for fix in FIXES.values() for r in fix.rules if r.project == name]
        if not rules:
            raise BadInput(str(HERE / "projects.toml"), f"{name}: no rule of any fix patches it")
        style = int if KeyStyle(layout["key_style"]) is KeyStyle.MAJOR else str
        for r in rules:
            pair = r.key_pair()
            if pair is not None and not all(isinstance(cc, style) for cc in pair):
                raise BadInput(str(HERE / f"{r.fix}.toml"), f"{name}: from_cc and to_cc must be written {layout['key_style']}")
        keyed = next((r for r in rules if r.key_pair() is not None), None)
        if keyed is None:
            raise BadInput(str(HERE / "projects.toml"), f"{name}: no rule copies a compute capability key or member")
        projects[name] = Project(
            name, layout["label"], layout["source_root"],
            files=tuple(dict.fromkeys(g for r in rules for g in r.files)),
            tables=tuple(dict.fromkeys(t for r in rules if isinstance(r, DictKeyRule) for t in r.tables)),
            key_style=KeyStyle(layout["key_style"]), from_cc=keyed.from_cc, to_cc=keyed.to_cc, patches=layout["patches"],
            distribution=layout["distribution"], names=tuple(dict.fromkeys(n for r in rules for n in r.names())),
            installed=tuple(layout.get("installed", {}).items()), jit_builds=layout.get("jit_builds", False),
        )
    for fix in FIXES.values():
        for r in fix.rules:
            if r.project not in projects:
                raise BadInput(str(HERE / f"{fix.name}.toml"), f"rule for {r.project!r}: not a project of projects.toml")
    return projects


def default_fixes() -> tuple[str, ...]:
    return tuple(name for name, fix in FIXES.items() if fix.default)


def choose_fixes(names: Collection[str] = (), all_fixes: bool = False) -> tuple[str, ...]:
    """The fixes a command works with: ``--all-fixes``, the ``--fix`` names, or the default ones."""
    if all_fixes:
        return tuple(FIXES)
    for name in names:
        if name not in FIXES:
            raise BadInput(None, f"--fix {name}: no such fix (the fixes: {', '.join(FIXES)})")
    return tuple(n for n in FIXES if n in names) if names else default_fixes()


def rules_for(project: str, fixes: Iterable[str], from_cc: Key | None = None, to_cc: Key | None = None) -> tuple[Rule, ...]:
    """The rules of ``fixes`` that patch ``project``, in the fixes' order; ``from_cc`` and
    ``to_cc`` (--from-cc, --to-cc) replace the pair of the rules that copy a key or member, and
    leave out the others where they are for GPUs of another major (``Rule.meant_for``: the
    DeepGEMM refusal of SM12x is no change for --to-cc 9.0)."""
    rules = tuple(r for name in fixes for r in FIXES[name].rules if r.project == project)
    if from_cc is None and to_cc is None:
        return rules
    major = None if to_cc is None else CC.of(to_cc).major
    return tuple(r.paired(from_cc, to_cc) for r in rules if major is None or r.meant_for(major))


def fixes_for(project: str, fixes: Iterable[str] | None = None) -> tuple[str, ...]:
    """Those of ``fixes`` (default: every fix) that have a rule patching ``project``."""
    return tuple(n for n in (FIXES if fixes is None else fixes) if any(r.project == project for r in FIXES[n].rules))


def no_rule(label: str, project: str, fixes: Iterable[str]) -> str:
    """Why nothing of ``fixes`` applies to a project, and which fixes would."""
    return f"no rule of {', '.join(fixes)} patches {label}; {', '.join(fixes_for(project))} does (--fix NAME)"


PROJECTS = _projects()
SGLANG = PROJECTS["sglang"]  # scan's default tables
