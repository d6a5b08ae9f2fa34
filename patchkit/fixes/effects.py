"""What each fix does, and under which conditions: the ``[effect]`` table of its TOML.

``[effect]`` holds ``changes`` (what the fix changes), ``upstream`` (where upstream
stands) and ``asked_with`` (the server option that turns the feature on), and three lists
of tables:

- ``[[effect.fails]]``: what goes wrong without the fix, per project and release range
  (``since``/``until``, inclusive): the ``outcome`` (``crash``, ``warning`` or ``off``),
  the exception or warning it ``says`` and ``where``; optionally ``shown_in`` (a repository
  path) and ``holds`` (lines of that file, as the release writes them, that together show this
  outcome): a release newer than every range of its project is judged by it (``read_newer``);
- ``[[effect.needs]]``: what the machine needs for the fix to take effect (``machine``:
  ``multicast`` or ``nvcc``), in words (``says``), what the code does ``otherwise`` and
  what follows (``then``).  Optionally, whether the fix is needed on a machine without it:
  ``helps_without`` lists the outcomes of ``[[effect.fails]]`` the fix still helps there
  (``["crash"]``: it turns a crash into a clean start); on such a machine a release whose
  outcome is another (``warning``, ``off``: it turns the feature off cleanly by itself) does
  not need the fix, and ``adds_without`` says what the fix would add there instead.  Optionally
  ``for_cc``, the words ``says`` and ``otherwise`` name ({arch}, {cuda}, {gpu}) per GPU cc ("12.1"):
  a list of tables, the first for any release, each other for the releases ``since``-``until``
  (inclusive) of ``project`` (the one whose code builds: "flashinfer"), giving the keys it changes
  (FlashInfer 0.6.7 and later build sm_120f, with CUDA 12.9 or later); ``says`` and ``otherwise``
  as read are the words for 12.0 and any release;
- ``[[effect.default_on]]``: the releases of a project (``since``/``until``) that turn the
  fixed feature on by themselves for ``models`` (architectures), when ``with_project`` is
  installed beside them below ``fixed_in``; ``prevented_by`` (optional) names the fix that
  keeps the release from doing so (where it is in effect, the release no longer does).

A fix without ``[effect]`` has no effects to tell.  A wrong table is one BadInput line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TypeAlias, TypeVar

from patchkit.cc import CC, Key
from patchkit.errors import BadInput
from patchkit.fixes.load import HERE, NOT_FIXES, Table, _get, _read, _strings, data_files
from patchkit.types import StrEnum
from patchkit.values import Value
from patchkit.versions import after, in_range, is_version

_E = TypeVar("_E", bound=StrEnum)
# A need's words for GPUs of one cc: (the words for any release, (since, until, the words of those releases), ...).
ForCC: TypeAlias = "tuple[Table, *tuple[tuple[str, str, Table], ...]]"  # a string: Python 3.10 reads no * here
# project -> its release installed (None: not known)
Versions = Mapping[str, "str | None"]


class Outcome(StrEnum):
    """What a release does without the fix (a failure's ``outcome``, as the data spells it)."""

    CRASH = "crash"
    WARNING = "warning"
    OFF = "off"  # it turns the feature off cleanly by itself


class MachineNeed(StrEnum):
    """What the machine needs for a fix to take effect (a need's ``machine``, as the data spells it)."""

    MULTICAST = "multicast"
    NVCC = "nvcc"


KEY = "{key}"  # in a failure's ``says``: the cc as the release prints it, which is how the project keys it


def _covers(since: str, until: str, version: str | None) -> bool:
    """Whether ``version`` lies in the release range since..until (both inclusive; a local
    version such as ``0.5.9+cu128`` as its public release)."""
    return in_range(version, since, until)


def _releases(since: str, until: str) -> str:
    return since if since == until else f"{since} - {until}"


class Fails(Value):
    project: str
    since: str
    until: str
    outcome: Outcome
    says: str  # "{key}": the GPU's cc as the project prints it (its key: SGLang 12, vLLM "12.1")
    where: str
    shown_in: str = ""  # the repository path of the file whose ``holds`` shows this outcome ("": none)
    holds: tuple[str, ...] = ()  # those lines, as the release writes them (each found in the file)
    read_in: str = ""  # a release newer than the data: the file it was judged from (``read_newer``)

    def keyed(self, key: Key | None) -> Fails:
        """The failure as the release says it on a GPU the project keys ``key`` (``KEY`` filled in)."""
        return self._replace(says=self.says.replace(KEY, str(key)))

    def covers(self, version: str | None) -> bool:
        return _covers(self.since, self.until, version)

    def releases(self) -> str:
        return _releases(self.since, self.until)


class Needs(Value):
    machine: MachineNeed
    says: str
    otherwise: str  # what the code does when the machine lacks it
    then: str  # and what follows
    helps_without: tuple[Outcome, ...] = ()  # the outcomes the fix still helps on a machine without it
    adds_without: str = ""  # what the fix adds, on a machine without it, to a release of another outcome
    # "12.1" -> the words ``written``'s {arch} and {cuda} take for GPUs of that cc: (those for any release,
    # then (since, until, those for these releases of ``project``, the rest taken from the first), ...)
    for_cc: dict[str, ForCC] = {}
    written: str = ""  # ``says`` as the data writes it ({arch}, {cuda}); ``says`` is it for the fix's own cc (12.0)
    written_otherwise: str = ""  # ``otherwise`` as the data writes it ({gpu}); ``otherwise`` is it for 12.0
    project: str = ""  # whose releases for_cc's since/until name ("": for_cc names none)

    def words(self, cc: CC, versions: Versions | None = None) -> Table | None:
        """What {arch}, {cuda} and {gpu} say for GPUs of ``cc``, with the releases ``versions``
        (project -> release) installed: those of ``project``'s release where the data has them,
        else those for any release.  None: the data has no words for ``cc``."""
        entry = self.for_cc.get(cc.smi_text())
        if not entry:
            return None
        anyone, *ranges = entry
        release = (versions or {}).get(self.project)
        return next(({**anyone, **words} for since, until, words in ranges if release and _covers(since, until, release)), anyone)

    def said_for(self, cc: CC, versions: Versions | None = None) -> str:
        """``says`` for GPUs of ``cc`` with ``versions`` installed (``CC(12, 1)``: FlashInfer's JIT build of
        sm_121a, not sm_120a; FlashInfer 0.6.7 on 12.0: CUDA 12.9 or later, sm_120f)."""
        words = self.words(cc, versions)
        return self.written.format_map(words) if words and self.written else self.says

    def otherwise_for(self, cc: CC, versions: Versions | None = None) -> str:
        """``otherwise`` for GPUs of ``cc`` (``CC(12, 1)``: "... the comm module for SM121")."""
        words = self.words(cc, versions)
        return self.written_otherwise.format_map(words) if words and self.written_otherwise else self.otherwise

    def with_versions(self, versions: Versions) -> Needs:
        """The need as said on the fix's own cc (12.0) with ``versions`` (project -> release) installed:
        its words for the release of ``project`` there, else for any release."""
        return self._replace(says=self.said_for(CC(12, 0), versions), otherwise=self.otherwise_for(CC(12, 0), versions))

    def of_release(self, project: str, version: str | None) -> Needs:
        """The need as said for ``project`` ``version`` alone (a shipped patch of that release)."""
        return self.with_versions({project: version})

    def decides_need(self) -> bool:
        """Whether lacking it makes the fix unneeded for some releases."""
        return bool(self.helps_without)


class DefaultOn(Value):
    project: str
    since: str
    until: str
    models: tuple[str, ...]
    with_project: str
    fixed_in: str
    prevented_by: str = ""  # the fix that keeps the release from turning it on ("": none)

    def covers(self, version: str | None) -> bool:
        return _covers(self.since, self.until, version)

    def releases(self) -> str:
        return _releases(self.since, self.until)


class Effect(Value):
    fix: str
    changes: str
    upstream: str
    asked_with: str  # the server option that turns the feature on
    fails: tuple[Fails, ...]
    needs: tuple[Needs, ...]
    default_on: tuple[DefaultOn, ...]
    keys: dict[str, Key] = {}  # project -> the key its rules add (their ``to_cc``): what ``fails`` print where no GPU is named
    written: tuple[Fails, ...] = ()  # ``fails`` as the data writes them, ``KEY`` unfilled

    def failing(self, project: str, version: str | None, key: Key | None = None) -> list[Fails]:
        """What ``project`` ``version`` does without the fix, on a GPU it keys ``key`` (None: the
        one the fix's rules are for)."""
        key = self.keys.get(project) if key is None else key
        return [f.keyed(key) for f in self.written or self.fails if f.project == project and f.covers(version)]

    def read_until(self, project: str) -> str | None:
        """The newest release of ``project`` the data says how it fails (None: it says of none)."""
        from patchkit.versions import version_key

        untils = [f.until for f in self.fails if f.project == project]
        return max(untils, key=version_key) if untils else None

    def newer(self, project: str, version: str | None) -> bool:
        """Whether ``version`` is newer than every release of ``project`` the data says how it fails:
        patchkit has not read it, and its ranges say nothing of it."""
        until = self.read_until(project)
        return until is not None and version is not None and not in_range(version, None, until)

    def read_newer(
        self, project: str, version: str | None, read: Callable[[str], bytes | None], key: Key | None = None
    ) -> list[Fails]:
        """What a release newer than the data does without the fix, judged from its files: the
        newest outcome whose lines (``holds``) its file (``shown_in``, read by ``read``: a
        repository path to bytes or None) still holds, for that release; [] when none does
        (then patchkit cannot say)."""
        key = self.keys.get(project) if key is None else key
        known = [f for f in self.written or self.fails if f.project == project and f.shown_in and f.holds]
        from patchkit.versions import version_key

        for f in sorted(known, key=lambda f: version_key(f.until), reverse=True):
            data = read(f.shown_in)
            if data is not None and all(line.encode() in data for line in f.holds):
                return [f._replace(since=version, until=version, read_in=f.shown_in).keyed(key)]
        return []

    def shown_by(self, project: str) -> list[Fails]:
        """The outcomes of ``project`` a newer release can be judged by (``shown_in`` and ``holds``)."""
        return [f for f in self.fails if f.project == project and f.shown_in and f.holds]

    def may_spare(self, project: str, version: str | None) -> bool:
        """Whether a machine may not need the fix on ``project`` ``version`` (``judge.here.unneeded``),
        from the data alone: a release it helps on every machine (one that crashes without it) needs
        no GPU looked at.  A release newer than the data may (its files tell)."""
        helps = {o for n in self.needs if n.decides_need() for o in n.helps_without}
        if not any(n.decides_need() for n in self.needs):
            return False
        return self.newer(project, version) or any(f.outcome not in helps for f in self.failing(project, version))

    def turned_on(self, project: str, version: str | None) -> list[DefaultOn]:
        return [d for d in self.default_on if d.project == project and d.covers(version)]



def _versions(entry: Table, path: Path, what: str, *keys: str) -> None:
    for key in keys:
        if not is_version(_get(entry, key, str, path, what)):
            raise BadInput(str(path), f"{what}: {key} {entry[key]!r} is not a release version")
    if len(keys) == 2 and after(entry[keys[0]], entry[keys[1]]):
        raise BadInput(str(path), f"{what}: since {entry['since']} is after until {entry['until']}")


def _member(enum: type[_E], word: str, path: Path, what: str) -> _E:
    """The member of ``enum`` the data spells ``word``, or one BadInput line naming them all."""
    try:
        return enum(word)
    except ValueError:
        raise BadInput(str(path), f"{what} {word!r} is not one of {', '.join(enum)}") from None


def _tables(effect: Table, key: str, path: Path, what: str) -> list[tuple[str, Table]]:
    entries = effect.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadInput(str(path), f"{what}: {key!r} must be a list of tables ([[effect.{key}]])")
    return [(f"{what}, {key} {i}", e) for i, e in enumerate(entries, 1)]


def _for_cc(need: Table, project: str, path: Path, where: str) -> dict[str, ForCC]:
    """A need's ``for_cc``: cc -> (the words for any release, (since, until, the words of those releases), ...)."""
    if "for_cc" not in need:
        return {}
    found: dict[str, ForCC] = {}
    for cc, entries in _get(need, "for_cc", dict, path, where).items():
        what = f"{where}, for_cc {cc}"
        entries = [entries] if isinstance(entries, dict) else entries
        if not isinstance(entries, list) or not entries or not all(isinstance(t, dict) for t in entries):
            raise BadInput(str(path), f"{what}: must be a table or a list of tables ([[effect.needs.for_cc.\"{cc}\"]])")
        anyone, *rest = entries
        if "since" in anyone or "until" in anyone:
            raise BadInput(str(path), f"{what}: the first table holds the words for any release (no since, until)")
        ranges: list[tuple[str, str, Table]] = []
        for t in rest:
            _versions(t, path, what, "since", "until")
            if not project:
                raise BadInput(str(path), f"{where}: 'project' must name the project whose releases for_cc's since/until are")
            if any(in_range(t["since"], s, u) or in_range(s, t["since"], t["until"]) for s, u, _ in ranges):
                raise BadInput(str(path), f"{what}: releases {t['since']} - {t['until']} overlap another table's")
            ranges.append((t["since"], t["until"], {k: v for k, v in t.items() if k not in ("since", "until")}))
        found[cc] = (anyone, *ranges)
    if project:
        from patchkit.fixes.registry import PROJECTS

        if project not in PROJECTS:
            raise BadInput(str(path), f"{where}: project {project!r} is not one of {', '.join(PROJECTS)}")
    return found


def read_effect(path: Path) -> Effect | None:
    doc = _read(path)
    if "effect" not in doc:
        return None
    name = path.stem
    effect = _get(doc, "effect", dict, path, name)
    what = f"{name}, effect"
    fails = []
    for where, e in _tables(effect, "fails", path, what):
        _versions(e, path, where, "since", "until")
        outcome = _member(Outcome, _get(e, "outcome", str, path, where), path, f"{where}: outcome")
        if ("shown_in" in e) != ("holds" in e):
            raise BadInput(str(path), f"{where}: shown_in and holds go together (the file, and the lines that show the outcome)")
        shown = (_get(e, "shown_in", str, path, where), _strings(e, "holds", path, where)) if "holds" in e else ("", ())
        fails.append(Fails(_get(e, "project", str, path, where), e["since"], e["until"], outcome,
                           _get(e, "says", str, path, where), _get(e, "where", str, path, where), *shown))
    needs = []
    for where, e in _tables(effect, "needs", path, what):
        machine = _member(MachineNeed, _get(e, "machine", str, path, where), path, f"{where}: machine")
        helps = tuple(_member(Outcome, o, path, f"{where}: helps_without")
                      for o in _strings(e, "helps_without", path, where, required=False))
        adds = _get(e, "adds_without", str, path, where) if helps or "adds_without" in e else ""
        written, written_otherwise = _get(e, "says", str, path, where), _get(e, "otherwise", str, path, where)
        project = _get(e, "project", str, path, where) if "project" in e else ""
        for_cc = _for_cc(e, project, path, where)
        try:
            says, otherwise = (t.format_map(for_cc["12.0"][0]) if for_cc else t for t in (written, written_otherwise))
            for anyone, *ranges in for_cc.values():
                for words in (anyone, *({**anyone, **w} for _, _, w in ranges)):
                    written.format_map(words)
                    written_otherwise.format_map(words)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BadInput(str(path), f"{where}: for_cc must give, for 12.0 and each cc, the words says and otherwise name") from None
        needs.append(Needs(machine, says, otherwise, _get(e, "then", str, path, where), helps, adds,
                           for_cc, written if for_cc else "", written_otherwise if for_cc else "", project))
    default_on = []
    for where, e in _tables(effect, "default_on", path, what):
        _versions(e, path, where, "since", "until")
        _versions(e, path, where, "fixed_in")
        prevented_by = _get(e, "prevented_by", str, path, where) if "prevented_by" in e else ""
        if prevented_by and (prevented_by == name or f"{prevented_by}.toml" in NOT_FIXES
                             or path.parent / f"{prevented_by}.toml" not in data_files(path.parent)):
            raise BadInput(str(path), f"{where}: prevented_by {prevented_by!r} is not another fix")
        default_on.append(DefaultOn(_get(e, "project", str, path, where), e["since"], e["until"],
                                    _strings(e, "models", path, where), _get(e, "with_project", str, path, where),
                                    e["fixed_in"], prevented_by))
    keys: dict[str, Key] = {}
    for r in doc.get("rules", ()):
        if isinstance(r, dict) and "project" in r and "to_cc" in r:
            keys.setdefault(r["project"], r["to_cc"])
    return Effect(name, _get(effect, "changes", str, path, what), _get(effect, "upstream", str, path, what),
                  _get(effect, "asked_with", str, path, what), tuple(f.keyed(keys.get(f.project)) for f in fails), tuple(needs),
                  tuple(default_on), keys, tuple(fails))


@lru_cache(maxsize=2)
def read_effects(folder: Path = HERE) -> Mapping[str, Effect]:
    """fix name -> its Effect, for every fix file of ``folder`` with an ``[effect]`` table; read once in a
    process (apply asks which fixes it may spare, then what each one it wrote prevents)."""
    found = {}
    for path in data_files(folder):
        if path.name not in NOT_FIXES:
            effect = read_effect(path)
            if effect is not None:
                found[effect.fix] = effect
    return found
