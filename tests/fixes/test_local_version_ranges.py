"""A local version (``0.5.9+cu128``, a build of a release from another index, as its METADATA
says) is its public release in every release range of the shipped data (fixes' feature paths and
refreshes, backports' landed_in, effects' failures and default-on ranges, speedups' requirements),
as PEP 440 matches a specifier without a local label.  The cases at a range's last release (a
local label on it) fell just outside the range when version_key alone ordered them; those at a
first release (landed_in, since) are checked so that they stay in."""

from __future__ import annotations

from patchkit.fixes.effects import read_effects
from patchkit.fixes.load import read_fixes
from patchkit.fixes.speedups import read_speedups

FUSION = read_fixes()["allreduce-fusion"]
BACKPORT = next(r for r in FUSION.rules if r.kind == "backport")
EFFECTS = read_effects()


def test_feature_paths_take_a_local_build_of_their_last_release() -> None:
    ranges = {v: (p.since, p.until) for v in ("0.5.7+cu128", "0.5.13.post1+cu129", "0.5.20+cu130", "0.5.21+cu128")
              for p in [FUSION.path("sglang", v)]}
    assert ranges == {"0.5.7+cu128": ("0.5.3", "0.5.7"), "0.5.13.post1+cu129": ("0.5.8", "0.5.13.post1"),
                      "0.5.20+cu130": ("0.5.14", "0.5.20"), "0.5.21+cu128": ("0.5.21", None)}
    assert FUSION.path("sglang", "0.5.2+cu128") is None and FUSION.path("flashinfer", "0.5.0+cu128").since == "0.5.0"


def test_a_backport_refresh_and_its_landing_take_the_public_release() -> None:
    (refresh,) = BACKPORT.refresh
    assert (refresh.until, refresh.covers("0.6.5+cu128"), refresh.covers("0.6.6+cu128")) == ("0.6.5", True, False)
    assert BACKPORT.landed("0.6.17+cu129") and not BACKPORT.landed("0.6.16.post4+cu129")


def test_failures_and_default_on_ranges_take_a_local_build_of_their_last_release() -> None:
    fusion = EFFECTS["allreduce-fusion"]
    assert [(f.outcome, f.releases()) for f in fusion.failing("flashinfer", "0.6.16.post4+cu128")] == [("crash", "0.5.0 - 0.6.16.post4")]
    assert [(f.outcome, f.releases()) for f in fusion.failing("sglang", "0.5.23+cu128")] == [("off", "0.5.3 - 0.5.23")]
    assert [d.releases() for d in fusion.turned_on("sglang", "0.5.7+cu128")] == ["0.5.7"]
    assert [d.releases() for d in fusion.turned_on("sglang", "0.5.6.post2+cu128")] == ["0.5.4.post2 - 0.5.6.post2"]
    assert fusion.failing("flashinfer", "0.6.17+cu128") == [] and fusion.turned_on("sglang", "0.5.8+cu128") == []


def test_a_speedups_requirement_takes_the_public_release() -> None:
    speedup = next(sp for sp in read_speedups() if sp.name == "pcie-ipc-allreduce")
    sglang, flashinfer = speedup.requires
    assert (sglang.since, sglang.met("0.5.21+cu128"), sglang.met("0.5.20+cu128")) == ("0.5.21", True, False)
    assert (flashinfer.since, flashinfer.met("0.7.0+cu129"), flashinfer.met("0.6.18.post1+cu129")) == ("0.7.0", True, False)
    vllm = next(sp for sp in read_speedups() if sp.name == "vllm-pcie-ipc-allreduce").requires[0]
    assert (vllm.since, vllm.met("0.30.0+cu129"), vllm.met("0.29.0+cu129")) == ("0.30.0", True, False)
