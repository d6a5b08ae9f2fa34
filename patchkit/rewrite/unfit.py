"""Why a rule does not fit a release, as a value: a code and the fields its words are made of
(docs/ARCHITECTURE.md, "Saved values").  A rewrite raises it as a ``Misfit`` (a RewriteError, its
message said here); a manifest keeps the value (``Unfit.to_json``) and says it again when read."""

from __future__ import annotations

from collections.abc import Callable

from patchkit.errors import RewriteError
from patchkit.text import printable
from patchkit.types import StrEnum
from patchkit.values import Value


class Misfit(StrEnum):
    """The code of each way a rule does not fit (saved in manifest.json)."""

    SAME_KEYS = "same-keys"  # --from-cc and --to-cc alike
    CANNOT_DECODE = "cannot-decode"
    CANNOT_PARSE = "cannot-parse"
    CANNOT_PARSE_LINE = "cannot-parse-line"
    CANNOT_PARSE_AT = "cannot-parse-at"
    NOT_A_DICT = "not-a-dict"
    NO_KEY_TO_COPY = "no-key-to-copy"
    NOT_EVALUATED = "not-evaluated"
    NOT_A_LIST = "not-a-list"
    NO_MEMBER_TO_FOLLOW = "no-member-to-follow"
    FLAG_NOT_AT_MODULE_LEVEL = "flag-not-at-module-level"
    DEFINITION_HOLDS_LITERALS = "definition-holds-literals"
    NOT_ONE_HELPER = "not-one-helper"
    HELPER_NOT_IMPORTED = "helper-not-imported"
    NO_OR_EXPRESSION = "no-or-expression"
    SAME_SPELLINGS = "same-spellings"
    FLAG_LACKS_SPELLING = "flag-lacks-spelling"
    HELPER_UNDEFINED = "helper-undefined"
    LINE_TOO_WIDE = "line-too-wide"
    CORRUPT_DIFF = "corrupt-diff"
    NOT_ON_BASE = "not-on-base"
    HUNK_CONFLICTS = "hunk-conflicts"
    NOT_AS_TEXT = "not-as-text"
    READS_UNDEFINED = "reads-undefined"
    NOT_IN_RELEASE = "not-in-release"  # a file a backport changes


def _hunk(number: int, header: str) -> str:
    return f"hunk {number} ({header})"


def _listed(names: list[str]) -> str:
    return ", ".join(names) or "none"


