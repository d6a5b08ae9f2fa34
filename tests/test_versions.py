"""Release versions ordered as PEP 440 orders them (``packaging.version``, pip's order):
pre-releases, post-releases, dev releases and local versions, the real releases in the
order they came out, and text that is no version sorted, never raised on."""

from __future__ import annotations

import itertools
import random

import pytest

from patchkit.versions import after, at_least, in_range, is_release_tag, is_version, public, release_key, version_key
from support.repos import ROOT


def ordered(*versions: str) -> None:
    """Each of ``versions`` sorts strictly before the next, from any starting order."""
    for a, b in itertools.combinations(versions, 2):
        assert version_key(a) < version_key(b), (a, b)
    shuffled = list(versions)
    random.Random(0).shuffle(shuffled)
    assert sorted(shuffled, key=version_key) == list(versions)


def test_pre_releases_come_before_their_release() -> None:
    ordered("0.6.0.dev1", "0.6.0.dev2", "0.6.0a1", "0.6.0a2", "0.6.0b1", "0.6.0rc0", "0.6.0rc1", "0.6.0rc2", "0.6.0")


def test_post_releases_come_after_their_release_and_before_the_next() -> None:
    ordered("0.5.4", "0.5.4.post1", "0.5.4.post2", "0.5.4.post3", "0.5.4.post10", "0.5.5rc0", "0.5.5")


def test_numbers_are_numbers_not_text() -> None:
    ordered("0.5.9", "0.5.10", "0.5.11", "0.6.0", "0.10.0", "1")


def test_a_local_version_comes_after_its_public_release() -> None:
    """``0.5.9+cu128`` (a local build of 0.5.9) sorts after 0.5.9 and before 0.5.9.post1, as pip sorts it:
    before packaging, it sorted below every 0.5 release, as text that is no version."""
    ordered("0.5.9", "0.5.9+cu128", "0.5.9+cu130", "0.5.9.post1", "0.5.10")


def test_pep_440_orders_what_the_suffixes_mean() -> None:
    """A pre-release's post-release is still a pre-release; a post-release's dev release comes after
    the release (before packaging, only the last suffix counted: these three pairs came out reversed)."""
    ordered("1.0rc1", "1.0rc1.post1", "1.0")
    ordered("1.0", "1.0.post1.dev1", "1.0.post1")
    ordered("1.0a1.dev1", "1.0a1")


def test_the_same_version_written_twice_sorts_by_its_text() -> None:
    assert version_key("0.5") != version_key("0.5.0")
    assert sorted(["0.5.0", "0.5", "v0.5.0"], key=version_key) == ["0.5", "0.5.0", "v0.5.0"]
    assert version_key("v0.5.4.post3") > version_key("0.5.4.post2")  # a tag's v counts for nothing


def test_text_that_is_no_version_sorts_below_the_releases_it_starts_with() -> None:
    ordered("banana", "0.4.9", "0.5.x", "0.5.dev0", "0.5", "0.5.1")


def test_the_real_releases_sort_as_they_came_out() -> None:
    """The shipped series' folders (real releases of SGLang, FlashInfer and vLLM), in the order the
    releases came out: post-releases after their release and before the next, 0.5.9 before 0.5.10."""
    def shipped(folder: str) -> list[str]:
        return sorted((p.name for p in (ROOT / folder).iterdir() if is_version(p.name)), key=version_key)

    assert shipped("patches")[:16] == ["0.4.10.post2", "0.5.1", "0.5.1.post1", "0.5.1.post2", "0.5.1.post3", "0.5.2", "0.5.3",
                                       "0.5.3.post1", "0.5.3.post2", "0.5.3.post3", "0.5.4", "0.5.4.post1", "0.5.4.post2",
                                       "0.5.4.post3", "0.5.5", "0.5.5.post1"]
    assert shipped("patches")[23:27] == ["0.5.8.post1", "0.5.9", "0.5.10", "0.5.10.post1"]
    assert shipped("patches/flashinfer")[-7:] == ["0.6.15", "0.6.15.post1", "0.6.16", "0.6.16.post1", "0.6.16.post2",
                                                  "0.6.16.post3", "0.6.16.post4"]
    assert shipped("patches/vllm")[:3] == ["0.10.2", "0.11.0", "0.11.1"] and shipped("patches/vllm")[-1] == "0.33.0"
    for folder in ("patches", "patches/flashinfer", "patches/vllm"):
        versions = shipped(folder)
        assert all(version_key(a) < version_key(b) for a, b in zip(versions, versions[1:], strict=False))


@pytest.mark.parametrize("version", ["0.5.10b2.post1.dev3", "1.0rc1.post1", "0.5.9"])
def test_release_versions_in_their_normal_form(version: str) -> None:
    assert is_version(version) and is_release_tag(f"v{version}")


