"""Release versions and tags: ``v0.5.4.post3`` <-> ``0.5.4.post3``, ordered as PEP 440 orders
them (``packaging.version``, the implementation pip uses).

A local version (``0.5.9+cu128``: a build of 0.5.9 from another index) sorts above its public
release for display, as PEP 440 orders it; every release-range check (``in_range``,
``at_least``) takes it as its public release instead, as PEP 440 matches a specifier without a
local label (``<=0.5.9`` admits ``0.5.9+cu128``)."""

from __future__ import annotations

from functools import lru_cache

from patchkit.text import Pattern

_LEADING = Pattern(r"\d+(\.\d+)*")


def tag_to_version(tag: str) -> str:
    return tag[1:] if tag.startswith("v") else tag


@lru_cache(maxsize=4096)  # the same few hundred versions are compared again and again
def version_key(version: str) -> tuple:
    """Sort key for versions such as ``0.5.10``, ``0.5.4.post3``, ``0.6.0rc1`` and ``0.5.9+cu128``
    (a tag's ``v`` dropped): PEP 440's order, then the text, so that ``0.5`` and ``0.5.0`` sort
    the same way every time.  Text that is no PEP 440 version sorts just below the releases of
    the numbers it starts with (``0.5.x`` below ``0.5.dev0``), never raises."""
    from packaging.version import InvalidVersion, Version  # imported when first ordering: a command's start stays fast

    text = tag_to_version(version)
    try:
        parsed = Version(text)
    except InvalidVersion:
        leading = _LEADING.match(text)
        none = Version("0")
        return (Version(leading.group()) if leading else none, 0, none, version)
    release = Version(f"{parsed.epoch}!{'.'.join(map(str, parsed.release))}")
    return (release, 1, parsed, version)


def _numbers(version: str) -> tuple | None:
    """A final release or its post-release (``0.5.9``, ``0.5.4.post2``) as PEP 440 orders it, which
    is what packaging compares for it: its numbers, trailing zeros dropped (``0.5`` is ``0.5.0``),
    then its post number (-1: none, below every post-release).  None for any other version (a
    pre- or dev-release, an epoch, a local label, another spelling): packaging orders those.  The
    fixes' ranges are of such releases: the commands compare them without importing packaging."""
    head, post, number = version.partition(".post")  # read as text: no expression compiled at start-up
    parts = head.split(".")
    if post and not number.isdecimal() or not all(p.isdecimal() for p in parts):
        return None
    numbers = [int(n) for n in parts]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers), int(number) if post else -1


def after(a: str, b: str) -> bool:
    """Whether ``a`` sorts after ``b`` (``version_key``'s order)."""
    x, y = _numbers(tag_to_version(a)), _numbers(tag_to_version(b))
    if x is not None and y is not None:
        return (x, a) > (y, b)  # version_key: the same Version, then the text
    return version_key(a) > version_key(b)


def public(version: str) -> str:
    """The public release of a version: its local label dropped (``0.5.9+cu128`` -> ``0.5.9``),
    a tag's ``v`` too."""
    return tag_to_version(version).partition("+")[0]


def release_key(version: str) -> tuple:
    """The key of ``public(version)`` for range checks: PEP 440's order with no tie broken by the
    text (``0.5`` is ``0.5.0``, as a specifier matches them)."""
    return version_key(public(version))[:3]


def in_range(version: str | None, since: str | None, until: str | None) -> bool:
    """Whether ``version`` lies in the release range since..until (both inclusive, None: open),
    a local version taken as its public release."""
    if version is None:
        return False
    plain = [_numbers(public(v)) for v in (version, "0" if since is None else since, "0" if until is None else until)]
    if None not in plain:
        key, low, high = plain
        return (since is None or key >= low) and (until is None or key <= high)
    key = release_key(version)
    return (since is None or key >= release_key(since)) and (until is None or key <= release_key(until))


def at_least(version: str | None, since: str) -> bool:
    """Whether ``version`` is ``since`` or a later release (a local version as its public release)."""
    return in_range(version, since, None)


def is_version(version: str) -> bool:
    """A release version in PEP 440's normal form (no epoch, no local part): digits and dots,
    then a pre-release, a post-release and a dev-release, each at most once and in that order
    (``0.5.9``, ``0.5.4.post2``, ``0.5.0rc1``, ``0.6.0a1.dev3``): what patchkit ships patches for
    and accepts as --version; packaging parses every one.  As the regular expression
    ``\\d+(\\.\\d+)*((a|b|rc)\\d+)?(\\.post\\d+)?(\\.dev\\d+)?`` matches it whole, read without
    compiling one (a command reads the tags at every start)."""
    rest = version
    for mark in (".dev", ".post"):  # from the end: each at most once, dev last
        head, found, number = rest.rpartition(mark)
        if found:
            if not number.isdecimal():  # str.isdecimal: the digits \d matches
                return False
            rest = head
    digits = len(rest)
    while digits and rest[digits - 1].isdecimal():
        digits -= 1
    if digits < len(rest):  # a pre-release: a, b or rc, then its number
        for mark in ("rc", "a", "b"):
            if rest.endswith(mark, 0, digits):
                rest = rest[: digits - len(mark)]
                break
    return all(part.isdecimal() for part in rest.split("."))


def is_release_tag(tag: str) -> bool:
    """``v`` followed by a version (``v0.5.9``, ``v0.5.4.post3``)."""
    return tag.startswith("v") and is_version(tag[1:])