# Each code's words, from its fields (the error's message, after its path).
_WORDS: dict[Misfit, Callable[..., str]] = {
    Misfit.SAME_KEYS: lambda key: f"--from-cc and --to-cc are both {key!r}",
    Misfit.CANNOT_DECODE: lambda detail: f"cannot decode: {detail}",
    Misfit.CANNOT_PARSE: lambda detail: f"cannot parse: {detail}",
    Misfit.CANNOT_PARSE_LINE: lambda line, detail: f"cannot parse: line {line}: {detail}",
    Misfit.CANNOT_PARSE_AT: lambda line, column, detail: f"cannot parse: line {line}, column {column}: {detail}",
    Misfit.NOT_A_DICT: lambda name, scope: f"table {name} ({scope}) is not a dict literal; patchkit only rewrites literal tables",
    Misfit.NO_KEY_TO_COPY: lambda name, scope, key, keys: (
        f"table {name} ({scope}) has no key {key!r} to copy from (keys: {_listed(keys)})"),
    Misfit.NOT_EVALUATED: lambda name, scope, detail: f"table {name} ({scope}) cannot be evaluated: {detail}",
    Misfit.NOT_A_LIST: lambda name, scope: f"{name} ({scope}) is not a literal list or tuple; patchkit only rewrites literal lists",
    Misfit.NO_MEMBER_TO_FOLLOW: lambda name, scope, member, members: (
        f"{name} ({scope}) has no member {member!r} to follow (members: {_listed(members)})"),
    Misfit.FLAG_NOT_AT_MODULE_LEVEL: lambda flag, new_flag: (
        f"{flag} is not assigned at module level; patchkit copies its definition for {new_flag}"),
    Misfit.DEFINITION_HOLDS_LITERALS: lambda flag, literals: (
        f"the definition of {flag} holds literals ({', '.join(literals)}); patchkit only copies definitions made of names and calls"),
    Misfit.NOT_ONE_HELPER: lambda flag, spelling, names: (
        f"the definition of {flag} must name one helper with {spelling!r} (names: {_listed(names)})"),
    Misfit.HELPER_NOT_IMPORTED: lambda helper, new_helper: (
        f"{helper} is not imported at module level by 'from ... import'; patchkit imports {new_helper} next to it"),
    Misfit.NO_OR_EXPRESSION: lambda functions, flag: f"function {' / '.join(functions)} has no or-expression with {flag}",
    Misfit.SAME_SPELLINGS: lambda spelling: f"the capability spellings are both {spelling!r}",
    Misfit.FLAG_LACKS_SPELLING: lambda flag, spelling: f"flag {flag} does not contain {spelling!r}",
    Misfit.HELPER_UNDEFINED: lambda new_flag, helper, module: (
        f"cannot add {new_flag}: {helper} is not defined{'' if module is None else f' in {module}'} in this release"),
    Misfit.LINE_TOO_WIDE: lambda width, limit, line: f"the rewrite would make a line {width} columns wide, over black's {limit}: {line}",
    Misfit.CORRUPT_DIFF: lambda detail: f"corrupt diff: {detail}",
    Misfit.NOT_ON_BASE: lambda number, header, base: (
        f"{_hunk(number, header)} does not apply to {base}, the release the change was made on"),
    Misfit.HUNK_CONFLICTS: lambda number, header: f"{_hunk(number, header)} conflicts",
    Misfit.NOT_AS_TEXT: lambda number, header, base: (
        f"{_hunk(number, header)} does not apply as text" + (f" (its shipped patch merges it against {base})" if base else "")),
    Misfit.READS_UNDEFINED: lambda names: f"the change reads {', '.join(names)}, which this release's file does not define",
    Misfit.NOT_IN_RELEASE: lambda change: f"not in this release ({change} changes it)",
}


class Unfit(Value):
    """How a rule does not fit a file: the code and its fields (JSON's values: names, numbers, lists)."""

    code: Misfit
    path: str | None
    fields: dict[str, object]

    def words(self) -> str:
        """What the error said: the path, then the code's words."""
        said = printable(_WORDS[self.code](**self.fields))
        return f"{printable(self.path)}: {said}" if self.path else said

    def to_json(self) -> dict[str, object]:
        return {"code": str(self.code), "path": self.path, "fields": dict(self.fields)}

    @classmethod
    def from_json(cls, doc: object) -> Unfit | None:
        """The value a manifest keeps; None when it is not one (a code or its fields unknown)."""
        if not isinstance(doc, dict) or not isinstance(fields := doc.get("fields"), dict):
            return None
        path, code = doc.get("path"), doc.get("code")
        if code not in set(Misfit) or path is not None and not isinstance(path, str):
            return None
        unfit = cls(Misfit(code), path, fields)
        try:
            unfit.words()
        except (TypeError, ValueError, KeyError):  # fields that are not the code's
            return None
        return unfit


class NoFit(RewriteError):
    """A rewrite's error with its value (``unfit``): the message is its words."""

    def __init__(self, path: str | None, reason: str, unfit: Unfit | None = None) -> None:
        super().__init__(path, reason)
        self.unfit = unfit


def no_fit(path: str | None, code: Misfit, **fields: object) -> NoFit:
    """The error to raise for ``code`` at ``path``, said from ``fields``."""
    unfit = Unfit(code, path, fields)
    return NoFit(path, _WORDS[code](**fields), unfit)
