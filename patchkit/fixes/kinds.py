"""The rules of the fixes as values: one class per kind of rule.

Every rule has its fix, the project and files it patches, its cc pair, its evidence and what
it needs at run time (``Rule``); each kind's class holds its locator, says which names a file
must mention for it to find anything (``names``) and what it rewrites (``where``), and whether
it copies a key (``key_pair``).  ``load.py`` is the one place that reads a kind's name from the
data files and picks the class; ``rewrite.rules`` maps each class to its rewrite.
"""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING, ClassVar

from patchkit.match import mentions
from patchkit.types import StrEnum
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.cc import CC, Key


class Origin(Value):
    """Where a backport comes from."""

    project: str  # the upstream project's label: "FlashInfer"
    pr: int | None  # None: the pull request is not known (only the release it landed in)
    commit: str | None  # None: not known
    title: str
    landed_in: str  # the first release that has it

    def cite(self) -> str:
        if self.pr is None:
            return f"{self.project} {self.landed_in}'s change"
        return f"{self.project} PR {self.pr}"


class Refresh(Value):
    """How a backport's diff is refreshed for a range of releases: added lines left out."""

    file: str
    since: str | None
    until: str | None
    drop: tuple[str, ...]  # added lines (without their line ending) these releases leave out
    why: str

    def covers(self, version: str | None) -> bool:
        from patchkit.versions import in_range

        return in_range(version, self.since, self.until)


class RuleKind(StrEnum):
    """The kinds of rule, as the data files name them (``kind = "dict-key"``)."""

    DICT_KEY = "dict-key"
    LIST_MEMBER = "list-member"
    PREDICATE = "predicate"
    BACKPORT = "backport"
    COMPARISON = "comparison"


class Rule(Value):
    """What every rule has: its fix, the project and files it patches, its cc pair, its
    evidence and what it needs at run time.  One subclass per kind holds its locator and says
    what a file must mention (``names``) and what it rewrites (``where``); ``rewrite.rules``
    maps each class to its rewrite."""

    kind: ClassVar[RuleKind]
    fix: str
    project: str
    files: tuple[str, ...]
    from_cc: Key
    to_cc: Key
    evidence: str
    needs: str
    # The releases the rule is for (None: no bound); outside them it finds nothing.
    since: str | None = None
    until: str | None = None

    def names(self) -> tuple[str, ...]:
        """The names a file must mention for the rule to find anything in it."""
        raise NotImplementedError

    def where(self) -> str:
        """What the rule rewrites, as a person reads it."""
        raise NotImplementedError

    def wants(self, path: str, data: bytes) -> bool:
        """Whether the rule may find something in the file ``path`` holding ``data``: it
        mentions one of the names."""
        return mentions(data, self.names())

    def key_pair(self) -> tuple[Key, Key] | None:
        """(from_cc, to_cc) as the project keys them; None for a rule whose pair is spelled in
        names (a predicate's "sm100" -> "sm120")."""
        return self.from_cc, self.to_cc

    def paired(self, from_cc: Key | None = None, to_cc: Key | None = None) -> Rule:
        """The rule for the pair --from-cc/--to-cc give (None: its own), for a rule that copies
        a key or member; a gate's flag or an upstream change stays as it is."""
        return self

    def for_gpu(self, cc: CC) -> bool:
        """Whether the rule is for a GPU of ``cc`` (a ``CC``): a rule that copies a key or member
        is keyed per GPU by the caller."""
        return True

    def meant_for(self, major: int) -> bool:
        """Whether the rule may be applied for a --to-cc of ``major``: a rule that copies a key or
        member copies any pair it is given; a gate's flag, a comparison or an upstream change is
        for the GPUs it names alone (SGLang's DeepGEMM refusal of SM12x, never for --to-cc 9.0)."""
        from patchkit.cc import CC

        return self._for_major(CC(major, 0))

    def _for_major(self, cc: CC) -> bool:
        """For the major its ``to_cc`` names (12 of "sm120", of 12): a gate's flag, an upstream change."""
        from patchkit.cc import CC

        return CC.parse(str(self.to_cc)).major == cc.major

    def covers(self, version: str | None) -> bool:
        """Whether the rule is for ``version``: every release when unbounded; a bounded rule is
        for no release it cannot place (an unknown version)."""
        from patchkit.versions import in_range

        return self.since is None and self.until is None or in_range(version, self.since, self.until)

    def landed(self, version: str | None) -> bool:
        """Whether the rule's change is upstream in ``version``, as a release says so by itself
        (only a backport knows the release it landed in)."""
        return False


class DictKeyRule(Rule):
    """Adds a key that copies another to the dicts ``tables`` (keyed by compute capability)."""

    kind: ClassVar[RuleKind] = RuleKind.DICT_KEY
    tables: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return self.tables

    def where(self) -> str:
        return ", ".join(self.tables)

    def paired(self, from_cc: Key | None = None, to_cc: Key | None = None) -> Rule:
        return self._replace(from_cc=self.from_cc if from_cc is None else from_cc, to_cc=self.to_cc if to_cc is None else to_cc)

    def meant_for(self, major: int) -> bool:
        return True


