"""The two shapes of a value with named fields, made at import without compiling code, read by a
type checker as dataclasses are (``typing.dataclass_transform``), and by ``inspect.signature``
through a real ``__signature__``.

A frozen dataclass generates its methods as source and compiles them when the class is
defined (about 4 M instructions each), and ``typing.NamedTuple`` evaluates a generated
``__new__`` and compiles every string annotation (about 0.9 M each): patchkit defines
hundreds of these classes, and apply, verify and revert build about fifty of them at every
start.  Here each class only collects its field names once; the methods are shared.

- ``Value``: an immutable object (what ``@dataclass(frozen=True)`` made): equal to a value of
  the same class with equal fields, hashed as them, with ``_fields``, ``_replace`` and ``_asdict``.
  A value is one of these unless it must be a tuple.
- ``Record``: a tuple with named fields (what ``typing.NamedTuple`` made): unpacked, indexed,
  ordered and written to JSON as a tuple, with ``_fields``, ``_field_defaults``, ``_make``,
  ``_replace`` and ``_asdict``; equal only to a record of the same class (never to a plain tuple).
  Where a value is unpacked, indexed or sorted as a tuple (a git tree's entries, a GPU, a link), or
  made by the thousand in a loop over a log, a binary or a tree (``logs/``, ``kernels/``, ``scan/``,
  ``rewrite/``: a tuple is made in C, a value's fields are set in Python).

Ground floor: nothing here imports another patchkit module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

if sys.version_info >= (3, 11) or TYPE_CHECKING:
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10 (typing_extensions is no dependency): for type checkers only
    _T = TypeVar("_T")

    def dataclass_transform(**kwargs: object) -> Callable[[_T], _T]:
        def mark(cls: _T) -> _T:
            cls.__dataclass_transform__ = kwargs  # type: ignore[attr-defined]  # any class takes the marker; _T is only the class's type
            return cls

        return mark

if TYPE_CHECKING:
    import inspect

    from typing_extensions import Self

_NO_DEFAULT = object()


class _Signature:
    """``cls.__signature__``: the constructor's parameters, one per field (keyword-only for a
    ``kw_only`` value), made when first asked (``inspect`` is not imported at a command's start)."""

    def __get__(self, obj: object, cls: type[Value] | type[Record]) -> inspect.Signature:
        import inspect

        kind = inspect.Parameter.KEYWORD_ONLY if getattr(cls, "_kw_only", False) else inspect.Parameter.POSITIONAL_OR_KEYWORD
        defaults = getattr(cls, "_defaults", None) or getattr(cls, "_field_defaults", {})
        hints: dict[str, object] = {}
        for klass in reversed(cls.__mro__):
            hints.update(klass.__dict__.get("__annotations__", {}))
        return inspect.Signature([
            inspect.Parameter(f, kind, default=defaults.get(f, inspect.Parameter.empty), annotation=hints.get(f, inspect.Parameter.empty))
            for f in cls._fields])


class FrozenError(AttributeError):
    """A field of a ``Value`` was assigned or deleted after it was made."""


def _is_classvar(hint: object) -> bool:
    return (hint if type(hint) is str else repr(hint)).startswith(("ClassVar", "typing.ClassVar"))


@dataclass_transform(frozen_default=True)
class Value:
    """An immutable value with named fields.

    The fields are the annotated names of the class and its bases, bases first, but a
    ``ClassVar``'s; a field given a value in the class body has it as its default.  ``Sub(1, b=2)``
    (``class Sub(Value, kw_only=True)``: by keyword only); equal to a value of the same class with
    equal fields, hashed as them, ``Sub(a=1, b=2)`` as its repr, ``_replace(**changes)`` a copy.  A
    class that defines ``__post_init__`` has it called once the fields are set (a check that
    raises ValueError), as a dataclass does."""

    __slots__ = ()
    __signature__ = _Signature()
    _fields: tuple[str, ...] = ()
    _defaults: dict[str, object] = {}
    _kw_only = False

    def __init_subclass__(cls, kw_only: bool = False, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if kw_only:
            cls._kw_only = True
        own = [(n, h) for n, h in cls.__dict__.get("__annotations__", {}).items() if not _is_classvar(h)]
        if not own:  # the fields and defaults of its base, which checked them (a reason's ``code`` only)
            return
        fields, defaults, body = list(cls._fields), dict(cls._defaults), cls.__dict__
        for name, _ in own:
            if name not in fields:
                fields.append(name)
            defaults.pop(name, None)
            if name in body:
                defaults[name] = body[name]
        if not cls._kw_only:  # positional: a field without a default comes before those with one
            required = [n for n in fields if n not in defaults]
            if fields[: len(required)] != required:
                raise TypeError(f"{cls.__name__}: a field without a default follows one with a default")
        cls._fields, cls._defaults = tuple(fields), defaults

    def __init__(self, *args: object, **kw: object) -> None:
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
        self.__post_init__()

    def __post_init__(self) -> None:
        """A subclass's check of its fields (none here)."""

    def _values(self) -> tuple[object, ...]:
        return tuple(self.__dict__[f] for f in self._fields)

    def _replace(self, **changes: object) -> Self:
        return type(self)(**{**self.__dict__, **changes})

    def _asdict(self) -> dict[str, Any]:  # Any: each field has its own type, read by name
        """The fields by name, in order (what ``--json`` and the saved state are made from)."""
        return {f: self.__dict__[f] for f in self._fields}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Value) or other.__class__ is not self.__class__:
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


class _Fields(type):
    """Makes a ``Record`` class: its fields are its own annotations, in order (every one: a
    record has no class variables); a field given a value in the class body has it as its
    default, and none without one may follow it.  A subclass of a record class adds no field."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: object) -> _Fields:  # Any: a class body holds anything
        ns.setdefault("__slots__", ())
        if "_fields" in ns or any(getattr(b, "_fields", ()) for b in bases):
            if "_fields" not in ns and ns.get("__annotations__"):
                raise TypeError(f"{name}: a subclass of a record adds no field")
            return super().__new__(mcls, name, bases, ns, **kw)
        fields = tuple(ns.get("__annotations__", ()))
        defaults: dict[str, object] = {}
        for i, field in enumerate(fields):
            if field in ns:
                defaults[field] = ns[field]
            elif defaults:
                raise TypeError(f"{name}: field {field} without a default follows one with a default")
            ns[field] = property(itemgetter(i), doc=f"field {i}")
        ns.update(_fields=fields, _field_defaults=defaults, __match_args__=fields)
        return super().__new__(mcls, name, bases, ns, **kw)


@dataclass_transform(frozen_default=True)
class Record(tuple[Any, ...], metaclass=_Fields):  # Any: each field has its own type, read by name
    """A tuple with named fields: ``class Sub(Record)`` with annotated fields, as
    ``typing.NamedTuple``; ``Sub(1, b=2)``, ``Sub(a=1, b=2)`` as its repr.  Equal to a record of
    the same class with equal fields, hashed as its fields' tuple."""

    __slots__ = ()
    __signature__ = _Signature()
    _fields: tuple[str, ...] = ()
    _field_defaults: dict[str, object] = {}

    def __new__(cls, *args: object, **kw: object) -> Self:
        if kw or len(args) != len(cls._fields):
            return tuple.__new__(cls, cls._arrange(args, kw))
        return tuple.__new__(cls, args)

    @classmethod
    def _arrange(cls, args: tuple[object, ...], kw: dict[str, object]) -> list[object]:
        """The fields' values in order, from ``args``, then ``kw``, then the defaults."""
        fields = cls._fields
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments, {len(args)} given")
        values = list(args)
        for field in fields[len(args):]:
            if field in kw:
                values.append(kw.pop(field))
            elif field in cls._field_defaults:
                values.append(cls._field_defaults[field])
            else:
                raise TypeError(f"{cls.__name__}() missing argument {field!r}")
        if kw:
            raise TypeError(f"{cls.__name__}() got an unexpected or repeated argument {next(iter(kw))!r}")
        return values

    @classmethod
    def _make(cls, iterable: Iterable[object]) -> Self:
        made = tuple.__new__(cls, iterable)
        if len(made) != len(cls._fields):
            raise TypeError(f"{cls.__name__} takes {len(cls._fields)} values, {len(made)} given")
        return made

    def _replace(self, **changes: object) -> Self:
        made = self._make(map(changes.pop, self._fields, self))
        if changes:
            raise ValueError(f"got unexpected field names: {list(changes)!r}")
        return made

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({', '.join(f'{f}={v!r}' for f, v in zip(self._fields, self, strict=True))})"

    def __getnewargs__(self) -> tuple[object, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:  # False, not NotImplemented: tuple's own would answer next
        return other.__class__ is self.__class__ and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__
