"""The compute-capability type: every spelling a user writes meets one ``CC``; each project gets
its own key from it; a cc no NVIDIA GPU has is refused by the parser, in one message."""

from __future__ import annotations

import pytest

from patchkit.cc import AUTO, CC, DOTTED, KNOWN, MAJOR, must_differ

NOT_NVIDIA = ("is not the compute capability of an NVIDIA GPU: NVIDIA's are 3.0 3.2 3.5 3.7 5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 "
              "7.5 8.0 8.6 8.7 8.8 8.9 9.0 10.0 10.1 10.3 11.0 12.0 12.1, written like 12.1, 12 (for 12.0) or sm_121a")


@pytest.mark.parametrize("text, pair, suffix, shown", [
    ("12", (12, 0), "", "12"),
    (" 12 ", (12, 0), "", "12"),
    ("12.0", (12, 0), "", "12.0"),
    ("12.1", (12, 1), "", "12.1"),
    (" 12.0\n", (12, 0), "", "12.0"),
    ("9.0", (9, 0), "", "9.0"),
    ("8.0", (8, 0), "", "8.0"),  # an A100
    ("10", (10, 0), "", "10"),
    ("11", (11, 0), "", "11"),  # Thor (CUDA 13)
    ("sm_120", (12, 0), "", "12.0"),
    ("sm_120a", (12, 0), "a", "sm_120a"),
    ("sm_121a", (12, 1), "a", "sm_121a"),
    ("SM_100F", (10, 0), "f", "sm_100f"),
    ("sm120", (12, 0), "", "12.0"),  # as a flag names it (is_sm120_supported)
    ("sm_90a", (9, 0), "a", "sm_90a"),
    ("sm_103", (10, 3), "", "10.3"),
])
def test_every_spelling_meets_one_cc(text: str, pair: tuple[int, int], suffix: str, shown: str) -> None:
    cc = CC.parse(text)
    assert (cc.pair(), cc.suffix, str(cc)) == (pair, suffix, shown)
    assert cc == CC(*pair)  # how it was written is no part of what it is
    assert hash(cc) == hash(CC(*pair))


@pytest.mark.parametrize("text", [
    "banana", "", " ", "12.", ".5", "1.2.3", "12a", "-1", "0", "99", "13", "12.5", "12.10", "12.00", "012", "16.0", "9999.0",
    "4", "1.0", "2.0", "sm_125a", "sm_1200", "sm_120x", "compute_120", "12.0a", "12 .0", "\u0661\u0662", "auto",
])
def test_a_value_no_nvidia_gpu_has_is_refused_in_one_message(text: str) -> None:
    shown = text if len(text) <= 40 else text[:40] + "..."
    with pytest.raises(ValueError) as exc:
        CC.parse(text)
    assert str(exc.value) == f"{shown!r} {NOT_NVIDIA}"


def test_a_long_value_is_cut_in_the_message() -> None:
    with pytest.raises(ValueError) as exc:
        CC.parse("1" * 100)
    assert str(exc.value) == f"'{'1' * 40}...' {NOT_NVIDIA}"


def test_every_known_cc_parses_every_way() -> None:
    """The list is NVIDIA's (the CUDA Programming Guide's compute capabilities, 3.0 to 12.1)."""
    assert KNOWN[0] == (3, 0) and KNOWN[-1] == (12, 1) and len(KNOWN) == 25 and list(KNOWN) == sorted(KNOWN)
    for major, minor in KNOWN:
        assert CC.parse(f"{major}.{minor}") == CC.parse(f"sm_{major}{minor}") == CC.parse(f"sm_{major}{minor}a") == CC(major, minor)
        assert CC.parse(str(major)) == CC(major, 0)  # a major alone: X.0 (every major NVIDIA has has an X.0)


@pytest.mark.parametrize("text, major_key, dotted_key", [
    ("12", 12, "12.0"), ("12.0", 12, "12.0"), ("12.1", 12, "12.1"), ("sm_120a", 12, "12.0"), ("sm_121a", 12, "12.1"),
    ("10.3", 10, "10.3"), ("9", 9, "9.0"),
])
def test_each_project_gets_its_own_key(text: str, major_key: int, dotted_key: str) -> None:
    """SGLang and FlashInfer key by major (12.0 and 12.1 are both 12), vLLM by "X.Y" (12 is "12.0")."""
    cc = CC.parse(text)
    assert (cc.key(MAJOR), cc.key(DOTTED)) == (major_key, dotted_key)
    assert type(cc.key(MAJOR)) is int and type(cc.key(DOTTED)) is str
    with pytest.raises(ValueError):
        cc.key("sm")


def test_architecture_names() -> None:
    assert (CC.parse("12").sm(), CC.parse("12.1").sm(), CC.parse("sm_121a").arch(), CC.parse("12.0").arch()) == (
        120, 121, "sm_121a", "sm_120")


@pytest.mark.parametrize("key, pair, shown", [(12, (12, 0), "12"), ("12.0", (12, 0), "12.0"), ("12.1", (12, 1), "12.1"),
                                              (" 10 ", (10, 0), "10"), (13, (13, 0), "13")])
def test_a_key_read_back(key, pair: tuple[int, int], shown: str) -> None:
    """A key as a project's source or a state.json writes it, read back unchecked (a release may name a later cc)."""
    assert (CC.of(key).pair(), str(CC.of(key))) == (pair, shown)


@pytest.mark.parametrize("key", [True, 12.0, None, "sm120", "12.", "12a", "", -1, b"12"])
def test_a_key_that_is_none(key) -> None:
    with pytest.raises(ValueError, match="is not a compute capability such as 12 or 12.0"):
        CC.of(key)


def test_auto_is_one_value() -> None:
    assert str(AUTO) == "auto" and AUTO != "auto" and AUTO != CC(12, 0)


def test_the_same_pair_message() -> None:
    assert must_differ(CC.parse("10"), CC.parse("10.0")) == "--to-cc must differ from --from-cc (--from-cc 10, --to-cc 10.0)"
    assert must_differ(CC.of(10), CC.parse("sm_100a"), "--cc") == "--cc must differ from --from-cc (--from-cc 10, --cc sm_100a)"