class ListMemberRule(Rule):
    """Adds a member after another: a call's keyword argument (``call`` + ``keyword``), an
    assignment (``target``) or the left side of a membership test (``test``); optionally only
    inside ``functions``."""

    kind: ClassVar[RuleKind] = RuleKind.LIST_MEMBER
    call: str | None = None
    keyword: str | None = None
    target: str | None = None
    test: str | None = None
    functions: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.call, self.keyword, self.target) if n) or self.functions

    def where(self) -> str:
        inside = f" in {' / '.join(self.functions)}()" if self.functions else ""
        what = f"{self.call}({self.keyword}=[...])" if self.call else self.target or f"{self.test} in (...)"
        return what + inside

    paired = DictKeyRule.paired
    meant_for = DictKeyRule.meant_for


class PredicateRule(Rule):
    """Adds a flag to the or-expressions of ``flag`` in ``functions``; ``from_cc``/``to_cc`` are
    the spellings in names ("sm100" -> "sm120"); ``helpers``: where a helper reached as an
    attribute must be defined."""

    kind: ClassVar[RuleKind] = RuleKind.PREDICATE
    from_cc: str  # spellings in names: "sm100"
    to_cc: str
    functions: tuple[str, ...] = ()
    flag: str = ""
    helpers: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return (self.flag,)

    def where(self) -> str:
        inside = f" in {' / '.join(self.functions)}()" if self.functions else ""
        return f"{self.flag} or-expressions{inside}"

    def key_pair(self) -> None:
        return None

    def for_gpu(self, cc: CC) -> bool:
        return self._for_major(cc)


class ComparisonRule(Rule):
    """What ``from_cc`` has, ``to_cc`` gets: a comparison of ``subject`` (as written:
    ``sm_version``, ``get_device_sm()``) with the SM int ``from_cc`` (120) also admits ``to_cc``
    (121): ``== 120`` -> ``in (120, 121)``, ``in (100, 120)`` -> ``in (100, 120, 121)``;
    optionally only inside ``functions``."""

    kind: ClassVar[RuleKind] = RuleKind.COMPARISON
    from_cc: int  # SM ints: 120
    to_cc: int
    subject: str = ""
    functions: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return (self.subject,)

    def where(self) -> str:
        inside = f" in {' / '.join(self.functions)}()" if self.functions else ""
        return f"{self.subject} == {self.from_cc}{inside}"

    def key_pair(self) -> None:
        return None

    def for_gpu(self, cc: CC) -> bool:
        """For the GPU whose SM int is ``to_cc`` (121: a GB10) alone: ``from_cc``'s GPU has it."""
        return cc.major * 10 + cc.minor == int(self.to_cc)

    def meant_for(self, major: int) -> bool:
        return int(self.to_cc) // 10 == major


class BackportRule(Rule):
    """An upstream change carried as its diff, to exactly the files it names."""

    kind: ClassVar[RuleKind] = RuleKind.BACKPORT
    diff: bytes = b""  # the upstream diff
    origin: Origin | None = None  # where it comes from
    made_on: str | None = None  # the release a three-way merge takes its base from
    refresh: tuple[Refresh, ...] = ()  # how some releases take it

    def names(self) -> tuple[str, ...]:
        return ()  # its files are named exactly

    def where(self) -> str:
        cited = "" if self.origin is None else f"{self.origin.cite()} ({self.origin.title}), "  # (the loader gives every one its origin)
        return f"{cited}in {', '.join(self.files)}"

    def wants(self, path: str, data: bytes) -> bool:
        return path in self.files

    def for_gpu(self, cc: CC) -> bool:
        return self._for_major(cc)

    def missing_from(self, present: Container[str]) -> tuple[str, ...]:
        """The files it changes that ``present`` lacks, when it holds some of them: a release
        holding none has nothing of the change to carry (as a table rule finds no table), one
        holding some would get half of it."""
        gone = tuple(f for f in self.files if f not in present)
        return gone if len(gone) < len(self.files) else ()

    def landed(self, version: str | None) -> bool:
        """Whether it is upstream in ``version`` (the release it landed in, or later)."""
        from patchkit.versions import at_least

        return self.origin is not None and bool(version) and at_least(version, self.origin.landed_in)


# Each kind of rule, its class: the one table a new kind is added to (``load`` reads a rule
# of the data through it; ``rewrite.rules.REWRITES`` gives each kind its rewrite).
RULES: dict[RuleKind, type[Rule]] = {
    cls.kind: cls for cls in (DictKeyRule, ListMemberRule, PredicateRule, BackportRule, ComparisonRule)
}