@pytest.mark.parametrize("version", ["0.5.9.dev1.post1", "0.5rc1rc2", "0.5.9+cu128", "1!0.5", "0.5.9.post", "0.5RC1"])
def test_not_release_versions_in_their_normal_form(version: str) -> None:
    """Suffixes out of PEP 440's order or twice, a local version, an epoch, a number left out, capitals."""
    assert not is_version(version) and not is_release_tag(f"v{version}")


def test_a_range_takes_a_local_version_as_its_public_release() -> None:
    """PEP 440 ignores a local label when the specifier has none: ``<=0.5.9`` admits ``0.5.9+cu128``.
    By version_key alone, 0.5.9+cu128 sorts above 0.5.9 and fell out of every range ending there."""
    assert version_key("0.5.9+cu128") > version_key("0.5.9")  # display order stays PEP 440's
    assert in_range("0.5.9+cu128", "0.5.3", "0.5.9") and in_range("0.5.9+cu128.torch27", "0.5.9", "0.5.9")
    assert in_range("0.5.3+cu128", "0.5.3", "0.5.9") and not in_range("0.5.2+cu128", "0.5.3", "0.5.9")
    assert not in_range("0.5.9.post1", "0.5.3", "0.5.9") and not in_range("0.5.9.post1+cu128", None, "0.5.9")
    assert not in_range("0.5.10+cu128", "0.5.3", "0.5.9") and not in_range("0.5.9rc1+cu128", "0.5.9", None)
    assert in_range("v0.5.9+cu128", None, "0.5.9") and not in_range(None, None, None)
    assert at_least("0.6.17+cu129", "0.6.17") and not at_least("0.6.16.post4+cu129", "0.6.17")


def test_a_range_takes_the_same_release_written_twice_as_one() -> None:
    """``0.5`` is ``0.5.0`` to a specifier: both ends of a range admit it (the text tie-break of
    version_key is for a stable display order only)."""
    assert in_range("0.5", "0.5.0", "0.5.0") and in_range("0.5.0", "0.5", "0.5")
    assert release_key("0.5") == release_key("0.5.0") == release_key("v0.5.0+cu128")


def test_public_drops_the_local_label_and_the_tags_v() -> None:
    assert [public(v) for v in ("0.5.9+cu128", "v0.5.4.post3+cu129.torch28", "0.5.9", "0.5.x")] == \
        ["0.5.9", "0.5.4.post3", "0.5.9", "0.5.x"]


# Final releases and their post-releases compare without packaging (the commands' ranges are of
# them); every other version is packaging's.  Both orders must be one.
MIXED = ["0", "0.0", "0.5", "0.5.0", "0.5.4", "0.5.4.post2", "0.5.4.post3", "0.5.4.0.post3", "0.5.5rc0", "0.5.9",
         "0.5.9+cu128", "v0.5.9", "0.5.9.post0", "0.5.9.post10", "0.5.9-1", "0.5.9.dev1", "0.5.10", "0.5.13.post1",
         "0.6.0rc1", "0.6.0", "1!0.5", "10.0", "00.5", "0.5.x"]


def test_ranges_of_plain_releases_are_packagings_ranges() -> None:
    def packaging_in(version: str, since: str | None, until: str | None) -> bool:
        key = release_key(version)
        return (since is None or key >= release_key(since)) and (until is None or key <= release_key(until))

    for version, since, until in itertools.product(MIXED, [*MIXED, None], [*MIXED, None]):
        assert in_range(version, since, until) == packaging_in(version, since, until), (version, since, until)
    for a, b in itertools.product(MIXED, MIXED):
        assert after(a, b) == (version_key(a) > version_key(b)), (a, b)


def test_is_version_is_what_the_normal_form_pattern_matches_whole() -> None:
    """``is_version`` answers as ``re.fullmatch`` of PEP 440's normal form does, for the names of the shipped
    series' folders (real releases, and what else is there) and 20,000 strings made of the pieces
    of versions, Unicode digits among them."""
    import re

    pattern = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")
    pieces = ["0", "1", "12", "٣", "²", ".", "a", "b", "rc", "c", ".post", ".dev", "post", "dev", "+", "v", "-", ""]
    rng = random.Random(20261205)
    real = [p.name for folder in ("patches", "patches/flashinfer", "patches/vllm") for p in (ROOT / folder).iterdir()]
    texts = real + ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 7))) for _ in range(20_000)]
    wrong = [t for t in texts if is_version(t) != (pattern.fullmatch(t) is not None)]
    assert wrong == []
    assert sum(is_version(t) for t in texts) > 1000  # both answers are common among them
