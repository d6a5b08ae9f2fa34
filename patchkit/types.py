"""The values that travel between the stages: what a change is, and what is applied.

Ground floor: nothing here imports another patchkit module but errors.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from patchkit.cc import Key

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10

    class StrEnum(str, Enum):
        """A str whose value is what it prints (Python 3.11's enum.StrEnum)."""

        def __str__(self) -> str:
            return self.value

        __format__ = str.__format__

FORMAT = 1  # of state.json and journal.json

_NO_DEFAULT = object()


class FrozenError(AttributeError):
    """A field of a ``Value`` was assigned or deleted after it was made."""


class Value:
    """An immutable value with named fields, what a frozen dataclass is, made at import without
    compiling code (a dataclass generates and compiles its methods when it is defined: about
    4 M instructions each, at every start of patchkit).

    The fields are the annotated names of the class and its bases, bases first, but a
    ``ClassVar``'s; a field given a value in the class body has it as its default.  ``Sub(1, b=2)``
    (``class Sub(Value, kw_only=True)``: by keyword only); equal to a value of the same class with
    equal fields, hashed as them, ``Sub(a=1, b=2)`` as its repr, ``_replace(**changes)`` a copy."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _defaults: dict[str, object] = {}
    _kw_only = False

    def __init_subclass__(cls, kw_only: bool = False, **kw) -> None:
        super().__init_subclass__(**kw)
        fields, defaults = list(cls._fields), dict(cls._defaults)
        own = cls.__dict__.get("__annotations__", {})
        for name, hint in own.items():
            if (hint if isinstance(hint, str) else repr(hint)).startswith(("ClassVar", "typing.ClassVar")):
                continue
            if name not in fields:
                fields.append(name)
            defaults.pop(name, None)
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
        cls._kw_only = kw_only or cls._kw_only
        if not cls._kw_only:  # positional: a field without a default comes before those with one
            required = [n for n in fields if n not in defaults]
            if fields[: len(required)] != required:
                raise TypeError(f"{cls.__name__}: a field without a default follows one with a default")
        cls._fields, cls._defaults = tuple(fields), defaults

    def __init__(self, *args, **kw) -> None:
        fields = self._fields
        name = type(self).__name__
        if args and self._kw_only or len(args) > len(fields):
            raise TypeError(f"{name}() takes {0 if self._kw_only else len(fields)} positional arguments, {len(args)} given")
        values = dict(zip(fields, args, strict=False))  # fewer args: the rest by keyword or default
        for key in kw:
            if key in values or key not in fields:
                raise TypeError(f"{name}() got {'multiple values for' if key in values else 'an unexpected'} argument {key!r}")
        values.update(kw)
        if len(values) < len(fields):
            for key in fields:
                if key not in values:
                    value = self._defaults.get(key, _NO_DEFAULT)
                    if value is _NO_DEFAULT:
                        raise TypeError(f"{name}() missing argument {key!r}")
                    values[key] = value
        self.__dict__.update(values)

    def _values(self) -> tuple:
        return tuple(self.__dict__[f] for f in self._fields)

    def _replace(self, **changes):
        return type(self)(**{**self.__dict__, **changes})

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{f}={self.__dict__[f]!r}' for f in self._fields)})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")


class Status(StrEnum):
    """What became of a table, a fix, a release or a target: one name each, in lines, in
    --json and in the manifests (a member is its word: it prints and compares as it)."""

    PATCHED = "patched"
    ALREADY_UPSTREAM = "already upstream"
    NOTHING_TO_PATCH = "nothing to patch"
    CANNOT_APPLY = "cannot apply"  # a rule of the fix does not fit this release (it says why)
    INCOMPLETE = "incomplete"  # the rules apply, but a gate on the feature's path still refuses the GPU (named)
    NOT_NEEDED_HERE = "not needed here"  # --to-cc auto: the machine lacks what the fix needs, the release turns off cleanly
    ALREADY_APPLIED = "already applied"
    NOTHING_TO_REVERT = "nothing to revert"
    ERROR = "error"
    # A fix at a target, judged for this machine's GPUs (doctor, --to-cc auto)
    MISSING = "missing"  # its keys, members or flags are missing
    IN_EFFECT = "in effect"
    NOT_FOR_THESE = "not for these GPUs"  # no fix for the GPUs' major: the fixes copy SM100's keys for SM12x
    # A cached bytecode file against its source
    FRESH = "fresh"
    STALE = "stale"
    INVALID = "invalid"

    @classmethod
    def parse(cls, word: object) -> Status | None:
        """The status a document spells (a manifest's, a state's), or None if it is none."""
        try:
            return cls(word)
        except (ValueError, TypeError):
            return None


# The names the stages import (each is the Status member, not a second definition).
PATCHED, ALREADY_UPSTREAM, NOTHING_TO_PATCH = Status.PATCHED, Status.ALREADY_UPSTREAM, Status.NOTHING_TO_PATCH
CANNOT_APPLY, INCOMPLETE, NOT_NEEDED_HERE = Status.CANNOT_APPLY, Status.INCOMPLETE, Status.NOT_NEEDED_HERE
ALREADY_APPLIED, NOTHING_TO_REVERT, ERROR = Status.ALREADY_APPLIED, Status.NOTHING_TO_REVERT, Status.ERROR
FRESH, STALE, INVALID = Status.FRESH, Status.STALE, Status.INVALID


class Reason(StrEnum):
    """Why a fix, a target or a recorded state stands as it does: one code per kind of reason.
    The judge and the planner return reasons as values (each carries its ``code``); ``render``
    says them, and every --json judgement gives the code beside the sentence.  docs/REFERENCE.md
    lists them all."""

    # A fix at a target, judged for the GPUs (judge.here: doctor, --to-cc auto)
    LACKS_KEY = "lacks-key"  # tables, lists or gates lack the key, member or flag the fix adds
    NO_TABLE = "no-table"  # the release has no table, list or gate the fix looks for
    REWRITE_FAILED = "rewrite-failed"  # a file the fix patches cannot be rewritten (it says why)
    CANNOT_APPLY = "cannot-apply"  # the release's manifest: a rule of the fix does not fit it
    GATES_LEFT = "gates-left"  # the release's manifest: a gate on the feature's path still refuses the GPU
    # What this machine lacks, and what follows for a fix
    NO_MULTICAST = "no-multicast"  # one GPU, or GPUs linked by PCIe only
    NO_NVCC = "no-nvcc"
    NOT_NEEDED_HERE = "not-needed-here"  # the machine lacks what the fix needs, and the release turns off cleanly
    CLEAN_START_ONLY = "clean-start-only"  # the fix only turns a crash into a clean start here
    TURNED_ON = "turned-on"  # an opt-in fix is needed: the release turns the feature on by itself
    # A recorded state of another release (plan.release_changed)
    OTHER_VERSION = "other-version"  # another version is there now
    ORIGINALS_AGAIN = "originals-again"  # the patched files are the originals again
    REINSTALLED = "reinstalled"  # a patched file is what pip installed
    STATE_NO_LONGER_APPLIES = "state-no-longer-applies"  # verify: so the recorded state is not used
    # What verify finds at a target (plan.verify)
    PENDING = "pending"  # an interrupted transaction waits to be finished
    NOT_A_DICT = "not-a-dict"  # a table the fix patches is not a dict
    NO_KEY = "no-key"  # a table lacks the key (the patch is not applied)
    KEY_NOT_ADDED = "key-not-added"  # a table has the key, equal to the one it copies, not added by patchkit
    KEY_DIFFERS = "key-differs"  # a table's key differs from the one it copies
    STALE_BYTECODE = "stale-bytecode"
    FILE_MISSING = "file-missing"  # a file an upstream change the fix carries changes is not there
    JIT_NOT_CHECKED = "jit-not-checked"  # FlashInfer's JIT builds could not be checked
    STALE_JIT_BUILD = "stale-jit-build"  # built before the patched sources
    PREBUILT_JIT_BUILD = "prebuilt-jit-build"  # a prebuilt module loaded instead of the patched sources
    # What apply and revert plan (plan.plan_apply, plan_revert): their notes
    NO_SHIPPED_PATCH = "no-shipped-patch"  # none for this release or this cc pair: generated from the files
    LOCAL_EDITS = "local-edits"  # files differ from the shipped patch's pre-image: generated from the files
    OUTSIDE_SHIPPED_PATCH = "outside-shipped-patch"  # files it leaves alone would change too: generated from the files
    ALREADY_POST_IMAGE = "already-post-image"  # the files already hold the shipped patch's post-image
    NOTHING_LOOKED_FOR = "nothing-looked-for"  # nothing the fixes look for in the files
    NO_RULE = "no-rule"  # no rule of the fixes asked for patches the project
    LEFT_OUT = "left-out"  # a fix the release's manifest says cannot apply whole, not named: left out
    RESTORING = "restoring"  # every table already has the key: the originals are restored
    REPLACING = "replacing"  # the applied patch is replaced (what differs)
    EDITED_AFTER_APPLY = "edited-after-apply"  # revert --force: the edited copy is kept in the state dir
    NEITHER_IMAGE = "neither-image"  # revert: a file holds neither the pre- nor the post-image of the shipped patch
    NO_STATE = "no-state"  # revert: no state, and no shipped patch to recognise the files by
    ORIGINAL_RELEASE = "original-release"  # revert: the files hold the original release


class Change(NamedTuple):
    """One file's bytes before and after a transaction."""

    path: str  # repository path
    before: bytes
    after: bytes


class AppliedFile(NamedTuple):
    path: str
    pre_sha256: str
    post_sha256: str
    tables: list = []  # never mutated


class Applied(NamedTuple):
    """The patch that is applied to a target."""

    version: str | None
    source: str  # "shipped patch patches/0.5.9/0001-...patch" or "generated from the checkout"
    patch_id: str  # sha256 over the post-images: two applies with the same id wrote the same bytes
    from_cc: Key  # the pair as the project keys it (12, "12.0"), as state.json has always written it
    to_cc: Key
    patchkit: str
    files: list[AppliedFile]

    def fixes(self) -> list[str]:
        """The fixes whose changes this records, in the order first recorded (a state written
        before series names none: its tables carry no fix)."""
        return list(dict.fromkeys(t["fix"] for f in self.files for t in f.tables if isinstance(t, dict) and t.get("fix")))

    def to_json(self) -> dict:
        doc = self._asdict()
        doc["files"] = [f._asdict() for f in self.files]
        return {"format": FORMAT, **doc}

    @classmethod
    def from_json(cls, doc: dict) -> Applied:
        files = [AppliedFile(**f) for f in doc["files"]]
        fields = {k: doc[k] for k in ("version", "source", "patch_id", "from_cc", "to_cc", "patchkit")}
        return cls(files=files, **fields)
