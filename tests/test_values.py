"""patchkit.values: ``Value`` behaves as the frozen dataclass it replaces, ``Record`` as the
``typing.NamedTuple`` it replaces but equal only to a record of its class (each checked against its
twin); ``match.Pattern`` as the
pattern ``re.compile`` makes."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from typing import ClassVar, NamedTuple

import pytest

from patchkit.values import FrozenError, Record, Value


class Base(Value):
    code: ClassVar[str] = "base"
    name: str
    found: str | None


class Sub(Base):
    code: ClassVar[str] = "sub"
    path: str = ""


class Keywords(Value, kw_only=True):
    a: int
    b: tuple = ()


@dataclasses.dataclass(frozen=True)
class SubTwin:
    name: str
    found: str | None
    path: str = ""


def test_a_value_has_its_fields_bases_first_and_its_defaults() -> None:
    assert Sub._fields == ("name", "found", "path") and Base._fields == ("name", "found")
    assert Sub("n", None) == Sub(name="n", found=None, path="") == Sub("n", found=None)
    assert (Sub("n", "f", "p").path, Sub.code, Sub("n", "f").code) == ("p", "sub", "sub")
    assert repr(Sub("n", None, "p")) == repr(SubTwin("n", None, "p")).replace("SubTwin", "Sub")


def test_values_are_equal_by_class_and_fields_and_hash_alike() -> None:
    assert Sub("n", "f") != Base("n", "f") and Base("n", "f") != ("n", "f")
    assert Sub("n", "f") != Sub("n", "g")
    assert hash(Sub("n", "f", "p")) == hash(SubTwin("n", "f", "p")) == hash(("n", "f", "p"))
    assert len({Sub("n", "f"), Sub("n", "f"), Sub("n", "g")}) == 2


def test_a_value_is_immutable() -> None:
    value = Sub("n", "f")
    with pytest.raises(FrozenError):
        value.name = "m"
    with pytest.raises(AttributeError):
        del value.name
    with pytest.raises(AttributeError):
        value.other = 1
    assert value._replace(path="p") == Sub("n", "f", "p") and value == Sub("n", "f")


def test_a_value_refuses_what_its_dataclass_refused() -> None:
    for call in (lambda: Sub("n"), lambda: Sub("n", "f", "p", "x"), lambda: Sub("n", "f", nam="x"),
                 lambda: Sub("n", "f", name="m"), lambda: Keywords(1), lambda: Keywords(b=())):
        with pytest.raises(TypeError):
            call()
    assert Keywords(a=1) == Keywords(a=1, b=()) and Keywords(a=1)._replace(b=(2,)).b == (2,)
    with pytest.raises(TypeError):
        type("Bad", (Value,), {"__annotations__": {"a": "int", "b": "int"}, "a": 1})


def test_a_value_is_copied_and_pickled() -> None:
    value = Sub("n", ("f",), "p")
    assert copy.copy(value) == copy.deepcopy(value) == pickle.loads(pickle.dumps(value)) == value


class Checked(Value):
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")


@dataclasses.dataclass(frozen=True)
class CheckedTwin:
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")


def test_a_value_checks_itself_as_its_dataclass_did() -> None:
    """``__post_init__`` runs once the fields are set, on a copy too, and for a subclass."""
    for make in (Checked, CheckedTwin):
        assert make(1, 2).high == 2
        with pytest.raises(ValueError, match="low above high"):
            make(3, 2)
    with pytest.raises(ValueError, match="low above high"):
        Checked(1, 2)._replace(low=5)
    with pytest.raises(ValueError, match="low above high"):
        type("Sub", (Checked,), {"__annotations__": {"note": "str"}, "note": ""})(3, 2)
    assert Sub("n", None)._asdict() == {"name": "n", "found": None, "path": ""} == dataclasses.asdict(SubTwin("n", None))


class Pair(Record):
    """Two things."""

    first: str
    second: int | None
    rest: tuple = ()

    def both(self) -> tuple:
        return self.first, self.second


class PairTwin(NamedTuple):
    first: str
    second: int | None
    rest: tuple = ()


def test_a_record_is_its_named_tuple_twin() -> None:
    pair, twin = Pair("a", 1), PairTwin("a", 1)
    assert pair != twin and pair != ("a", 1, ()) and tuple(pair) == twin == ("a", 1, ()) and hash(pair) == hash(twin)
    assert (pair.first, pair[1], pair.rest, *pair) == ("a", 1, (), "a", 1, ())
    assert Pair._fields == PairTwin._fields and Pair._field_defaults == PairTwin._field_defaults
    assert Pair.__match_args__ == PairTwin.__match_args__
    assert repr(pair) == repr(twin).replace("PairTwin", "Pair") and pair.both() == ("a", 1)
    assert pair._asdict() == twin._asdict() and json.dumps(pair) == json.dumps(twin)
    assert tuple(pair._replace(second=2, rest=(3,))) == twin._replace(second=2, rest=(3,))
    assert tuple(Pair._make(["b", 2, ()])) == PairTwin._make(["b", 2, ()]) and type(Pair._make("bcd")) is Pair
    assert tuple(Pair(second=2, first="b")) == PairTwin(second=2, first="b") and Pair("b", second=2) == Pair("b", 2, ())
    assert copy.copy(pair) == copy.deepcopy(pair) == pickle.loads(pickle.dumps(pair)) == pair
    assert type(pickle.loads(pickle.dumps(pair))) is Pair and isinstance(pair, tuple)


def test_a_record_refuses_what_its_named_tuple_refused() -> None:
    pair = Pair("a", 1)
    for call in (lambda: Pair("a"), lambda: Pair("a", 1, (), 4), lambda: Pair("a", 1, first="b"), lambda: Pair("a", 1, other=2),
                 lambda: Pair._make(["a"])):
        with pytest.raises(TypeError):
            call()
    with pytest.raises(ValueError):
        pair._replace(other=1)
    with pytest.raises(AttributeError):
        pair.first = "b"
    with pytest.raises(AttributeError):
        pair.other = 1
    with pytest.raises(TypeError):
        type("Bad", (Record,), {"__annotations__": {"a": "int", "b": "int"}, "a": 1})


def test_values_and_records_show_their_fields_to_inspect_and_type_checkers() -> None:
    import inspect

    assert str(inspect.signature(Sub)) == "(name: 'str', found: 'str | None', path: 'str' = '')"
    assert str(inspect.signature(Keywords)) == "(*, a: 'int', b: 'tuple' = ())"
    assert str(inspect.signature(Pair)) == "(first: 'str', second: 'int | None', rest: 'tuple' = ())"
    assert "__dataclass_transform__" in vars(Value) and "__dataclass_transform__" in vars(Record)


def test_a_subclass_of_a_record_adds_methods_not_fields() -> None:
    class More(Pair):
        def third(self) -> str:
            return self.first * 3

    assert More("a", 1).third() == "aaa" and More._fields == Pair._fields
    with pytest.raises(TypeError):
        type("Fields", (Pair,), {"__annotations__": {"x": "int"}})


def test_a_pattern_is_compiled_at_its_first_use_as_re_compiles_it() -> None:
    import re

    from patchkit.match import Pattern

    lazy = Pattern(rb"^(?:from|import)[ \t]", re.M)
    assert "finditer" not in vars(lazy)  # nothing compiled yet
    text = b"import os\nx = 1\nfrom a import b\n"
    assert [m.start() for m in lazy.finditer(text)] == [m.start() for m in re.compile(rb"^(?:from|import)[ \t]", re.M).finditer(text)]
    assert "finditer" in vars(lazy) and lazy.pattern == rb"^(?:from|import)[ \t]" and lazy.flags & re.M
    assert Pattern(r"\d+").fullmatch("12").group() == "12" and Pattern(r"\d+").fullmatch("1a") is None
