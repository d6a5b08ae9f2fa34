"""What ``apply`` writes, from the files' bytes, the recorded state, its originals and the
shipped patch: pure, a ``Plan`` out (docs/ARCHITECTURE.md, "plan")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit import __version__
from patchkit.digest import sha256
from patchkit.errors import BadInput, Refused
from patchkit.match import mentions
from patchkit.patch.manifest import Shipped
from patchkit.plan.plans import APPLY, Plan
from patchkit.plan.reasons import (
    AlreadyPostImage,
    LocalEdits,
    NoShippedPatch,
    NothingLookedFor,
    OutsideShippedPatch,
    Replacing,
    Restoring,
    no_shipped_words,
)
from patchkit.types import (
    ALREADY_APPLIED,
    ALREADY_UPSTREAM,
    NOTHING_TO_PATCH,
    Applied,
    AppliedFile,
    Change,
    Files,
    FromShipped,
    Generated,
    Source,
)

if TYPE_CHECKING:  # for the annotations only
    from collections.abc import Callable

    from patchkit.cc import Key
    from patchkit.fixes.kinds import Rule
    from patchkit.patch.read import FilePatch
    from patchkit.plan.plans import Note
    from patchkit.rewrite.found import Found
    from patchkit.rewrite.rules import Read


def _patch_id(posts: dict[str, bytes]) -> str:
    return sha256("".join(f"{p}\0{sha256(d)}\n" for p, d in sorted(posts.items())).encode())


def from_shipped(base: dict[str, bytes], shipped: Shipped) -> tuple[dict[str, bytes], dict[str, tuple[int, int]]] | None:
    """Post-images from the shipped patch if ``base`` is exactly its pre-image, else None; with
    each file's lines added and removed as the patch's hunks count them (``_counted``)."""
    from patchkit.patch import read as patchread

    files = shipped.files
    if any(f.path not in base or sha256(base[f.path]) != f.pre_sha256 for f in files):
        return None
    out = {}
    sections = shipped.sections()
    for f in files:
        post = patchread.apply(base[f.path], sections[f.path], shipped.name)
        if sha256(post) != f.post_sha256:
            raise BadInput(shipped.name, f"corrupt patch: applying it to {f.path} does not give the manifest's post-image")
        out[f.path] = post
    return out, {path: _counted(section) for path, section in sections.items()}


def generated(base: dict[str, bytes], rules: tuple[Rule, ...], read: Read | None = None, root: str = "", version: str | None = None
              ) -> tuple[dict[str, bytes], list[Found]]:
    """Post-images made by the rules' rewrites from ``base`` (changed files only), and all
    they found; ``read`` gives another file of the release (a predicate's helper)."""
    from patchkit.rewrite.rules import rewrite_file  # LibCST: only when no shipped patch fits

    posts: dict[str, bytes] = {}
    found: list[Found] = []
    for path, data in sorted(base.items()):
        result = rewrite_file(data, path, rules, read, root, version=version)
        found += [t.at(path) for t in result.found]
        if result.changed:
            posts[path] = result.source
    return posts, found


def _outside(base: dict[str, bytes], shipped: Shipped, rules: tuple[Rule, ...], read: Read | None, root: str, version: str | None) -> list[str]:
    """The candidate files the shipped patch leaves alone that the rules would change.  A file
    there that names what a rule looks for and cannot be judged (it does not parse) is a
    RewriteError naming it, as verify names it: a patch is never called applied while verify
    would fail on a file beside it."""
    names = tuple(dict.fromkeys(n for r in rules for n in r.names()))
    patched = {f.path for f in shipped.files}
    others = {p: d for p, d in base.items() if p not in patched and mentions(d, names)}
    return sorted(generated(others, rules, read, root, version)[0]) if others else []


def plan_apply(
    current: dict[str, bytes],
    applied: Applied | None,
    originals: dict[str, bytes],
    shipped: Shipped | None,
    *,
    rules: tuple[Rule, ...],
    from_cc: Key,
    to_cc: Key,
    version: str | None,
    no_generate: bool = False,
    no_shipped: NoShippedPatch | None = None,
    read: Read | None = None,
    root: str = "",
    local: Callable[[str], str] | None = None,
    installed: bool = False,
) -> Plan:
    """What ``apply`` writes.

    ``current``: the candidate files as they are; ``applied``/``originals``: what
    patchkit applied before and the bytes it replaced; ``shipped``: the patches for
    this version and the fixes chosen, if patchkit has them; ``rules``: the rules of the
    fixes chosen (for generating); ``no_shipped``: why there is no shipped patch (a
    note; default: none for ``version``); ``read`` and ``root``: for a predicate rule's helper (rewrite.rules);
    ``local``: how the target names a repository path in notes (``sglang/...`` when
    installed; default: as it is); ``installed``: a generated change is made from an installed
    package's files (else a checkout's).
    """
    local = local or (lambda path: path)
    notes: list[Note] = []
    base = dict(current)
    if applied:
        for f in applied.files:
            if f.path not in current:
                raise Refused(f.path, "was patched by patchkit and is now missing; restore it or run `patchkit revert --force`")
            if sha256(current[f.path]) not in (f.post_sha256, f.pre_sha256):
                raise Refused(
                    f.path,
                    "was edited after patchkit applied its patch; `patchkit revert --force` restores the "
                    "original and keeps your edited copy in the state dir",
                )
            base[f.path] = originals[f.path]

    posts: dict[str, bytes] | None = None
    found: list[Found] = []
    source: Source | None = None
    counts: dict[str, tuple[int, int]] = {}  # a shipped patch's lines added and removed, per file
    if shipped is not None:
        posts, counts = from_shipped(base, shipped) or (None, {})
        outside = None
        if posts is not None or not applied and all(
                f.path in base and sha256(base[f.path]) == f.post_sha256 for f in shipped.files):
            outside = _outside(base, shipped, rules, read, root, version)
        if outside:
            notes.append(OutsideShippedPatch(shipped.name, tuple(map(local, outside))))
            posts, counts = None, {}  # generated from the files: counted from them
        elif posts is not None:
            source = FromShipped(shipped.name)
            found = [t.at(f.path) for f in shipped.files for t in f.tables]
        elif not applied and outside is not None:
            return Plan(ALREADY_APPLIED, FromShipped(shipped.name), notes=(AlreadyPostImage(),))
        else:
            differing = [f.path for f in shipped.files if sha256(base.get(f.path, b"")) != f.pre_sha256]
            if no_generate:
                more = f" (and {len(differing) - 1} more)" if len(differing) > 1 else ""
                raise Refused(
                    differing[0],
                    f"differs from the pre-image of {shipped.name}{more} (a local edit?); --no-generate refuses to generate a patch",
                )
            notes.append(LocalEdits(shipped.name, tuple(map(local, differing))))
    else:
        no_shipped = no_shipped or NoShippedPatch(version)
        if no_generate:
            raise Refused(None, f"{no_shipped_words(no_shipped)}; --no-generate refuses to generate one")
        notes.append(no_shipped)

    if posts is None:
        posts, found = generated(base, rules, read, root, version)
        source = Generated(Files.INSTALLED if installed else Files.CHECKOUT)
        if not found:
            return Plan(NOTHING_TO_PATCH, source, notes=(*notes, NothingLookedFor()))

    desired = {path: posts.get(path, data) for path, data in base.items()}
    changes = [Change(p, current[p], desired[p]) for p in sorted(current) if current[p] != desired[p]]
    patched = {p: d for p, d in desired.items() if d != base[p]}
    if not patched:
        if changes:  # an earlier patch is applied and nothing is left to patch: restore
            return Plan(APPLY, source, changes, None, (*notes, Restoring()), found)
        return Plan(ALREADY_UPSTREAM, source, notes=notes, tables=found)
    assert source is not None  # set with posts: the shipped patch's, or generated above
    new = Applied(
        version=version,
        source=source,
        patch_id=_patch_id(patched),
        from_cc=from_cc,
        to_cc=to_cc,
        patchkit=__version__,
        files=[
            AppliedFile(p, sha256(base[p]), sha256(d), [t.to_json() for t in found if t.path == p and t.patched])
            for p, d in sorted(patched.items())
        ],
    )
    if not changes:
        return Plan(ALREADY_APPLIED, applied.source if applied else source, applied=new, tables=found)
    if applied:
        notes.append(_replacing(applied, new, local))
    counted = tuple((c.path, *counts[c.path]) for c in changes if c.path in counts and c.before == base[c.path])
    return Plan(APPLY, source, changes, new, notes, found, counted)


def _counted(section: FilePatch) -> tuple[int, int]:
    """The lines a file's section of a patch adds and removes (what ``git apply --numstat`` says)."""
    marks = [mark for hunk in section.hunks for mark, _ in hunk.body]
    return marks.count("+"), marks.count("-")


def _replacing(old: Applied, new: Applied, local: Callable[[str], str]) -> Replacing:
    """What differs between the applied patch and the one replacing it."""
    before, after = old.fixes(), new.fixes()
    changed = sorted({f.path for f in old.files} ^ {f.path for f in new.files}
                     | {f.path for f in old.files for g in new.files if f.path == g.path and f.post_sha256 != g.post_sha256})
    return Replacing((old.from_cc, old.to_cc), (new.from_cc, new.to_cc), tuple(f for f in after if f not in before),
                     tuple(f for f in before if f not in after), old.source, new.source, tuple(map(local, changed)))
